// Package benchutil holds what leasectl's benchmark programs share: building
// the binary, timing whole processes, and medians and percentiles. The
// benchmarks compare against a baseline measured in the same run, because
// these machines are noisy; they are programs, never timed assertions.
package benchutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// BuildLeasectl builds leasectl from the module at the current directory
// into dir and returns the binary's path.
func BuildLeasectl(dir string) (string, error) {
	bin := filepath.Join(dir, "leasectl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build (run from the repository root): %w\n%s", err, out)
	}
	return bin, nil
}

// TimeProcess runs name with args to completion and returns its wall time
// and exit code. Output is discarded unless the process fails unexpectedly.
func TimeProcess(ctx context.Context, env []string, name string, args ...string) (time.Duration, int, error) {
	c := exec.CommandContext(ctx, name, args...)
	if env != nil {
		c.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	start := time.Now()
	err := c.Run()
	d := time.Since(start)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return d, exit.ExitCode(), nil
	}
	if err != nil {
		return d, -1, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
	}
	return d, 0, nil
}

// Stats summarises a sample of durations.
type Stats struct {
	N                     int
	Median, P90, P99, Max time.Duration
}

// Summarize computes Stats of ds.
func Summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(s)-1) + 0.5)
		return s[i]
	}
	return Stats{N: len(s), Median: pct(0.5), P90: pct(0.9), P99: pct(0.99), Max: s[len(s)-1]}
}

// Ms renders d in milliseconds with one decimal.
func Ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

// Ratio is a/b as a number with two decimals.
func Ratio(a, b time.Duration) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

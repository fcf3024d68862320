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
	"strconv"
	"strings"
	"time"
)

// BuildLeasectl builds leasectl from the module at the current directory
// into dir, as releases are built (static, CGO_ENABLED=0: the dynamic
// build also loads libc at every start), and returns the binary's path.
func BuildLeasectl(dir string) (string, error) {
	bin := filepath.Join(dir, "leasectl")
	c := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := c.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build (run from the repository root): %w\n%s", err, out)
	}
	return bin, nil
}

// BuildLeasectlAt builds leasectl as BuildLeasectl does, from the tree of
// git ref (a commit, tag or branch of the repository at the current
// directory) extracted into dir, and returns the binary's path: an
// earlier release measured in the same run as this tree.
func BuildLeasectlAt(ref, dir string) (string, error) {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", "--format=tar", ref)
	extract := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	extract.Stdin = pipe
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := extract.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		_ = extract.Wait()
		return "", fmt.Errorf("git archive %s (run from the repository root, with that commit fetched): %w\n%s", ref, err, archiveErr.String())
	}
	if err := extract.Wait(); err != nil {
		return "", fmt.Errorf("extract %s: %w", ref, err)
	}
	bin := filepath.Join(dir, "leasectl")
	c := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	c.Dir = src
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %w\n%s", ref, err, out)
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

// PeakRSS runs name with args to completion under GNU time (/usr/bin/time)
// and returns the process's peak resident set size in bytes. A process that
// Go starts itself would carry the starting process's peak: Linux counts
// the memory a vfork'ed child shared before its exec, so the measurement
// needs a small parent. Output is discarded; a non-zero exit is an error.
func PeakRSS(ctx context.Context, env []string, name string, args ...string) (int64, error) {
	timeBin, err := exec.LookPath("/usr/bin/time")
	if err != nil {
		return 0, fmt.Errorf("peak RSS needs GNU time (Debian: apt-get install time): %w", err)
	}
	report := filepath.Join(os.TempDir(), fmt.Sprintf("leasectl-bench-rss-%d", os.Getpid()))
	defer os.Remove(report)
	c := exec.CommandContext(ctx, timeBin, append([]string{"-f", "%M", "-o", report, name}, args...)...)
	if env != nil {
		c.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", name, err, stderr.String())
	}
	out, err := os.ReadFile(report)
	if err != nil {
		return 0, err
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GNU time reported %q: %w", out, err)
	}
	return kib * 1024, nil
}

// MiB renders a byte count in MiB with one decimal.
func MiB(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

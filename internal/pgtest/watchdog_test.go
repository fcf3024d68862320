package pgtest_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/lab"
)

// crashEnv makes this test binary start a lab with RunMain and then crash
// in its "tests", as a panicking test does.
const crashEnv = "LAB_TEST_CRASH"

var crashLab *lab.Lab

type crasher struct{}

func (crasher) Run() int {
	fmt.Println(crashLab.Dir)
	_ = os.Stdout.Sync()
	panic("a test that crashes the test binary")
}

func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		os.Exit(pgtest.RunMain(crasher{}, lab.Options{Poolers: []lab.PoolerSpec{}}, &crashLab))
	}
	os.Exit(m.Run())
}

// TestWatchdogStopsTheLabOfACrashedTestBinary: a test binary that panics
// runs none of its cleanup; the watchdog that RunMain started stops its lab
// anyway, and nothing of it is left.
func TestWatchdogStopsTheLabOfACrashedTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil || !strings.Contains(stderr.String(), "a test that crashes") {
		t.Fatalf("the crashing test binary: %v\n%s", err, &stderr)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "/") {
		t.Fatalf("no lab directory reported:\n%s\n%s", out, &stderr)
	}
	dir := sc.Text()
	deadline := time.Now().Add(time.Minute)
	for {
		_, statErr := os.Stat(dir)
		left := lab.ProcessesUsing(dir)
		if os.IsNotExist(statErr) && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the crash, %s exists (%v) and processes %v use it", dir, statErr == nil, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

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

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
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
	// Lazily: only TestLazyLab starts labs, of its own; RunMainLazy also
	// makes this binary the watchdog of their labs.
	os.Exit(pgtest.RunMainLazy(m, pgtest.NewLazy(lab.Options{})))
}

// testsFunc runs "tests" that are a function.
type testsFunc func() int

func (f testsFunc) Run() int { return f() }

// fatalTB records a Fatal instead of ending the test.
type fatalTB struct {
	testing.TB
	fatal string
}

func (tb *fatalTB) Helper() {}

func (tb *fatalTB) Fatal(args ...any) { tb.fatal = fmt.Sprint(args...) }

// TestLazyLab: RunMainLazy starts no lab for tests that do not ask for
// one; the first test that asks starts it, later ones get the same lab,
// and it is stopped, its directory gone, once the tests end. Asked for
// after that, it fails the test.
func TestLazyLab(t *testing.T) {
	idle := pgtest.NewLazy(lab.Options{Poolers: []lab.PoolerSpec{}})
	if code := pgtest.RunMainLazy(testsFunc(func() int { return 0 }), idle); code != 0 {
		t.Fatalf("tests that need no lab: exit %d", code)
	}
	late := &fatalTB{TB: t}
	if l := idle.Get(late); l != nil || !strings.Contains(late.fatal, "after the tests ended") {
		t.Errorf("a lab no test asked for: Get after the tests gave %v, %q", l, late.fatal)
	}

	used := pgtest.NewLazy(lab.Options{Poolers: []lab.PoolerSpec{}})
	var first, second *lab.Lab
	code := pgtest.RunMainLazy(testsFunc(func() int {
		first, second = used.Get(t), used.Get(t)
		return 0
	}), used)
	if code != 0 || first == nil || first != second {
		t.Fatalf("exit %d; labs %p and %p, want one, started once", code, first, second)
	}
	if _, err := os.Stat(first.Dir); !os.IsNotExist(err) {
		t.Errorf("the lab's directory %s is still there after the tests: %v", first.Dir, err)
	}
	if left := lab.ProcessesUsing(first.Dir); len(left) > 0 {
		t.Errorf("processes %v still use the lab after the tests", left)
	}
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

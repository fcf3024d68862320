package pgtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/lab"
)

// TestingM is the part of *testing.M that RunMain needs; a test can pass
// something else that runs "tests" (the watchdog's own test does).
type TestingM interface {
	Run() int
}

// RunMain starts a lab with opts, stores it in *dst, runs the tests and stops
// the lab, returning the exit code for os.Exit. Use it from TestMain:
//
//	var testLab *lab.Lab
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m, lab.Options{}, &testLab)) }
//
// A lab that cannot start (a missing binary, say) fails the whole package
// with the reason; it is never a skip. Ctrl-C during the tests still stops
// the lab, and so does a test binary that dies without its cleanup (a
// panic, SIGKILL, go test's timeout): a watchdog, the test binary run again
// in a session of its own, stops the lab when its pipe from this process
// closes.
//
// It lives here, with the other test plumbing, and not in package lab, so
// that the leasectl binary does not carry it.
func RunMain(m TestingM, opts lab.Options, dst **lab.Lab) int {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		watchdog(dir)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	l, err := lab.Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test lab (real PostgreSQL and PgBouncer are required): %v\n", err)
		return 1
	}
	*dst = l
	if stop, err := startWatchdog(l.Dir); err != nil {
		fmt.Fprintf(os.Stderr, "warning: no watchdog for the test lab (it stays behind if the tests crash): %v\n", err)
	} else {
		defer stop()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			_ = l.Stop(context.Background())
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	if err := l.Stop(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: stop the test lab: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// watchdogEnv names the lab directory a watchdog process looks after.
const watchdogEnv = "LEASECTL_LAB_WATCHDOG_DIR"

// startWatchdog runs this test binary again as the lab's watchdog, with a
// pipe from this process as its stdin, in a session of its own so that
// Ctrl-C and go test's kill do not reach it. The returned function ends it
// once this process has stopped the lab itself.
func startWatchdog(dir string) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), watchdogEnv+"="+dir)
	cmd.Stdin = r // stdout and stderr stay /dev/null: go test must not wait for it
	cmd.SysProcAttr = sessionAttr()
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	return func() { w.Close() }, nil
}

// watchdog waits until its stdin, a pipe from the test binary, closes (the
// binary ended, one way or another) and stops the lab in dir if it is
// still there.
func watchdog(dir string) {
	_, _ = io.Copy(io.Discard, os.Stdin)
	if l, err := lab.Load(dir); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = l.Stop(ctx)
	}
}

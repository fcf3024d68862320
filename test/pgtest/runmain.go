package pgtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
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
	z := NewLazy(opts)
	z.once.Do(z.start)
	if z.err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", z.err)
		return 1
	}
	*dst = z.lab
	return z.runTests(m)
}

// Lazy is a test package's lab that starts only when a test first asks for
// it ([Lazy.Get]), so that a run of tests that need no database (flag and
// usage tests, say) starts no server at all. Use it with [RunMainLazy]:
//
//	var testLab = pgtest.NewLazy(lab.Options{})
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.RunMainLazy(m, testLab)) }
//
//	func needLab(t testing.TB) *lab.Lab { return testLab.Get(t) }
//
// It has RunMain's guarantees: the lab is stopped after the tests, on
// Ctrl-C, and by a watchdog should the test binary die.
type Lazy struct {
	opts lab.Options
	once sync.Once

	mu           sync.Mutex // held while starting and stopping
	lab          *lab.Lab
	err          error
	stopped      bool
	stopWatchdog func()
}

// NewLazy returns a lab, not started, that Get starts with opts.
func NewLazy(opts lab.Options) *Lazy { return &Lazy{opts: opts} }

// Get returns the lab, starting it if no test has yet. A lab that cannot
// start fails the test (and every later one that asks) with the reason;
// it is never a skip.
func (z *Lazy) Get(t testing.TB) *lab.Lab {
	t.Helper()
	z.once.Do(z.start)
	z.mu.Lock()
	l, err := z.lab, z.err
	z.mu.Unlock()
	switch {
	case err != nil:
		t.Fatal(err)
	case l == nil:
		t.Fatal("the test lab was asked for after the tests ended")
	}
	return l
}

// start starts the lab and its watchdog, once.
func (z *Lazy) start() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.stopped {
		z.err = fmt.Errorf("the test lab was asked for after the tests ended")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	l, err := lab.Start(ctx, z.opts)
	cancel()
	if err != nil {
		z.err = fmt.Errorf("cannot start the test lab (real PostgreSQL and PgBouncer are required): %w", err)
		return
	}
	z.lab = l
	if stop, err := startWatchdog(l.Dir); err != nil {
		fmt.Fprintf(os.Stderr, "warning: no watchdog for the test lab (it stays behind if the tests crash): %v\n", err)
	} else {
		z.stopWatchdog = stop
	}
}

// stop stops the lab if it was started; after it, Get fails.
func (z *Lazy) stop(ctx context.Context) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.stopped = true
	if z.lab == nil {
		return nil
	}
	err := z.lab.Stop(ctx)
	z.lab = nil
	if z.stopWatchdog != nil {
		z.stopWatchdog()
		z.stopWatchdog = nil
	}
	return err
}

// RunMainLazy runs the tests with z, which the first test that needs it
// starts, and stops it after them; it returns the exit code for os.Exit.
func RunMainLazy(m TestingM, z *Lazy) int {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		watchdog(dir)
		return 0
	}
	return z.runTests(m)
}

// runTests runs m, stopping the lab (if started) after it and on Ctrl-C.
func (z *Lazy) runTests(m TestingM) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			_ = z.stop(context.Background())
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	if err := z.stop(context.Background()); err != nil {
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
// still there, with its front doors, if any, attached.
func watchdog(dir string) {
	_, _ = io.Copy(io.Discard, os.Stdin)
	if l, _, err := labtest.Load(dir); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = l.Stop(ctx)
	}
}

package lab

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// TestingM is the part of *testing.M that RunMain needs; it keeps this
// package free of the testing package.
type TestingM interface {
	Run() int
}

// RunMain starts a lab with opts, stores it in *dst, runs the tests and stops
// the lab, returning the exit code for os.Exit. Use it from TestMain:
//
//	var testLab *lab.Lab
//
//	func TestMain(m *testing.M) { os.Exit(lab.RunMain(m, lab.Options{}, &testLab)) }
//
// A lab that cannot start (a missing binary, say) fails the whole package
// with the reason; it is never a skip. Ctrl-C during the tests still stops
// the lab.
func RunMain(m TestingM, opts Options, dst **Lab) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	l, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test lab (real PostgreSQL and PgBouncer are required): %v\n", err)
		return 1
	}
	*dst = l
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

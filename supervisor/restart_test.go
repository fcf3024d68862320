package supervisor_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/leasectl/leasectl/test/leasetest"
)

// TestRunRestartsWorkThatReturns: with Restart, work that returns
// nil or an *ExitError runs again, and the key is free between two runs;
// any other error ends Run, as does a policy without Restart.
func TestRunRestartsWorkThatReturns(t *testing.T) {
	const key = 9100032
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := 0
	exit3 := &supervisor.ExitError{Code: 3}
	var restarts []string
	cfg := baseConfig(key)
	err := supervisor.Run(ctx, cfg, func(ctx context.Context) error {
		runs++
		switch runs {
		case 1:
			return nil
		case 2:
			return exit3
		}
		cancel()
		<-ctx.Done()
		return errors.New("stopped on the third run")
	}, supervisor.RestartPolicy{Restart: true, Delay: 20 * time.Millisecond, OnRestart: func(err error, delay time.Duration) {
		if !keyIsFree(t, key) {
			t.Error("the key is held between two runs")
		}
		restarts = append(restarts, describe(err)+" after "+delay.String())
	}})
	if err == nil || err.Error() != "stopped on the third run" {
		t.Errorf("Run = %v, want what the last run of work returned", err)
	}
	if runs != 3 || strings.Join(restarts, "; ") != "<nil> after 20ms; the program exited with status 3 after 20ms" {
		t.Errorf("%d runs, restarts %q; want 3 runs, restarted after nil and after the exit status", runs, restarts)
	}

	// Without Restart, and for an error other than an exit status, one run.
	for name, p := range map[string]supervisor.RestartPolicy{"no restart": {}, "start error": {Restart: true}} {
		runs := 0
		want := error(exit3)
		if name == "start error" {
			want = &supervisor.StartError{Path: "/nonexistent", Err: syscall.ENOENT}
		}
		err := supervisor.Run(context.Background(), cfg, func(context.Context) error { runs++; return want }, p)
		if runs != 1 || !errors.Is(err, want) {
			t.Errorf("%s: %d runs, Run = %v; want one run and %v", name, runs, err, want)
		}
	}
}

func describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestStopSignalStopsTheProgram: a lease whose context ends with a
// supervisor.StopSignal cause stops its program with that signal (SIGINT here,
// not SIGTERM), the log says the program stopped rather than exited by
// itself, and a restart policy does not run it again: the outcome of
// stopping by a signal is the same every time.
func TestStopSignalStopsTheProgram(t *testing.T) {
	const key = 9100033
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	var log leasetest.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	cmd := &supervisor.Command{Path: w, Args: []string{w, "-notify", events.Path}, Grace: 30 * time.Second, Logger: logger}
	cfg := baseConfig(key)
	cfg.Logger = logger
	for i := range 3 {
		ctx, stop := context.WithCancelCause(context.Background())
		var wg sync.WaitGroup
		var err error
		wg.Add(1)
		go func() {
			defer wg.Done()
			err = supervisor.Run(ctx, cfg, cmd.Work, supervisor.RestartPolicy{Restart: true, Delay: 20 * time.Millisecond})
		}()
		started, ok := events.Next(time.Minute)
		if !ok || started.Kind != leasetest.Start {
			t.Fatalf("round %d: no start of the program: %+v\n%s", i, started, log.String())
		}
		stop(&supervisor.StopSignal{Signal: syscall.SIGINT})
		term, ok := events.Next(time.Minute)
		if !ok || term.Kind != leasetest.Term || term.PID != started.PID || term.Detail != "interrupt" {
			t.Errorf("round %d: the program got %+v, want SIGINT", i, term)
		}
		wg.Wait()
		if err != nil {
			t.Errorf("round %d: Run = %v, want the program's exit status 0", i, err)
		}
	}
	// Each start is logged before Run returns: one per round means
	// no restart after the stop.
	out := log.String()
	for want, n := range map[string]int{
		`msg="program started"`:                  3,
		`msg="forwarding signal to the program"`: 3,
		`msg="program stopped"`:                  3,
		`msg="program exited"`:                   0,
		"standing by again":                      0,
		"SIGTERM":                                0,
	} {
		if got := strings.Count(out, want); got != n {
			t.Errorf("%d × %q in the log, want %d:\n%s", got, want, n, out)
		}
	}
}

// TestCommandRunsOnlyUnderTheLease: the program sees the lease in its
// environment and the lease socket as descriptor 3, and its exit status
// comes back as an *ExitError.
func TestCommandRunsOnlyUnderTheLease(t *testing.T) {
	const key = 9100010
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	cmd := &supervisor.Command{Path: w, Args: []string{w, "-notify", events.Path, "-exit", "5"}, Grace: time.Second}
	err = lease.Run(context.Background(), baseConfig(key), cmd.Work)
	var exit *supervisor.ExitError
	if !errors.As(err, &exit) || exit.Code != 5 {
		t.Fatalf("Run = %v, want the program's exit status 5", err)
	}
	ev, ok := events.Next(time.Minute)
	if !ok || ev.Kind != leasetest.Start || ev.Role != "test" || ev.Key != "9100010" || ev.BackendPID == "" || ev.LeaseFD != "socket" {
		t.Errorf("the program reported %+v", ev)
	}
	if err := (&supervisor.Command{Path: w}).Work(context.Background()); err == nil {
		t.Error("Command.Work outside lease.Run started a program")
	}
}

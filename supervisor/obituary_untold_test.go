//go:build linux

package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// watchObituary returns a channel closed once process obit has exited.
func watchObituary(obit int) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for syscall.Kill(obit, 0) == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return gone
}

// TestObituaryEndsATermItWasNotToldOf: this process began a term (the
// lease records it before its program starts) and died before it told the
// obituary. The obituary finds the term by its holder, this host and
// process, among the keys of ForKeys, and records its end: no program ran
// under it. A live term of another holder is left alone. Its kept
// connection is open before this process dies.
func TestObituaryEndsATermItWasNotToldOf(t *testing.T) {
	const key, otherKey = 9100071, 9100072
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const app = "obituary untold test"
	obit, err := supervisor.StartObituary(self, nil, testLab.DirectDSN(), "untold", "text",
		supervisor.KeepConnection(app), supervisor.ForKeys(key, otherKey))
	if err != nil {
		t.Fatal(err)
	}
	defer obit.Close()
	tap := tapObituary(t, obit.PID())
	defer tap.cut()
	gone := watchObituary(obit.PID())

	ctx := context.Background()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	if _, err := term.Ensure(ctx, conn); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	begin := func(key int64, pid int) string {
		id, err := term.NewID()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := term.Start(ctx, conn, term.Begin{
			Key: key, Role: "untold", ID: id, Keep: 10,
			Holder:    term.Holder{Host: host, OSPID: pid},
			Timing:    timing.Lease{HeartbeatInterval: time.Hour, HeartbeatTimeout: 5 * time.Second, StopTimeout: 10 * time.Second},
			FenceWait: time.Second, Timeout: 5 * time.Second,
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	mine := begin(key, os.Getpid())
	theirs := begin(otherKey, os.Getpid()+1<<20) // no pid of this host's
	defer func() { _, _ = term.End(ctx, conn, otherKey, theirs, term.Released, 0) }()

	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the obituary keeps %d connections named %q, want 1", n, app)
		}
	}
	tap.cut()
	select {
	case <-gone:
	case <-time.After(time.Minute):
		t.Fatal("the obituary did not exit after its pipe closed")
	}
	cur, _, ok, err := term.Current(ctx, conn, key)
	if err != nil || !ok {
		t.Fatalf("current term: %v, %v", ok, err)
	}
	if cur.ID != mine || cur.Live() || cur.EndReason != term.Killed {
		t.Errorf("the term this process began: %+v, want it ended %q", cur, term.Killed)
	}
	cur, _, _, err = term.Current(ctx, conn, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if cur.ID != theirs || !cur.Live() {
		t.Errorf("another holder's term: %+v, want it live", cur)
	}
}

// TestObituaryStopsAProgramWhoseBeginItMissed: the obituary heard of the
// term and the program's id before the program started, but not of the
// program's pid (this process died before it said begin; the tap drops
// that note here). It finds the program and its daemon by the id, kills
// them, and records the end of the term.
func TestObituaryStopsAProgramWhoseBeginItMissed(t *testing.T) {
	const key = 9100073
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	obit, err := supervisor.StartObituary(self, nil, testLab.DirectDSN(), "missed", "text", supervisor.ForKeys(key))
	if err != nil {
		t.Fatal(err)
	}
	defer obit.Close()
	tap := tapObituary(t, obit.PID(), func(n map[string]any) bool { return n["event"] == "begin" })
	defer tap.cut()
	gone := watchObituary(obit.PID())
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	lockFile := filepath.Join(t.TempDir(), "missed.lock")
	cmd := &supervisor.Command{Path: w, Args: []string{w, "-notify", events.Path, "-lock", lockFile, "-daemon", "setsid"}, Grace: time.Second, Obituary: obit}
	cfg := baseConfig(key)
	cfg.Role = "missed"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- lease.Run(ctx, cfg, func(ctx context.Context) error {
			err := cmd.Work(ctx)
			select { // this process is "dead": the obituary records the end
			case <-gone:
			case <-time.After(time.Minute):
			}
			return err
		})
	}()
	ev, ok := events.Next(time.Minute)
	if !ok || ev.Kind != leasetest.Start {
		t.Fatalf("event %+v, %v; want the program's start", ev, ok)
	}
	for seen := map[any]bool{}; !seen["term"] || !seen["begin"]; {
		select {
		case n := <-tap.notes:
			seen[n["event"]] = true
		case <-time.After(time.Minute):
			t.Fatalf("the notes of the program did not go through the tap: %v", seen)
		}
	}
	tap.cut()
	select {
	case <-gone:
	case <-time.After(time.Minute):
		t.Fatal("the obituary did not exit after its pipe closed")
	}
	var exit *supervisor.ExitError
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		err = <-done
		t.Error("the program still runs 30s after the obituary exited")
	}
	if !errors.As(err, &exit) || exit.Signal != syscall.SIGKILL {
		t.Errorf("Run = %v, want the program killed by SIGKILL", err)
	}
	f, err := os.OpenFile(lockFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the program's daemon still holds its lock: %v", err)
	}
	hist, err := term.History(context.Background(), pgtest.Conn(t, testLab.DirectDSN(), ""), key, time.Time{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].EndReason != term.Killed {
		t.Errorf("history %+v, want the term ended %q", hist, term.Killed)
	}
}

package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// terminate ends a backend the way an operator (or leasectl failover) does.
func terminate(t *testing.T, key int64, pid uint32) {
	t.Helper()
	if err := leasetest.Terminate(context.Background(), pgtest.Conn(t, testLab.DirectDSN(), ""), key, pid); err != nil {
		t.Fatal(err)
	}
}

// keyIsFree reports whether another session could take key now.
func keyIsFree(t *testing.T, key int64) bool {
	t.Helper()
	return leasetest.KeyFree(t, testLab.DirectDSN(), key)
}

// recorder keeps the state changes of one lease.
type recorder struct {
	mu      sync.Mutex
	changes []lease.Change
	notify  chan lease.Change
}

func newRecorder() *recorder { return &recorder{notify: make(chan lease.Change, 4096)} }

func (r *recorder) record(c lease.Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
	r.notify <- c
}

// waitFor returns the next change into state to, failing the test after a
// generous limit (a hang, not a timing assertion).
func (r *recorder) waitFor(t *testing.T, to lease.State) lease.Change {
	t.Helper()
	limit := time.After(time.Minute)
	for {
		select {
		case c := <-r.notify:
			if c.To == to {
				return c
			}
		case <-limit:
			t.Fatalf("no change to %s within a minute; changes so far: %v", to, r.states())
		}
	}
}

func (r *recorder) states() []lease.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lease.State
	for _, c := range r.changes {
		out = append(out, c.To)
	}
	return out
}

func (r *recorder) count(s lease.State) int {
	n := 0
	for _, st := range r.states() {
		if st == s {
			n++
		}
	}
	return n
}

// baseConfig is a lease on key with fast retries, the real preflight (the
// probe) and the given recorder. Heartbeats are an hour apart, so that a
// test sees what the socket watch alone notices.
func baseConfig(dsn string, key int64, rec *recorder) lease.Config {
	return lease.Config{
		Role: "test", Key: key, DSN: dsn,
		RetryInterval: 200 * time.Millisecond, HeartbeatInterval: time.Hour, HeartbeatTimeout: 5 * time.Second,
		OnStateChange: rec.record,
	}
}

type runResult struct {
	err  error
	done chan struct{}
}

func start(ctx context.Context, cfg lease.Config, work func(context.Context) error) *runResult {
	r := &runResult{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = lease.Run(ctx, cfg, work)
	}()
	return r
}

func (r *runResult) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(time.Minute):
		t.Fatal("lease.Run did not return within a minute")
		return nil
	}
}

// recv returns the next value from ch, failing the test when none comes
// within a minute (a hang, not a timing assertion): a broken lease must not
// hang the suite.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s did not happen within a minute", what)
		var zero T
		return zero
	}
}

// TestOneLeaderAtATimeAndCleanHandoff: of two leases on one key exactly one
// works at any time; when the leader's Run is cancelled it stops work,
// releases the key and the stand-by takes over; after both return the key
// is free.
func TestOneLeaderAtATimeAndCleanHandoff(t *testing.T) {
	const key = 9100001
	var active, maxActive atomic.Int32
	started := make(chan string, 8)
	work := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			n := active.Add(1)
			defer active.Add(-1)
			if n > maxActive.Load() {
				maxActive.Store(n)
			}
			if s, ok := lease.SessionFrom(ctx); !ok || s.Key != key || s.BackendPID == 0 {
				t.Errorf("work's session = %+v, %v", s, ok)
			}
			started <- name
			<-ctx.Done()
			return context.Cause(ctx)
		}
	}
	recA, recB := newRecorder(), newRecorder()
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelA()
	defer cancelB()
	a := start(ctxA, baseConfig(testLab.DirectDSN(), key, recA), work("A"))
	first := recv(t, started, "a first leader")
	b := start(ctxB, baseConfig(testLab.DirectDSN(), key, recB), work("B"))
	if first != "A" {
		t.Fatalf("first leader %s, want A (B had not started)", first)
	}
	recB.waitFor(t, lease.StandingBy)
	if keyIsFree(t, key) {
		t.Fatal("the key is free while A leads")
	}

	cancelA()
	if err := a.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("A's Run returned %v, want what its work returned (context.Canceled)", err)
	}
	if got := recv(t, started, "a takeover after A stopped"); got != "B" {
		t.Fatalf("after A stopped, %s started; want B", got)
	}
	cancelB()
	b.wait(t)
	if maxActive.Load() != 1 {
		t.Errorf("%d works ran at once", maxActive.Load())
	}
	if !keyIsFree(t, key) {
		t.Error("the key is still held after both Runs returned")
	}
	if got := recA.states(); got[len(got)-1] != lease.Stopped {
		t.Errorf("A's last state %s, want stopped", got[len(got)-1])
	}
}

// TestTerminatedSessionIsNoticedAtOnce: with an hour between heartbeats,
// only reading the idle connection can notice that the leader's backend was
// terminated. Work's context must end with a *LostError, and the lease must
// lead again on a new session.
func TestTerminatedSessionIsNoticedAtOnce(t *testing.T) {
	const key = 9100002
	rec := newRecorder()
	causes := make(chan error, 4)
	pids := make(chan uint32, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(ctx, baseConfig(testLab.DirectDSN(), key, rec), func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		pids <- s.BackendPID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	})
	first := recv(t, pids, "a first leader")
	terminate(t, key, first)
	var lost *lease.LostError
	if cause := recv(t, causes, "the end of work after the termination"); !errors.As(cause, &lost) {
		t.Fatalf("work's context cause = %v, want a *lease.LostError", cause)
	}
	if second := recv(t, pids, "leading again after the termination"); second == first {
		t.Errorf("led again on backend %d, the terminated one", second)
	}
	cancel()
	r.wait(t)
	if !keyIsFree(t, key) {
		t.Error("key held after Run returned")
	}
}

// TestHeartbeatsKeepTheSession: heartbeats interrupt the read of the idle
// connection many times; the session must survive every interruption (one
// Leading, no loss).
func TestHeartbeatsKeepTheSession(t *testing.T) {
	const key = 9100003
	rec := newRecorder()
	cfg := baseConfig(testLab.DirectDSN(), key, rec)
	cfg.HeartbeatInterval = 20 * time.Millisecond
	beats := make(chan time.Time, 1024)
	cfg.OnHeartbeat = func(at time.Time) { beats <- at }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	r := start(ctx, cfg, func(ctx context.Context) error {
		close(leading)
		<-ctx.Done()
		return nil
	})
	recv(t, leading, "leading")
	for n := 0; n < 20; n++ {
		recv(t, beats, fmt.Sprintf("heartbeat %d", n+1))
	}
	cancel()
	if err := r.wait(t); err != nil {
		t.Errorf("Run = %v, want work's nil", err)
	}
	if n := rec.count(lease.Leading); n != 1 {
		t.Errorf("led %d times, want once: states %v", n, rec.states())
	}
}

// TestWorkReturningEndsRunAndReleasesTheKey.
func TestWorkReturningEndsRunAndReleasesTheKey(t *testing.T) {
	const key = 9100004
	want := errors.New("work is done")
	err := lease.Run(context.Background(), baseConfig(testLab.DirectDSN(), key, newRecorder()), func(context.Context) error { return want })
	if !errors.Is(err, want) {
		t.Fatalf("Run = %v, want work's error", err)
	}
	if !keyIsFree(t, key) {
		t.Error("key held after Run returned")
	}
}

// refusedTwice runs a lease on dsn until it has been refused twice, checks
// that it never led, and returns the refusal.
func refusedTwice(t *testing.T, cfg lease.Config, rec *recorder) lease.Change {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var led atomic.Bool
	r := start(ctx, cfg, func(ctx context.Context) error { led.Store(true); <-ctx.Done(); return nil })
	first := rec.waitFor(t, lease.Refused)
	rec.waitFor(t, lease.Refused) // it keeps standing by, and keeps refusing
	cancel()
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if led.Load() || rec.count(lease.Leading) > 0 {
		t.Fatalf("it led: states %v", rec.states())
	}
	return first
}

// TestStandbyNeverLeads: a lock on a hot standby fences nothing on the
// primary.
func TestStandbyNeverLeads(t *testing.T) {
	rec := newRecorder()
	c := refusedTwice(t, baseConfig(testLab.StandbyDSN(), 9100005, rec), rec)
	var refused *lease.RefusedError
	if !errors.As(c.Err, &refused) || !bytes.Contains([]byte(refused.Reason), []byte("standby")) {
		t.Errorf("refusal %v does not say standby", c.Err)
	}
}

// TestFailingPreflightNeverLeads.
func TestFailingPreflightNeverLeads(t *testing.T) {
	rec := newRecorder()
	cfg := baseConfig(testLab.DirectDSN(), 9100006, rec)
	cfg.Preflight = func(context.Context, *pgx.ConnConfig) error { return errors.New("unstable") }
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	refusedTwice(t, cfg, rec)
	if !bytes.Contains(logs.Bytes(), []byte(`"level":"ERROR","msg":"refusing to lead over this connection"`)) ||
		!bytes.Contains(logs.Bytes(), []byte("unstable")) {
		t.Errorf("the refusal was not logged as an error with its reason:\n%s", logs.String())
	}
}

// TestTransactionPoolerNeverLeads runs the real preflight (the probe) on the
// DSN of PgBouncer in transaction mode.
func TestTransactionPoolerNeverLeads(t *testing.T) {
	rec := newRecorder()
	c := refusedTwice(t, baseConfig(testLab.PoolerDSN("transaction"), 9100007, rec), rec)
	var pe *lease.ProbeError
	if !errors.As(c.Err, &pe) || len(pe.Report.Reasons()) == 0 {
		t.Errorf("refusal %v does not carry the probe's reasons", c.Err)
	}
}

// TestRestartedServerIsNoticedAndLedAgain.
func TestRestartedServerIsNoticedAndLedAgain(t *testing.T) {
	const key = 9100008
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{}, 4)
	r := start(ctx, baseConfig(testLab.DirectDSN(), key, rec), func(ctx context.Context) error {
		leading <- struct{}{}
		<-ctx.Done()
		return nil
	})
	recv(t, leading, "leading")
	if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	recv(t, leading, "leading again after the restart")
	cancel()
	r.wait(t)
	if n := rec.count(lease.Leading); n != 2 {
		t.Errorf("led %d times, want twice: %v", n, rec.states())
	}
}

// TestUnreachableServerKeepsRetrying: Run does not give up while the
// database is down; it logs each failure without the DSN's password.
func TestUnreachableServerKeepsRetrying(t *testing.T) {
	rec := newRecorder()
	const secret = "s3cr3t-pw"
	cfg := baseConfig("postgres://postgres:"+secret+"@127.0.0.1:1/postgres?sslmode=disable", 9100009, rec)
	var logs leasetest.Buffer
	retries := make(chan struct{}, 16)
	cfg.Logger = slog.New(&countingHandler{Handler: slog.NewTextHandler(&logs, nil), msg: "cannot connect; retrying", hits: retries})
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, cfg, func(context.Context) error { t.Error("led without a server"); return nil })
	for i := 0; i < 3; i++ {
		recv(t, retries, fmt.Sprintf("retry %d", i+1))
	}
	cancel()
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the password appears in the logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the logs do not say why:\n%s", logs.String())
	}
}

func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]lease.Config{
		"probe key":      {Key: locks.DefaultProbeKey, DSN: "postgres://h/db"},
		"server timeout": {Key: 1, DSN: "postgres://h/db", ServerTimeout: 20 * time.Second},
		"negative":       {Key: 1, DSN: "postgres://h/db", HeartbeatInterval: -time.Second},
	} {
		var ce *lease.ConfigError
		if err := lease.Run(context.Background(), c, nil); !errors.As(err, &ce) {
			t.Errorf("%s: Run = %v, want a *lease.ConfigError", name, err)
		}
	}
	var de *dbconn.DSNError
	if err := lease.Run(context.Background(), lease.Config{Key: 1, DSN: "postgres://u:pw@h:notaport/db"}, nil); !errors.As(err, &de) {
		t.Errorf("bad DSN: Run = %v, want a *dbconn.DSNError", err)
	}
}

// countingHandler signals hits for each record with message msg.
type countingHandler struct {
	slog.Handler
	msg  string
	hits chan struct{}
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.hits <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, hits: h.hits}
}

// TestNewLeaderWaitsForTheStopFence: when the server ends the leader's
// session (pg_terminate_backend), a stand-by gets the key at once, but must
// not start work until the old leader's work has returned: the old leader
// holds the stop fence until then. The order is asserted, not a time.
func TestNewLeaderWaitsForTheStopFence(t *testing.T) {
	const key = 9100020
	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	started := make(chan uint32, 4)
	work := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			s, _ := lease.SessionFrom(ctx)
			note(name + " started")
			started <- s.BackendPID
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // draining
			note(name + " returned")
			return nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recA, recB := newRecorder(), newRecorder()
	a := start(ctx, baseConfig(testLab.DirectDSN(), key, recA), work("A"))
	pidA := recv(t, started, "A leads")
	b := start(ctx, baseConfig(testLab.DirectDSN(), key, recB), work("B"))
	recB.waitFor(t, lease.StandingBy)

	terminate(t, key, pidA)
	pidB := recv(t, started, "B leads after A's termination")
	if pidB == pidA {
		t.Fatalf("B leads on A's terminated backend %d", pidA)
	}
	cancel()
	a.wait(t)
	b.wait(t)
	mu.Lock()
	defer mu.Unlock()
	if len(events) < 3 || events[0] != "A started" || events[1] != "A returned" || events[2] != "B started" {
		t.Errorf("events %q: B's work must start only after A's returned", events)
	}
}

// TestSessionsNameTheReplica: the lease and stop fence sessions carry
// application_name "leasectl lease ROLE@HOST#PID" (and " fence"), unless the
// DSN names itself, which is kept as given; the fence session holds the
// key's fence while work runs.
func TestSessionsNameTheReplica(t *testing.T) {
	const key = 9100021
	host, _ := os.Hostname()
	for _, tc := range []struct {
		dsn, want string
	}{
		{testLab.DirectDSN(), "leasectl lease test@" + host + "#" + strconv.Itoa(os.Getpid())},
		{testLab.DirectDSN() + "&application_name=poller-7f9c", "poller-7f9c"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan [2]string, 1)
		observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
		r := start(ctx, baseConfig(tc.dsn, key, newRecorder()), func(ctx context.Context) error {
			s, _ := lease.SessionFrom(ctx)
			var main, fence string
			err := observer.QueryRow(ctx, `SELECT
  (SELECT application_name FROM pg_stat_activity WHERE pid = $1),
  (SELECT a.application_name FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND a.pid = $2
      AND l.classid = $3::bigint::oid AND l.objid = $4::bigint::oid)`,
				int32(s.BackendPID), int32(s.FenceBackendPID), int64(uint64(key)>>32), int64(uint32(key))).Scan(&main, &fence)
			if err != nil {
				t.Error(err)
			}
			got <- [2]string{main, fence}
			return nil
		})
		names := recv(t, got, "work reading its session names")
		r.wait(t)
		cancel()
		if names[0] != tc.want || names[1] != tc.want+" fence" {
			t.Errorf("DSN %s: lease session %q, fence session %q; want %q and %q fence", tc.dsn, names[0], names[1], tc.want, tc.want)
		}
	}
}

package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// stopDelay is how long the work of a fleet takes to return once its
// context ends: a program that drains its work.
const stopDelay = 300 * time.Millisecond

// workStart is one start of a fleet member's work.
type workStart struct {
	member  int
	session lease.Session
	at      time.Time
}

// fleet is several leases on one key in this process, whose works report
// when they start and whether another one was still running then.
type fleet struct {
	t      *testing.T
	key    int64
	recs   []*recorder
	runs   []*runResult
	cancel context.CancelFunc
	starts chan workStart

	mu       sync.Mutex
	running  int
	overlaps []string
}

// newFleet starts n leases on key with cfg's settings (Key, DSN and the
// state hook are set here); they stop when the test ends.
func newFleet(t *testing.T, n int, key int64, cfg lease.Config) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, key: key, cancel: cancel, starts: make(chan workStart, 1024)}
	for i := range n {
		rec := newRecorder()
		c := cfg
		c.Key, c.OnStateChange = key, rec.record
		if c.DSN == "" {
			c.DSN = testLab.DirectDSN()
		}
		f.recs = append(f.recs, rec)
		f.runs = append(f.runs, start(ctx, c, f.work(i)))
	}
	t.Cleanup(f.stop)
	return f
}

func (f *fleet) work(member int) func(context.Context) error {
	return func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		f.mu.Lock()
		if f.running > 0 {
			f.overlaps = append(f.overlaps, fmt.Sprintf("member %d started on backend %d while %d other work(s) ran", member, s.BackendPID, f.running))
		}
		f.running++
		f.mu.Unlock()
		f.starts <- workStart{member: member, session: *s, at: time.Now()}
		<-ctx.Done()
		time.Sleep(stopDelay)
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		return nil
	}
}

// nextStart waits for the next start of work (a hang, not a timing
// assertion, fails the test).
func (f *fleet) nextStart(what string) workStart {
	f.t.Helper()
	select {
	case s := <-f.starts:
		return s
	case <-time.After(2 * time.Minute):
		f.t.Fatalf("no work started within 2 minutes %s", what)
		return workStart{}
	}
}

// settle waits until every member other than the leader stands by.
func (f *fleet) settle(leader int) {
	f.t.Helper()
	for i, rec := range f.recs {
		if i == leader {
			continue
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			states := rec.states()
			if len(states) > 0 && states[len(states)-1] == lease.StandingBy {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("member %d is not standing by: %v", i, states)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// checkOverlaps fails the test for every start of work beside another.
func (f *fleet) checkOverlaps() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.overlaps {
		f.t.Error("overlap: " + o)
	}
}

func (f *fleet) stop() {
	f.cancel()
	for _, r := range f.runs {
		r.wait(f.t)
	}
}

// termFaults are the faults that end every session of the leader at once:
// a server restart, and terminations in one statement. Each returns once
// the fault has been injected.
var termFaults = []struct {
	name  string
	apply func(t *testing.T, leader lease.Session)
}{
	{"pg_ctl restart -m fast", func(t *testing.T, _ lease.Session) {
		if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
			t.Fatal(err)
		}
	}},
	{"pg_ctl restart -m immediate", func(t *testing.T, _ lease.Session) {
		if err := testLab.RestartPrimary(context.Background(), "immediate"); err != nil {
			t.Fatal(err)
		}
	}},
	{"pg_terminate_backend by application_name", func(t *testing.T, _ lease.Session) {
		admin := pgtest.Conn(t, testLab.DirectDSN(), "term-test-admin")
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'leasectl lease term-test@%'`)
	}},
	{"the lease and fence backends terminated in one statement", func(t *testing.T, leader lease.Session) {
		admin := pgtest.Conn(t, testLab.DirectDSN(), "term-test-admin")
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($1, $2)`, int32(leader.BackendPID), int32(leader.FenceBackendPID))
	}},
}

// TestEndingEverySessionOfTheLeaderNeverOverlaps: when the server ends the
// leader's lease and fence sessions at once, the stop fence is gone with
// them; the durable term keeps the next leader's work from starting until
// the old leader has recorded that its work stopped. Three leases with the
// default timings, work that takes 300 ms to stop, every fault twice.
func TestEndingEverySessionOfTheLeaderNeverOverlaps(t *testing.T) {
	for i, fault := range termFaults {
		t.Run(fault.name, func(t *testing.T) {
			f := newFleet(t, 3, 9100100+int64(i), lease.Config{Role: "term-test", RetryInterval: time.Second})
			lead := f.nextStart("at first")
			f.settle(lead.member)
			var took []time.Duration
			for round := range 2 {
				t0 := time.Now()
				fault.apply(t, lead.session)
				next := f.nextStart(fmt.Sprintf("after %s (round %d)", fault.name, round+1))
				if next.session.Epoch <= lead.session.Epoch {
					t.Errorf("round %d: the new term's epoch %d is not above the old one's %d", round+1, next.session.Epoch, lead.session.Epoch)
				}
				took = append(took, next.at.Sub(t0))
				lead = next
				f.settle(lead.member)
			}
			t.Logf("from the fault to the next start (work takes %s to stop): %v", stopDelay, took)
			f.checkOverlaps()
		})
	}
}

// holdWithTerm takes key on a plain session (no lease), begins a term on it
// with timing tm, and returns the session: a holder that never renews.
func holdWithTerm(t *testing.T, key int64, tm timing.Lease) (*pgx.Conn, term.Started) {
	t.Helper()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "term-test-holder")
	if err := term.Create(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", key)
	id, err := term.NewID()
	if err != nil {
		t.Fatal(err)
	}
	st, err := term.Start(context.Background(), conn, term.Begin{Key: key, Role: "term-test", ID: id, Timing: tm, Keep: 10,
		Holder: term.Holder{Host: "test", OSPID: os.Getpid(), Application: "term-test-holder"}})
	if err != nil {
		t.Fatal(err)
	}
	return conn, st
}

// shortTiming is a lease's timing whose term deadline is a few seconds.
var shortTiming = timing.Lease{HeartbeatInterval: time.Second, HeartbeatTimeout: 500 * time.Millisecond, StopTimeout: time.Second}

// TestDeadHolderCostsTheDeadline: a holder whose sessions end without it
// recording the end of its term (it died with them) cannot tell the next
// leader that its work is gone; the next leader begins only once the term's
// deadline has passed, and the history says so.
func TestDeadHolderCostsTheDeadline(t *testing.T) {
	const key = 9100110
	conn, st := holdWithTerm(t, key, shortTiming)
	f := newFleet(t, 1, key, lease.Config{Role: "term-test", RetryInterval: 200 * time.Millisecond,
		HeartbeatInterval: shortTiming.HeartbeatInterval, HeartbeatTimeout: shortTiming.HeartbeatTimeout, StopTimeout: shortTiming.StopTimeout})
	f.recs[0].waitFor(t, lease.StandingBy)
	conn.Close(context.Background()) // the holder dies: the key is free, its term is not ended
	next := f.nextStart("after the holder died")
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	hist, err := term.History(context.Background(), admin, key, time.Time{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Epoch != next.session.Epoch || hist[1].Epoch != st.Epoch {
		t.Fatalf("history %+v, want the new term %d above the dead holder's %d", hist, next.session.Epoch, st.Epoch)
	}
	old, cur := hist[1], hist[0]
	if old.EndReason != term.DeadlinePassed || !old.Ended.Equal(old.Renewed) {
		t.Errorf("the dead holder's term ended %s at %s (renewed %s), want %q at its last renewal", old.EndReason, old.Ended, old.Renewed, term.DeadlinePassed)
	}
	if cur.Began.Before(old.Deadline()) {
		t.Errorf("the new term began at %s, before the dead holder's deadline %s (server clock)", cur.Began, old.Deadline())
	}
	if !cur.HasPrevious || cur.LeaderlessBefore < shortTiming.TermDeadline() {
		t.Errorf("leaderless before the new term: %s (%v), want at least the deadline %s", cur.LeaderlessBefore, cur.HasPrevious, shortTiming.TermDeadline())
	}
}

// TestHolderWithoutSignsOfLifeIsEvicted: a stand-by ends the session of a
// key holder that shows no sign of life, and then leads: a holder that
// never renews its term (a frozen leader), and a holder that has held the
// key idle without beginning a term (a frozen stand-by that the server
// granted the key; a holder without a lease mark is another elector's,
// which a lease leaves alone: cmd's rolling-deploy test).
func TestHolderWithoutSignsOfLifeIsEvicted(t *testing.T) {
	cfg := lease.Config{Role: "term-test", RetryInterval: 200 * time.Millisecond,
		HeartbeatInterval: shortTiming.HeartbeatInterval, HeartbeatTimeout: shortTiming.HeartbeatTimeout, StopTimeout: shortTiming.StopTimeout}
	for _, c := range []struct {
		name   string
		key    int64
		hold   func(t *testing.T, key int64) *pgx.Conn
		reason string
	}{
		{"a term never renewed", 9100111, func(t *testing.T, key int64) *pgx.Conn {
			conn, _ := holdWithTerm(t, key, shortTiming)
			return conn
		}, term.Evicted},
		{"the key held idle without a term", 9100112, func(t *testing.T, key int64) *pgx.Conn {
			// A lease session, by its mark, that holds the key and begins
			// no term: a frozen stand-by that the server granted the key.
			conn := pgtest.Conn(t, testLab.DirectDSN(), "term-test-holder")
			if err := term.Create(context.Background(), conn); err != nil {
				t.Fatal(err)
			}
			if ok, err := locks.TakeMark(context.Background(), conn, shortTiming.Stopped()); err != nil || !ok {
				t.Fatalf("take the lease mark: %v, %v", ok, err)
			}
			pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", key)
			return conn
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := c.hold(t, c.key)
			pid := pgtest.PID(t, conn)
			f := newFleet(t, 1, c.key, cfg)
			next := f.nextStart("after the holder was evicted")
			var alive bool
			admin := pgtest.Conn(t, testLab.DirectDSN(), "")
			if err := admin.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
				t.Fatal(err)
			}
			if alive {
				t.Errorf("the holder's backend %d is still there after pid %d led", pid, next.session.BackendPID)
			}
			if c.reason == "" {
				return
			}
			hist, err := term.History(context.Background(), admin, c.key, time.Time{}, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) != 2 || hist[1].EndReason != c.reason {
				t.Errorf("history %+v, want the evicted term to end %q", hist, c.reason)
			}
		})
	}
}

// TestRoleTimeoutsDoNotEndLeaseSessions: a role whose settings end idle
// sessions after 2 s and cancel statements after 500 ms (ALTER ROLE ...
// SET) still leads and stands by: the lease sets its own timeouts to 0. The
// role may not create the term record, so the lease runs without it and
// says once per connect what that leaves uncovered and what fixes it.
func TestRoleTimeoutsDoNotEndLeaseSessions(t *testing.T) {
	const key = 9100120
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS lease_timeouts",
		"CREATE ROLE lease_timeouts LOGIN PASSWORD 'timeouts-secret'",
		"ALTER ROLE lease_timeouts SET idle_session_timeout = '2s'",
		"ALTER ROLE lease_timeouts SET statement_timeout = '500ms'",
		"ALTER ROLE lease_timeouts SET idle_in_transaction_session_timeout = '1s'",
	} {
		pgtest.Exec(t, admin, stmt)
	}
	if err := testLab.AddLogin("lease_timeouts", "timeouts-secret"); err != nil {
		t.Fatal(err)
	}
	var logs leasetest.Buffer
	cfg := lease.Config{Role: "term-test", DSN: testLab.DSN(testLab.Primary.Port, "lease_timeouts", "postgres"),
		RetryInterval: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	f := newFleet(t, 2, key, cfg)
	lead := f.nextStart("at first")
	f.settle(lead.member)
	time.Sleep(3 * time.Second) // longer than the role's idle_session_timeout and statement_timeout
	for i, rec := range f.recs {
		if n := rec.count(lease.Connecting); n != 1 {
			t.Errorf("member %d connected %d times, want once (a session was ended): %v", i, n, rec.states())
		}
	}
	// Whether an earlier test created the schema decides which advice.
	if out := logs.String(); !(strings.Contains(out, "may not create it") && strings.Contains(out, "leasectl fence init")) &&
		!(strings.Contains(out, `GRANT USAGE ON SCHEMA leasectl TO`) && strings.Contains(out, `ON leasectl.term, leasectl.term_history TO`)) {
		t.Errorf("the lease did not say that the term record is missing and how to create it:\n%s", out)
	}
}

// TestRefusedLoginsBackOff: when the lease role may no longer log in (ALTER
// ROLE ... NOLOGIN) and its sessions end, three leases retry with a
// backoff, one login at a time, instead of a burst of failed logins (each
// one a line in the server's log), and lead again once the role may log
// in.
func TestRefusedLoginsBackOff(t *testing.T) {
	const key = 9100130
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS lease_nologin",
		"CREATE ROLE lease_nologin LOGIN PASSWORD 'nologin-secret'",
	} {
		pgtest.Exec(t, admin, stmt)
	}
	if err := testLab.AddLogin("lease_nologin", "nologin-secret"); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, 3, key, lease.Config{Role: "term-test", DSN: testLab.DSN(testLab.Primary.Port, "lease_nologin", "postgres")})
	lead := f.nextStart("at first")
	f.settle(lead.member)

	before := strings.Count(readFile(t, testLab.Primary.LogFile), "is not permitted to log in")
	pgtest.Exec(t, admin, "ALTER ROLE lease_nologin NOLOGIN")
	pgtest.Exec(t, admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'lease_nologin'")
	time.Sleep(20 * time.Second) // the fault's length: 20 s without logins
	failed := strings.Count(readFile(t, testLab.Primary.LogFile), "is not permitted to log in") - before
	given := time.Now()
	pgtest.Exec(t, admin, "ALTER ROLE lease_nologin LOGIN")
	next := f.nextStart("after LOGIN was given back")
	t.Logf("3 leases made %d failed logins in 20 s; the next work started %s after LOGIN was given back", failed, next.at.Sub(given).Round(time.Millisecond))
	if failed > 60 || failed == 0 {
		t.Errorf("3 leases made %d failed logins in 20 s, want between 1 and 60", failed)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestThreeConnectionsAreEnough: a lease needs three connections at a
// (re)connect (its session, which the probe also runs on, the stop fence
// and the probe's second connection) and keeps two. With a role limited
// to three it leads; limited to one it says that the server has no slot
// left, not that the probe refused the DSN. (Limited to two it may lead or
// not, by whether the stop fence opens before the probe's second
// connection has closed.)
func TestThreeConnectionsAreEnough(t *testing.T) {
	const key = 9100140
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS lease_three",
		"CREATE ROLE lease_three LOGIN PASSWORD 'three-secret' CONNECTION LIMIT 3",
	} {
		pgtest.Exec(t, admin, stmt)
	}
	if err := testLab.AddLogin("lease_three", "three-secret"); err != nil {
		t.Fatal(err)
	}
	dsn := testLab.DSN(testLab.Primary.Port, "lease_three", "postgres")
	f := newFleet(t, 1, key, lease.Config{Role: "term-test", DSN: dsn, RetryInterval: 200 * time.Millisecond})
	f.nextStart("with three connections allowed")
	f.stop()

	pgtest.Exec(t, admin, "ALTER ROLE lease_three CONNECTION LIMIT 1")
	var logs leasetest.Buffer
	f = newFleet(t, 1, key, lease.Config{Role: "term-test", DSN: dsn, RetryInterval: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	logs.WaitFor(t, "no connection slot left", 2, time.Minute)
	if out := logs.String(); strings.Contains(out, "probe refused") || f.recs[0].count(lease.Leading) > 0 {
		t.Errorf("with one connection allowed, the lease led or blamed the probe:\n%s", out)
	}
}

// TestStartAllBeginsEveryTermOrNone: a group begins the terms of the roles
// it takes over together, in one transaction: every term begins, each with
// the next epoch of its key, or, when one previous term still has a fenced
// transaction open, none does. Keys that share a fencing lock (as 2k and
// 2k+1 do) begin together too.
func TestStartAllBeginsEveryTermOrNone(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	if err := term.Create(ctx, admin); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int64{1, -1, 9100200, 9100201, 1<<40 + 5, -(1 << 50), 1<<63 - 1} {
		var server int32
		if err := admin.QueryRow(ctx, "SELECT leasectl.fence_lock($1)", k).Scan(&server); err != nil {
			t.Fatal(err)
		}
		if got := term.FenceLock(k); got != server {
			t.Errorf("FenceLock(%d) = %d, the server's leasectl.fence_lock says %d", k, got, server)
		}
	}

	keys := []int64{9100203, 9100200, 9100201}
	holder := pgtest.Conn(t, testLab.DirectDSN(), "term-test-group")
	for _, k := range keys {
		pgtest.Exec(t, holder, "SELECT pg_advisory_lock($1)", k)
	}
	begins := func(wait time.Duration) []term.Begin {
		var bs []term.Begin
		for _, k := range keys {
			id, err := term.NewID()
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, term.Begin{Key: k, Role: fmt.Sprint("group-", k), ID: id, Timing: shortTiming, Keep: 10, FenceWait: wait, Timeout: time.Second,
				Holder: term.Holder{Host: "test", OSPID: os.Getpid(), Application: "term-test-group"}})
		}
		return bs
	}
	current := func() map[int64]term.Term {
		out := map[int64]term.Term{}
		for _, k := range keys {
			cur, _, ok, err := term.Current(ctx, admin, k)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				out[k] = cur
			}
		}
		return out
	}

	// Epochs that differ from key to key, so that each result must be
	// its own key's.
	for range 2 {
		if _, err := term.Start(ctx, holder, begins(time.Second)[1]); err != nil {
			t.Fatal(err)
		}
	}
	before := current()
	bs := begins(time.Second)
	sts, err := term.StartAll(ctx, holder, bs)
	if err != nil {
		t.Fatal(err)
	}
	after := current()
	for i, k := range keys {
		cur := after[k]
		if cur.ID != bs[i].ID || !cur.Live() || sts[i].Epoch != cur.Epoch || cur.Epoch != before[k].Epoch+1 {
			t.Errorf("key %d: current term %s epoch %d (live %v), StartAll said epoch %d; want the new term %s at epoch %d", k, cur.ID, cur.Epoch, cur.Live(), sts[i].Epoch, bs[i].ID, before[k].Epoch+1)
		}
	}

	// A fenced transaction of the first key's term stays open: no term
	// begins, not even those of the other keys.
	first := after[keys[0]]
	fenced := pgtest.Conn(t, testLab.DirectDSN(), "term-test-fenced")
	pgtest.Exec(t, fenced, "BEGIN")
	if _, err := term.Fence(ctx, fenced, term.Token(first.Key, first.Epoch, first.ID, first.Role)); err != nil {
		t.Fatal(err)
	}
	if _, err := term.StartAll(ctx, holder, begins(100*time.Millisecond)); err == nil {
		t.Fatal("StartAll began the terms while a fenced transaction of the previous one was open")
	}
	for _, k := range keys {
		if cur := current()[k]; cur.ID != after[k].ID || !cur.Live() {
			t.Errorf("key %d: after a failed StartAll the current term is %s (live %v), want %s unchanged", k, cur.ID, cur.Live(), after[k].ID)
		}
	}
	pgtest.Exec(t, fenced, "ROLLBACK")
	if _, err := term.StartAll(ctx, holder, begins(time.Second)); err != nil {
		t.Errorf("once the fenced transaction ended: %v", err)
	}
}

// TestRestartsAreNoIdleCuts: an immediate shutdown ends every session with
// EOF and no FATAL, after whatever silence the heartbeat had reached (up
// to a second here), which looks like a proxy that closes idle
// connections; but the server that answers next started anew, and that
// is no proxy. Four restarts under a lease with a 1s heartbeat: no word of
// a proxy in its log.
func TestRestartsAreNoIdleCuts(t *testing.T) {
	var logs leasetest.Buffer
	cfg := lease.Config{Role: "term-test", RetryInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	f := newFleet(t, 1, 9100131, cfg)
	f.nextStart("at first")
	for round := range 4 {
		// Somewhere within the heartbeat's silence, as an operator's
		// restart would come.
		time.Sleep(time.Duration(300+150*round) * time.Millisecond)
		if err := testLab.RestartPrimary(context.Background(), "immediate"); err != nil {
			t.Fatal(err)
		}
		f.nextStart(fmt.Sprintf("after restart %d", round+1))
	}
	if strings.Contains(logs.String(), "keep ending after the same silence") {
		t.Errorf("restarts were taken for a proxy's idle timeout:\n%s", logs.String())
	}
}

// TestTheEndThatCameWithTheReadingWakesTheNewLeader: the previous holder
// records the end of its term while the new leader reads the term, so that
// the notification of the end arrives with the reading's reply. The new
// leader begins at once: it must not discard that notification and sleep
// until its next reading (an hour here, so that a lost wake-up is a hang).
func TestTheEndThatCameWithTheReadingWakesTheNewLeader(t *testing.T) {
	const key = 9100141
	ctx := context.Background()
	old, _ := holdWithTerm(t, key, timing.Lease{HeartbeatInterval: time.Hour, HeartbeatTimeout: time.Hour, StopTimeout: time.Hour})
	admin := pgtest.Conn(t, testLab.DirectDSN(), "term-test-admin")
	prev, _, _, err := term.Current(ctx, admin, key)
	if err != nil {
		t.Fatal(err)
	}
	old.Close(ctx) // the key is free; its term stays open for hours
	var once sync.Once
	cfg := lease.WithTermWait(lease.Config{Role: "term-test", RetryInterval: 200 * time.Millisecond}, time.Hour, func(conn *pgx.Conn) {
		once.Do(func() {
			if _, err := term.End(ctx, admin, key, prev.ID, term.Released, 0); err != nil {
				t.Error(err)
				return
			}
			// The notification reaches the lease session before the lease
			// looks for one, as when it came with the reading's reply.
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := conn.PgConn().WaitForNotification(wctx); err != nil {
				t.Errorf("no notification of the end: %v", err)
			}
		})
	})
	f := newFleet(t, 1, key, cfg)
	next := f.nextStart("after the previous term's end")
	if next.session.Epoch <= prev.Epoch {
		t.Errorf("work runs in term %d, not after term %d", next.session.Epoch, prev.Epoch)
	}
}

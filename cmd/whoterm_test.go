package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// withoutTermRecord drops the term record (schema leasectl), which the
// leases of earlier tests created in the lab's database, for a test whose
// holders are plain sessions and which is about what they are without it:
// with the record such a holder has no term (who --check fails it, and
// failover waits for its term). A later lease creates the record again.
func withoutTermRecord(t *testing.T) {
	t.Helper()
	pgtest.Exec(t, pgtest.Conn(t, needLab(t).DirectDSN(), "drop-term-record"), "DROP SCHEMA IF EXISTS leasectl CASCADE")
}

// withTermRecord creates the term record in the lab's database, as a lease
// would.
func withTermRecord(t *testing.T) {
	t.Helper()
	if err := term.Create(context.Background(), pgtest.Conn(t, needLab(t).DirectDSN(), "create-term-record")); err != nil {
		t.Fatal(err)
	}
}

// holdTermFrozen takes key on a plain session and begins a term on it with
// timing tm, as a lease would, but never renews it: a frozen leader.
func holdTermFrozen(t *testing.T, key int64, app string, tm timing.Lease) (*pgx.Conn, term.Started) {
	t.Helper()
	withTermRecord(t)
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), app)
	hold(t, conn, key)
	id, err := term.NewID()
	if err != nil {
		t.Fatal(err)
	}
	st, err := term.Start(context.Background(), conn, term.Begin{Key: key, Role: app, ID: id, Timing: tm, Keep: 10,
		Holder: term.Holder{Host: "test-host", OSPID: os.Getpid(), Application: app}})
	if err != nil {
		t.Fatal(err)
	}
	return conn, st
}

// termLease is a lease (lease.Run) in this process whose work reports
// each start and runs until it is stopped.
type termLease struct {
	starts chan lease.Session
	mu     sync.Mutex
	state  lease.State
	pid    uint32 // the lease session's backend, as the last change said
}

// startTermLease runs a lease of role on key until the test ends, without the
// probe (the lab's direct DSN needs none).
func startTermLease(t *testing.T, role string, key int64) *termLease {
	t.Helper()
	l := &termLease{starts: make(chan lease.Session, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := lease.Config{Role: role, Key: key, DSN: needLab(t).DirectDSN(), RetryInterval: 200 * time.Millisecond,
		Preflight: func(context.Context, *pgx.ConnConfig) error { return nil },
		OnStateChange: func(c lease.Change) {
			l.mu.Lock()
			l.state, l.pid = c.To, c.BackendPID
			l.mu.Unlock()
		}}
	go func() {
		done <- lease.Run(ctx, cfg, func(ctx context.Context) error {
			s, _ := lease.SessionFrom(ctx)
			l.starts <- *s
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(hang):
			t.Errorf("lease %s did not return", role)
		}
	})
	return l
}

// nextStart waits for the next start of the lease's work.
func (l *termLease) nextStart(t *testing.T) lease.Session {
	t.Helper()
	select {
	case s := <-l.starts:
		return s
	case <-time.After(hang):
		t.Fatal("the lease's work did not start")
		return lease.Session{}
	}
}

// backendPID is the lease session's backend pid.
func (l *termLease) backendPID(t *testing.T) uint32 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pid == 0 {
		t.Fatal("the lease has no session yet")
	}
	return l.pid
}

// waitState waits until the lease is in state.
func (l *termLease) waitState(t *testing.T, state lease.State) {
	t.Helper()
	for deadline := time.Now().Add(hang); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		now := l.state
		l.mu.Unlock()
		if now == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease is %s, not %s", now, state)
		}
	}
}

// Keys of the term tests of who, used by no other test.
const (
	wtLiveKey    = 1840500001
	wtWaitingKey = 1840500002
	wtStaleKey   = 1840500003
	wtFreeKey    = 1840500004
	wtOverdueKey = 1840500005
)

// TestWhoShowsEachRolesTerm: with the term record, who shows the epoch of
// a leader's term (a lease, live), nothing of the term for a holder that is
// not a lease of leasectl (a plain session: it leads by holding the key),
// OVERDUE for a lease that has held the key idle past its bound without a
// term, and STALE for one that stopped renewing its term; --check fails the
// last two, naming them.
func TestWhoShowsEachRolesTerm(t *testing.T) {
	keysPath := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysPath, fmt.Appendf(nil, "roles:\n  live: %d\n  plain: %d\n  stale: %d\n  free: %d\n  overdue: %d\n", wtLiveKey, wtWaitingKey, wtStaleKey, wtFreeKey, wtOverdueKey), 0o600); err != nil {
		t.Fatal(err)
	}
	leader := startTermLease(t, "live", wtLiveKey).nextStart(t)
	if leader.Epoch == 0 {
		t.Fatalf("the lease began no term: %+v", leader)
	}
	epoch := "e" + strconv.FormatInt(leader.Epoch, 10)
	withTermRecord(t)
	plain := pgtest.Conn(t, needLab(t).DirectDSN(), "no-term-holder")
	hold(t, plain, wtWaitingKey)
	// A lease session (its mark says so, with a bound of 1 ms) that holds
	// its key idle and never begins a term: a frozen stand-by.
	frozenStandBy := pgtest.Conn(t, needLab(t).DirectDSN(), "frozen-standby")
	if ok, err := locks.TakeMark(context.Background(), frozenStandBy, time.Millisecond); err != nil || !ok {
		t.Fatalf("take the lease mark: %v, %v", ok, err)
	}
	hold(t, frozenStandBy, wtOverdueKey)
	// Renewed never, and overdue once heartbeat interval + timeout + stop
	// time (3 ms) have passed.
	frozen, st := holdTermFrozen(t, wtStaleKey, "frozen-holder", timing.Lease{HeartbeatInterval: time.Millisecond, HeartbeatTimeout: time.Millisecond, StopTimeout: time.Millisecond})
	staleEpoch := "e" + strconv.FormatInt(st.Epoch, 10) + " STALE"

	var res cliResult
	for deadline := time.Now().Add(hang); ; time.Sleep(20 * time.Millisecond) {
		res = who(t, keysPath)
		if strings.Contains(res.Stdout, staleEpoch) && strings.Contains(res.Stdout, "OVERDUE") || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != ExitOK {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if h := tableHeader(t, res.Stdout); !slices.Equal(h, termColumns) {
		t.Errorf("columns %q, want %q", h, termColumns)
	}
	row(t, res.Stdout, "live", strconv.Itoa(wtLiveKey), "HELD", epoch, strconv.Itoa(int(leader.BackendPID)))
	row(t, res.Stdout, "plain", strconv.Itoa(wtWaitingKey), "HELD", "-", pidOf(t, plain), "no-term-holder", "-", "-")
	row(t, res.Stdout, "overdue", strconv.Itoa(wtOverdueKey), "HELD", "OVERDUE", pidOf(t, frozenStandBy), "frozen-standby", "-", "-")
	row(t, res.Stdout, "stale", strconv.Itoa(wtStaleKey), "HELD", "e"+strconv.FormatInt(st.Epoch, 10), "STALE", pidOf(t, frozen), "frozen-holder")
	row(t, res.Stdout, "free", strconv.Itoa(wtFreeKey), "FREE", "-")
	for _, want := range []string{
		"term: overdue's holder pid " + pidOf(t, frozenStandBy) + ", a lease of leasectl, has held the key idle for",
		"term: stale's holder pid " + pidOf(t, frozen) + " has not renewed its term " + strconv.FormatInt(st.Epoch, 10),
	} {
		if !strings.Contains(strings.Join(strings.Fields(res.Stdout), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}

	// On a terminal of 80 columns: the narrow columns with TERM.
	narrow := runSized(t, nil, false, 80, "", "--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who")
	linesWithin(t, "who with terms", narrow.Stdout, 80)
	if h := tableHeader(t, narrow.Stdout); !slices.Equal(h, termNarrowColumns) {
		t.Errorf("narrow columns %q, want %q", h, termNarrowColumns)
	}
	row(t, narrow.Stdout, "live", "HELD", epoch, strconv.Itoa(int(leader.BackendPID)))

	if strings.Contains(res.Stdout, "plain's holder") {
		t.Errorf("who says something of the term of a holder that is not a lease:\n%s", res.Stdout)
	}
	for _, role := range []string{"live", "plain"} {
		if chk := who(t, keysPath, role, "--check"); chk.Code != ExitOK {
			t.Errorf("who %s --check: exit %d, want 0\n%s%s", role, chk.Code, chk.Stdout, chk.Stderr)
		}
	}
	for role, want := range map[string]string{
		"overdue": "who --check: overdue's holder pid " + pidOf(t, frozenStandBy) + ", a lease of leasectl, has held the key idle for",
		"stale":   "who --check: stale's holder pid " + pidOf(t, frozen) + " has not renewed its term",
	} {
		if chk := who(t, keysPath, role, "--check"); chk.Code != ExitCheckFailed || !strings.Contains(chk.Stderr, want) {
			t.Errorf("who %s --check: exit %d, stderr %q; want 1 and %q", role, chk.Code, chk.Stderr, want)
		}
	}

	js := who(t, keysPath, "-o", "json")
	checkJSONDoc(t, js.Stdout, ExitCheckFailed, "who")
	var doc struct {
		Leases []struct {
			Role   string         `json:"role"`
			Health string         `json:"health"`
			Term   *leaseTermJSON `json:"term"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(js.Stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, js.Stdout)
	}
	want := map[string]struct{ health, standing string }{
		"live": {"ok", "live"}, "plain": {"ok", ""}, "stale": {"term_stale", "stale"}, "free": {"no_holder", "free"}, "overdue": {"no_term", "overdue"},
	}
	for _, l := range doc.Leases {
		w := want[l.Role]
		if l.Health != w.health || (l.Term == nil) != (w.standing == "") || (l.Term != nil && l.Term.Standing != w.standing) {
			t.Errorf("%s: health %q, term %+v; want %q and standing %q", l.Role, l.Health, l.Term, w.health, w.standing)
		}
	}
	if l := doc.Leases[0]; l.Term == nil || l.Term.Epoch == nil || *l.Term.Epoch != leader.Epoch || l.Term.HolderPID == nil || *l.Term.HolderPID != int64(leader.BackendPID) ||
		l.Term.Ended != nil || l.Term.Deadline == nil || l.Term.SinceRenewalMS == nil {
		t.Errorf("live: term %+v, want epoch %d held by %d, not ended", l.Term, leader.Epoch, leader.BackendPID)
	}
	if l := doc.Leases[4]; l.Term == nil || l.Term.Epoch != nil || l.Term.Began != nil {
		t.Errorf("overdue: term %+v, want no epoch (the key never had a term)", l.Term)
	}
}

// TestWhoShowsAStandByThatWaitsForTheTerm: a lease that got the key while
// the previous term is open (its holder's sessions ended, its term not) is
// WAITING for that term, until its deadline; who says what it waits for,
// and --check passes: a new leader at work is no alert (it proves its hold
// every second, so it is never overdue).
func TestWhoShowsAStandByThatWaitsForTheTerm(t *testing.T) {
	const key = 1840500011
	keysPath := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysPath, fmt.Appendf(nil, "roles:\n  poller: %d\n", key), 0o600); err != nil {
		t.Fatal(err)
	}
	old, st := holdTermFrozen(t, key, "old-leader", timing.Lease{HeartbeatInterval: time.Hour, HeartbeatTimeout: time.Hour, StopTimeout: time.Hour})
	l := startTermLease(t, "poller", key)
	l.waitState(t, lease.StandingBy)
	old.Close(context.Background()) // its term stays open for hours
	var res cliResult
	for deadline := time.Now().Add(hang); ; time.Sleep(20 * time.Millisecond) {
		res = who(t, keysPath, "--check")
		if strings.Contains(res.Stdout, "WAITING") || time.Now().After(deadline) {
			break
		}
	}
	want := fmt.Sprintf("poller's holder pid %d has not begun its term yet: it waits for term %d of test-host pid %d", l.backendPID(t), st.Epoch, os.Getpid())
	if out := strings.Join(strings.Fields(res.Stdout), " "); res.Code != ExitOK || !strings.Contains(out, want) || !strings.Contains(out, "(deadline ") {
		t.Errorf("exit %d, want 0 and %q\n%s%s", res.Code, want, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", "HELD", "WAITING")
}

// TestWhoWithoutTheTermRecordIsAsBefore: where the database has no term
// record, who shows, checks and prints what it did before there was one.
func TestWhoWithoutTheTermRecordIsAsBefore(t *testing.T) {
	withoutTermRecord(t)
	keysPath := whoKeys(t)
	hold(t, pgtest.Conn(t, needLab(t).DirectDSN(), "plain-leader"), pollerKey)
	res := who(t, keysPath, "poller", "--check")
	if res.Code != ExitOK || strings.Contains(res.Stdout, "term") {
		t.Errorf("exit %d, want 0 and no word of terms\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if h := tableHeader(t, res.Stdout); !slices.Equal(h, sessionColumns) {
		t.Errorf("columns %q, want %q", h, sessionColumns)
	}
	js := who(t, keysPath, "poller", "-o", "json")
	checkJSONDoc(t, js.Stdout, ExitOK, "who")
	if term, found := jsonValue(t, js.Stdout, "leases.0.term"); !found || term != nil {
		t.Errorf("JSON without the record: term is %#v (found %v), want null:\n%s", term, found, js.Stdout)
	}
	if health, _ := jsonValue(t, js.Stdout, "leases.0.health"); health != "ok" {
		t.Errorf("JSON without the record:\n%s", js.Stdout)
	}
}

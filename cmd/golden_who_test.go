package cmd

import (
	"bytes"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
)

// The text and JSON of who and failover for single-role runs, rendered from
// a fixed reading (no server: the readings of the other tests hold pids and
// ages that change from run to run) and compared with golden files, so that
// what group runs add never changes what single-role runs print.

var goldenNow = time.Date(2026, 12, 1, 3, 44, 1, 830102000, time.UTC)

func goldenServer() dbconn.ServerInfo {
	return dbconn.ServerInfo{Version: "15.18 (Debian 15.18-0+deb12u1)", VersionNum: 150018, Addr: "127.0.0.1", Port: 5432,
		Database: "app", User: "postgres", BackendPID: 7001, SystemID: 7714176307534442602,
		StartedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

// goldenSession is a session connected ago, idle (or waiting) for idle.
func goldenSession(pid int32, app, client string, port int32, ago, idle time.Duration, granted bool) locks.Session {
	s := locks.Session{PID: pid, Granted: granted, User: "app", Application: app, ClientAddr: client, ClientPort: port,
		BackendStart: goldenNow.Add(-ago), State: "idle", StateChange: goldenNow.Add(-idle)}
	if !granted {
		s.State, s.WaitStart = "active", goldenNow.Add(-idle)
	}
	return s
}

// goldenSingleRoleLeases is a reading of single-role runs: a leader with a
// queued stand-by, a stale holder, a free role, a shared two-int4 lock, a
// prepared transaction and a session hidden from this role.
func goldenSingleRoleLeases() []locks.Lease {
	leader := goldenSession(6330, "leasectl run poller@vm1", "10.0.4.17", 54646, 3*time.Hour+12*time.Minute, 2*time.Second, true)
	waiter := goldenSession(6343, "leasectl run poller@vm2", "10.0.4.18", 54656, 3*time.Hour+12*time.Minute, 3*time.Hour+11*time.Minute, false)
	stale := goldenSession(6344, "scheduler-0a4d", "10.0.2.9", 54672, 52*time.Hour, 63*time.Minute, true)
	sharedA := goldenSession(6400, "batch-a", "", -1, time.Minute, time.Second, true)
	sharedA.Shared = true
	sharedB := goldenSession(6401, "batch-b", "10.0.2.10", 40000, time.Minute, time.Second, true)
	sharedB.Shared = true
	hidden := locks.Session{PID: 6500, Granted: true, User: "other", Application: "sweeper-x", Hidden: true}
	prepared := locks.Session{Granted: true, User: "app", Prepared: &locks.PreparedXact{GID: "tx-42", PreparedAt: goldenNow.Add(-10 * time.Minute), Owner: "app"}}
	return []locks.Lease{
		{Role: "poller", Requested: true, KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1840000001), Holders: []locks.Session{leader}, Waiters: []locks.Session{waiter}}},
		{Role: "scheduler", Requested: true, KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1840000002), Holders: []locks.Session{stale}}},
		{Role: "reconciler", Requested: true, KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1840000003)}},
		{Role: "sweeper", Requested: true, KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1840000004), Holders: []locks.Session{hidden}}},
		{KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1840100555), Holders: []locks.Session{prepared}}},
		{KeyLocks: locks.KeyLocks{Key: locks.PairOf(3, 4), Holders: []locks.Session{sharedA, sharedB}}},
	}
}

func goldenWhoView(leases []locks.Lease) *whoView {
	return &whoView{server: goldenServer(), addr: "127.0.0.1:5432", now: goldenNow, leases: leases, all: true, staleAfter: 45 * time.Second}
}

func TestGoldenWhoSingleRole(t *testing.T) {
	v := goldenWhoView(goldenSingleRoleLeases())
	st := newStyles(&bytes.Buffer{}, false)
	for _, tc := range []struct {
		name string
		lay  sessionLayout
	}{
		{"who-single.txt", sessionLayout{Wide: true}},
		{"who-single-80.txt", sessionLayout{Width: 80}},
	} {
		var b bytes.Buffer
		if err := renderWhoText(&b, st, false, v, tc.lay); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.String())
	}
	var js bytes.Buffer
	if err := writeWhoJSON(&js, v, false); err != nil {
		t.Fatal(err)
	}
	goldenJSON(t, "who-single.json", js.String())
	checkJSONConvention(t, js.String(), false, "who")
}

func goldenFailover() *locks.Failover {
	leases := goldenSingleRoleLeases()
	l := leases[0]
	target := &locks.Target{Server: goldenServer(), Locks: l, Holder: l.Holders[0], Now: goldenNow}
	sent := goldenNow.Add(time.Second)
	newHolder := l.Waiters[0]
	newHolder.Granted, newHolder.WaitStart, newHolder.State, newHolder.StateChange = true, time.Time{}, "idle", sent.Add(308500*time.Microsecond)
	return &locks.Failover{
		Target: target, Path: locks.PathGraceful,
		Resign: &locks.Resignation{Sent: sent, ServerStart: sent, Answered: true, AnswerTook: time.Millisecond,
			Ack: locks.ResignAck{PID: 6330, ID: "0123456789abcdef", StopTimeoutMS: 12000}, Released: true, ReleaseTook: 309200 * time.Microsecond},
		Takeover: &locks.Takeover{Holder: newHolder, After: 308500 * time.Microsecond, ByServerClock: true, Now: sent.Add(310 * time.Millisecond), Polls: 31},
	}
}

func TestGoldenFailoverSingleRole(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, false)
	res := goldenFailover()
	var b bytes.Buffer
	if err := renderTarget(&b, st, false, res.Target, "127.0.0.1:5432", sessionLayout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if err := renderFailover(&b, st, false, res, nil, nil, 15*time.Second, 5*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	golden(t, "failover-single.txt", b.String())
	var js bytes.Buffer
	doc := failoverCmdJSON{docHeader: header(true), Server: res.Target.Server, failoverJSON: failoverJSONOf(res)}
	if err := writeJSON(&js, doc, false); err != nil {
		t.Fatal(err)
	}
	goldenJSON(t, "failover-single.json", js.String())
	checkJSONConvention(t, js.String(), true, "failover")
}

// goldenGroupSnapshot is a reading of two group replicas (run --procfile)
// that serve poller and scheduler, each leading one, with their stop fence
// sessions, and a single-role run queued for poller.
func goldenGroupSnapshot() (*locks.Snapshot, map[int64]string) {
	roles := map[int64]string{1840000001: "poller", 1840000002: "scheduler", 1840000003: "reconciler"}
	poller, scheduler := locks.BigintKey(1840000001), locks.BigintKey(1840000002)
	a := goldenSession(8843, "leasectl run app@vm1", "10.0.4.17", 34204, 3*time.Hour, time.Second, true)
	b := goldenSession(8941, "leasectl run app@vm2", "10.0.4.18", 34236, 2*time.Hour, 2*time.Second, true)
	aFence := goldenSession(8844, "leasectl run app@vm1", "10.0.4.17", 34206, 3*time.Hour, 3*time.Hour, true)
	bFence := goldenSession(8942, "leasectl run app@vm2", "10.0.4.18", 34238, 2*time.Hour, 2*time.Hour, true)
	queued := goldenSession(9000, "leasectl run poller@vm3", "10.0.4.19", 40000, time.Hour, time.Hour, false)
	shared := func(c locks.Session) locks.Session { c.Shared = true; return c }
	snap := &locks.Snapshot{Now: goldenNow, Keys: []locks.KeyLocks{
		{Key: poller, Holders: []locks.Session{a}, Waiters: []locks.Session{queued}},
		{Key: scheduler, Holders: []locks.Session{b}},
		{Key: poller.Fence(), Holders: []locks.Session{aFence}},
		{Key: scheduler.Fence(), Holders: []locks.Session{bFence}},
		{Key: poller.Presence(), Holders: []locks.Session{shared(a), shared(b)}},
		{Key: scheduler.Presence(), Holders: []locks.Session{shared(a), shared(b)}},
	}}
	return snap, roles
}

func TestGoldenWhoGroup(t *testing.T) {
	snap, roles := goldenGroupSnapshot()
	want := []locks.Key{locks.BigintKey(1840000001), locks.BigintKey(1840000002), locks.BigintKey(1840000003)}
	v := goldenWhoView(snap.ByRole(roles, want, true))
	st := newStyles(&bytes.Buffer{}, false)
	var wide, narrow, js bytes.Buffer
	if err := renderWhoText(&wide, st, false, v, sessionLayout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if err := renderWhoText(&narrow, st, false, v, sessionLayout{Width: 80}); err != nil {
		t.Fatal(err)
	}
	if err := writeWhoJSON(&js, v, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "who-group.txt", wide.String())
	golden(t, "who-group-80.txt", narrow.String())
	goldenJSON(t, "who-group.json", js.String())
	checkJSONConvention(t, js.String(), false, "who") // reconciler has no holder

	rv := &whoView{server: goldenServer(), addr: "127.0.0.1:5432", now: goldenNow, showReplicas: true, replicas: snap.Replicas(roles)}
	var rwide, rnarrow, rjs bytes.Buffer
	if err := renderWhoText(&rwide, st, false, rv, sessionLayout{Wide: true}); err != nil {
		t.Fatal(err)
	}
	if err := renderWhoText(&rnarrow, st, false, rv, sessionLayout{Width: 60}); err != nil {
		t.Fatal(err)
	}
	if err := writeWhoJSON(&rjs, rv, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "who-replicas.txt", rwide.String())
	golden(t, "who-replicas-60.txt", rnarrow.String())
	goldenJSON(t, "who-replicas.json", rjs.String())
	checkJSONConvention(t, rjs.String(), true, "who --replicas")
}

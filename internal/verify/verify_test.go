package verify_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/verify"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/test/pgtest"
)

func parse(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func result(t *testing.T, rep *verify.Report, check, role string) verify.Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Check == check && r.Role == role {
			return r
		}
	}
	t.Fatalf("no %s result for %q in %+v", check, role, rep.Results)
	return verify.Result{}
}

// holdWith opens a connection named app that holds key.
func holdWith(t *testing.T, app string, key int64) int32 {
	t.Helper()
	conn := pgtest.Conn(t, testLab.DirectDSN(), app)
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", key)
	return pgtest.PID(t, conn)
}

func TestHealthyDeploymentPassesEveryCheck(t *testing.T) {
	ctx := context.Background()
	roles := []keys.Entry{{Name: "poller", Key: 1840300001}, {Name: "scheduler", Key: 1840300002}}
	pollerPID := holdWith(t, "poller-a", roles[0].Key)
	schedulerPID := holdWith(t, "scheduler-a", roles[1].Key)
	pollerStandBy := pgtest.Conn(t, testLab.DirectDSN(), "poller-b")
	pgtest.StandBy(t, pollerStandBy, roles[0].Key, 20*time.Millisecond)
	schedulerStandBy := pgtest.Conn(t, testLab.DirectDSN(), "scheduler-b")
	pgtest.Wait(t, schedulerStandBy, roles[1].Key)

	conn := pgtest.Conn(t, testLab.DirectDSN(), "verify")
	rep, err := verify.Run(ctx, conn, verify.Options{
		Roles: roles, Failover: true, Force: true, Within: time.Minute, PoolerConfig: parse(t, testLab.PoolerDSN("transaction")),
		LeaseConfig: parse(t, testLab.DirectDSN()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed() || rep.Count(verify.Pass) != 6 || len(rep.Results) != 6 {
		t.Fatalf("report %+v, want 6 passes", rep.Results)
	}
	order := []string{"one_leader poller", "clean_failover poller", "one_leader scheduler", "clean_failover scheduler", "pooler_rejection ", "lease_dsn "}
	for i, r := range rep.Results {
		if got := r.Check + " " + r.Role; got != order[i] {
			t.Errorf("result %d is %q, want %q", i, got, order[i])
		}
	}
	for _, tc := range []struct {
		role      string
		old       int32
		newHolder *pgx.Conn
	}{{"poller", pollerPID, pollerStandBy}, {"scheduler", schedulerPID, schedulerStandBy}} {
		if l := result(t, rep, verify.CheckOneLeader, tc.role); l.Leader == nil || l.Leader.PID != tc.old || !strings.Contains(l.Detail, "holds it") {
			t.Errorf("%s one_leader: %+v", tc.role, l)
		}
		f := result(t, rep, verify.CheckCleanFailover, tc.role)
		if f.Failover == nil || f.Failover.Takeover == nil || f.Failover.Target.Holder.PID != tc.old ||
			f.Failover.Takeover.Holder.PID != pgtest.PID(t, tc.newHolder) || !strings.Contains(f.Detail, "is gone") {
			t.Errorf("%s clean_failover: %+v", tc.role, f)
		}
		if pgtest.Alive(t, conn, tc.old) {
			t.Errorf("%s: the old leader %d is still there", tc.role, tc.old)
		}
	}
	p := result(t, rep, verify.CheckPoolerRejection, "")
	if p.Probe == nil || p.Probe.Verdict != probe.Refused || !strings.Contains(p.Detail, "the probe refuses") {
		t.Errorf("pooler_rejection: %+v", p)
	}
}

func TestEveryWayToFail(t *testing.T) {
	ctx := context.Background()
	roles := []keys.Entry{
		{Name: "unheld", Key: 1840300011},
		{Name: "stale", Key: 1840300012},
		{Name: "shared", Key: 1840300013},
		{Name: "prepared", Key: 1840300014},
	}
	idle := pgtest.Conn(t, testLab.DirectDSN(), "idle-leader")
	pgtest.Exec(t, idle, "SELECT pg_advisory_lock($1)", roles[1].Key)
	pgtest.WaitIdleHolder(t, pgtest.Conn(t, testLab.DirectDSN(), "observer"), roles[1].Key, time.Second) // past StaleAfter below
	for _, app := range []string{"shared-a", "shared-b"} {
		c := pgtest.Conn(t, testLab.DirectDSN(), app)
		pgtest.Exec(t, c, "SELECT pg_advisory_lock_shared($1)", roles[2].Key)
	}
	gid := pgtest.PreparedLock(t, testLab, roles[3].Key)

	conn := pgtest.Conn(t, testLab.DirectDSN(), "verify")
	rep, err := verify.Run(ctx, conn, verify.Options{
		Roles: roles, StaleAfter: time.Second, Failover: true, Force: true, Within: 200 * time.Millisecond,
		PoolerConfig: parse(t, testLab.PoolerDSN("session")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed() {
		t.Fatalf("passed: %+v", rep.Results)
	}
	for _, tc := range []struct{ check, role, status, detail string }{
		{verify.CheckOneLeader, "unheld", "fail", "no holder"},
		{verify.CheckCleanFailover, "unheld", "skip", "no single live leader"},
		{verify.CheckOneLeader, "stale", "fail", "stale: idle"},
		{verify.CheckCleanFailover, "stale", "skip", "no single live leader"},
		{verify.CheckOneLeader, "shared", "fail", "2 sessions hold it in shared mode"},
		{verify.CheckOneLeader, "prepared", "fail", gid},
		{verify.CheckPoolerRejection, "", "fail", "the probe accepts"},
	} {
		r := result(t, rep, tc.check, tc.role)
		if string(r.Status) != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s %s: %s %q, want %s with %q", tc.check, tc.role, r.Status, r.Detail, tc.status, tc.detail)
		}
	}
	if err := idle.Ping(ctx); err != nil {
		t.Errorf("the stale leader was terminated although one_leader failed: %v", err)
	}

	// A live leader that nobody stands by for.
	alone := []keys.Entry{{Name: "alone", Key: 1840300015}}
	alonePID := holdWith(t, "lonely-leader", alone[0].Key)
	rep, err = verify.Run(ctx, conn, verify.Options{Roles: alone, Failover: true, Force: true, Within: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ check, status, detail string }{
		{verify.CheckOneLeader, "pass", "lonely-leader"},
		{verify.CheckCleanFailover, "fail", "no stand-by took over within 200ms"},
	} {
		if r := result(t, rep, tc.check, "alone"); string(r.Status) != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s alone: %s %q, want %s with %q", tc.check, r.Status, r.Detail, tc.status, tc.detail)
		}
	}
	if rep.Passed() || pgtest.Alive(t, conn, alonePID) {
		t.Errorf("passed %v, or the lonely leader %d was not terminated", rep.Passed(), alonePID)
	}
}

func TestChecksNotAskedForAreSkipped(t *testing.T) {
	roles := []keys.Entry{{Name: "poller", Key: 1840300021}}
	pid := holdWith(t, "poller-a", roles[0].Key)
	conn := pgtest.Conn(t, testLab.DirectDSN(), "verify")
	rep, err := verify.Run(context.Background(), conn, verify.Options{Roles: roles})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed() || rep.Count(verify.Pass) != 1 || rep.Count(verify.Skip) != 3 {
		t.Errorf("report %+v, want one pass and three skips", rep.Results)
	}
	if !pgtest.Alive(t, conn, pid) {
		t.Errorf("the leader was terminated without Failover")
	}
}

func TestRefusesAStandby(t *testing.T) {
	conn := pgtest.Conn(t, testLab.StandbyDSN(), "verify")
	_, err := verify.Run(context.Background(), conn, verify.Options{Roles: []keys.Entry{{Name: "poller", Key: 1}}})
	if !errors.Is(err, locks.ErrStandby) {
		t.Errorf("Run on a standby = %v, want ErrStandby", err)
	}
}

func TestOneLeaderWithAHiddenLeader(t *testing.T) {
	l := locks.Lease{Role: "poller", KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1), Holders: []locks.Session{{PID: 7, Granted: true, Hidden: true, Application: "p"}}}}
	r := verify.OneLeader(l, time.Now(), time.Second)
	if r.Status != verify.Pass || r.Detail != "pid 7 (p) holds it (its state is hidden from this role: staleness unknown)" {
		t.Errorf("hidden leader: %s %q", r.Status, r.Detail)
	}
}

// TestVerifyJudgesTerms: where the term record exists, one_leader also
// needs the holder to lead a live term (a plain session holding the key
// has none), and clean_failover is over only once the new leader's term
// has begun.
func TestVerifyJudgesTerms(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roles := []keys.Entry{{Name: "poller", Key: 1840300011}, {Name: "plain", Key: 1840300012}, {Name: "overdue", Key: 1840300013}}
	// The leases create the term record; the other tests hold keys on
	// plain sessions, judged by their locks alone.
	t.Cleanup(func() {
		pgtest.Exec(t, pgtest.Conn(t, testLab.DirectDSN(), ""), "DROP SCHEMA IF EXISTS leasectl CASCADE")
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	leading := make(chan struct{}, 8)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = lease.Run(ctx, lease.Config{Role: "poller", Key: roles[0].Key, DSN: testLab.DirectDSN(), RetryInterval: 100 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond},
				func(ctx context.Context) error { leading <- struct{}{}; <-ctx.Done(); return nil })
		}()
	}
	<-leading
	conn := pgtest.Conn(t, testLab.DirectDSN(), "verify")
	// Both leases stand in the record; wait until the second waits in the queue.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		snap, err := locks.Read(ctx, conn, locks.Filter{Keys: []locks.Key{locks.BigintKey(roles[0].Key)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Find(locks.BigintKey(roles[0].Key)).Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second lease does not stand by")
		}
	}
	plainPID := holdWith(t, "plain-holder", roles[1].Key)
	// A lease session (its mark says so, bound 1 ms) that holds its key
	// idle and begins no term: a frozen stand-by the server granted it.
	frozen := pgtest.Conn(t, testLab.DirectDSN(), "frozen-standby")
	if ok, err := locks.TakeMark(ctx, frozen, time.Millisecond); err != nil || !ok {
		t.Fatalf("take the lease mark: %v, %v", ok, err)
	}
	pgtest.Exec(t, frozen, "SELECT pg_advisory_lock($1)", roles[2].Key)
	time.Sleep(10 * time.Millisecond) // idle past its bound
	rep, err := verify.Run(ctx, conn, verify.Options{Roles: roles[:1], Failover: true, Within: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r := result(t, rep, verify.CheckOneLeader, "poller"); r.Status != verify.Pass {
		t.Errorf("poller one_leader: %+v", r)
	}
	if r := result(t, rep, verify.CheckCleanFailover, "poller"); r.Status != verify.Pass || !strings.Contains(r.Detail, "began term") {
		t.Errorf("poller clean_failover: %+v", r)
	}
	// The plain holder is no lease of leasectl: it leads by holding the
	// key, and a failover is over once a stand-by holds it.
	plainStandBy := pgtest.Conn(t, testLab.DirectDSN(), "plain-standby")
	pgtest.StandBy(t, plainStandBy, roles[1].Key, 20*time.Millisecond)
	rep, err = verify.Run(ctx, conn, verify.Options{Roles: roles[1:], Failover: true, Force: true, Within: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r := result(t, rep, verify.CheckOneLeader, "plain"); r.Status != verify.Pass || !strings.Contains(r.Detail, strconv.Itoa(int(plainPID))) {
		t.Errorf("plain one_leader: %+v, want a pass naming pid %d", r, plainPID)
	}
	if r := result(t, rep, verify.CheckCleanFailover, "plain"); r.Status != verify.Pass || !strings.Contains(r.Detail, "is not a lease of leasectl (no lease mark): it leads by holding the key") {
		t.Errorf("plain clean_failover: %+v", r)
	}
	if r := result(t, rep, verify.CheckOneLeader, "overdue"); r.Status != verify.Fail || !strings.Contains(r.Detail, strconv.Itoa(int(pgtest.PID(t, frozen)))+", a lease of leasectl, has held the key idle") {
		t.Errorf("overdue one_leader: %+v, want a failure naming pid %d", r, pgtest.PID(t, frozen))
	}
}

package locks_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// groupSession opens a session named app that holds, in shared mode, the
// presence lock of each key of serves, and each key of leads.
func groupSession(t *testing.T, app string, serves, leads []int64) (*pgx.Conn, int32) {
	t.Helper()
	conn := pgtest.Conn(t, testLab.DirectDSN(), app)
	for _, k := range serves {
		p1, p2 := locks.BigintKey(k).Presence().Int4s()
		pgtest.Exec(t, conn, "SELECT pg_advisory_lock_shared($1, $2)", p1, p2)
	}
	for _, k := range leads {
		pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", k)
	}
	return conn, pgtest.PID(t, conn)
}

// TestReplicasAndStandBysFromRealSessions: two groups serve two roles, each
// leading one, with a fence session each; a single-role run queues for one
// role. ByRole shows each group as the other's stand-by, Replicas lays the
// sessions out by process.
func TestReplicasAndStandBysFromRealSessions(t *testing.T) {
	const poller, scheduler = 1840500001, 1840500002
	roles := map[int64]string{poller: "poller", scheduler: "scheduler"}
	_, a := groupSession(t, "leasectl run app@vm1", []int64{poller, scheduler}, []int64{poller})
	_, b := groupSession(t, "leasectl run app@vm2", []int64{poller, scheduler}, []int64{scheduler})
	fence := pgtest.Conn(t, testLab.DirectDSN(), "leasectl run app@vm1")
	f1, f2 := locks.BigintKey(poller).Fence().Int4s()
	pgtest.Exec(t, fence, "SELECT pg_advisory_lock($1, $2)", f1, f2)
	queued := pgtest.Conn(t, testLab.DirectDSN(), "leasectl run poller@vm3")
	q := pgtest.PID(t, queued)
	pgtest.Wait(t, queued, poller)
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	want := []locks.Key{locks.BigintKey(poller), locks.BigintKey(scheduler)}
	snap := waitFor(t, observer, locks.Filter{Keys: want, Presence: true}, "the queued waiter", func(s *locks.Snapshot) bool {
		return len(s.Find(locks.BigintKey(poller)).Waiters) == 1
	})
	leases := snap.ByRole(roles, want, false)
	p, s := leases[0], leases[1]
	if len(p.Holders) != 1 || p.Holders[0].PID != a || len(p.Waiters) != 1 || len(p.StandBys) != 1 || p.StandBys[0].PID != b ||
		len(p.Present) != 2 || p.WaiterCount() != 2 || !p.LedByGroup() || p.Health(snap.Now, time.Minute) != locks.Healthy {
		t.Errorf("poller: %+v", p)
	}
	if len(s.StandBys) != 1 || s.StandBys[0].PID != a || s.WaiterCount() != 1 {
		t.Errorf("scheduler: %+v", s)
	}
	if len(leases) != 2 {
		t.Errorf("presence locks shown without others: %+v", leases)
	}

	all := read(t, observer, locks.Filter{All: true})
	var presence []locks.Lease
	for _, l := range all.ByRole(roles, want, true) {
		if l.PresenceOf != nil {
			presence = append(presence, l)
		}
	}
	if len(presence) != 2 || presence[0].PresenceOf.Key != locks.BigintKey(poller) || presence[0].Name() != "presence of poller" || len(presence[0].Present) != 2 {
		t.Errorf("presence lines: %+v", presence)
	}
	// A role not shown: its presence lock is not shown either.
	for _, l := range all.ByRole(roles, want[:1], true) {
		if l.PresenceOf != nil && l.PresenceOf.Key == locks.BigintKey(scheduler) {
			t.Errorf("the presence lock of scheduler, not shown, is: %+v", l)
		}
	}

	rs := all.Replicas(roles)
	byPID := map[int32]locks.Replica{}
	for _, r := range rs {
		byPID[r.Session.PID] = r
	}
	ra, rb, rq := byPID[a], byPID[b], byPID[q]
	if !ra.Group || len(ra.Leads) != 1 || ra.Leads[0].Role != "poller" || len(ra.Waits) != 1 || ra.Waits[0].Role != "scheduler" ||
		ra.Fence == nil || ra.Fence.PID != pgtest.PID(t, fence) || ra.Host() != "vm1" || !ra.Matches("vm1") || !ra.Matches("leasectl run app@vm1") || ra.Matches("vm") {
		t.Errorf("replica a: %+v", ra)
	}
	if !rb.Group || len(rb.Leads) != 1 || rb.Leads[0].Role != "scheduler" || rb.Fence != nil {
		t.Errorf("replica b: %+v", rb)
	}
	if rq.Group || len(rq.Leads) != 0 || len(rq.Waits) != 1 || rq.Waits[0].Role != "poller" {
		t.Errorf("single-role replica: %+v", rq)
	}
	if _, ok := byPID[pgtest.PID(t, fence)]; ok {
		t.Errorf("the fence session is listed as a replica")
	}
	if got := locks.MatchReplicas(rs, "vm1"); len(got) != 1 || got[0].Session.PID != a {
		t.Errorf("MatchReplicas vm1: %+v", got)
	}
}

// TestPresenceRoleIsNotEveryPairLock: a shared two-int4 lock of no role
// is a presence lock only when it is that of a key below 2^32 or of a key
// one of its holders holds; an exclusive one never.
func TestPresenceRoleIsNotEveryPairLock(t *testing.T) {
	conn := pgtest.Conn(t, testLab.DirectDSN(), "pairs")
	const unknown = 1840500077 // in no role map
	p1, p2 := locks.BigintKey(unknown).Presence().Int4s()
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock_shared($1, $2)", p1, p2)
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock_shared(11, 12)")
	big := int64(-5) // high half 0xffffffff: not the "pres" form
	b1, b2 := locks.BigintKey(big).Presence().Int4s()
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock_shared($1, $2)", b1, b2)
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock(13, 14)")
	snap := read(t, conn, locks.Filter{Keys: []locks.Key{locks.PairOf(p1, p2), locks.PairOf(11, 12), locks.PairOf(b1, b2), locks.PairOf(13, 14)}})
	if rk, ok := snap.PresenceRole(snap.Find(locks.PairOf(p1, p2)), nil); !ok || rk != locks.BigintKey(unknown) {
		t.Errorf("presence of key %d: %v, %v", unknown, rk, ok)
	}
	for _, k := range []locks.Key{locks.PairOf(11, 12), locks.PairOf(b1, b2), locks.PairOf(13, 14)} {
		if rk, ok := snap.PresenceRole(snap.Find(k), nil); ok {
			t.Errorf("%s taken for the presence lock of %s", k, rk)
		}
	}
	// The presence lock of -5 is one when its holder holds -5 (a leader),
	// or when -5 is a role.
	if _, ok := snap.PresenceRole(snap.Find(locks.PairOf(b1, b2)), map[int64]string{big: "negative"}); !ok {
		t.Errorf("the presence lock of a role is not taken for one")
	}
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", big)
	snap = read(t, conn, locks.Filter{Keys: []locks.Key{locks.BigintKey(big)}, Presence: true})
	if _, ok := snap.PresenceRole(snap.Find(locks.PairOf(b1, b2)), nil); !ok {
		t.Errorf("the presence lock of a key its holder holds is not taken for one")
	}
}

// TestFailoverAllAsksEveryRoleAtOnce: a group leading two roles gets one
// drain request on each role's channel, answers both, releases both, and
// another session takes both; nothing is terminated.
func TestFailoverAllAsksEveryRoleAtOnce(t *testing.T) {
	ctx := context.Background()
	const k1, k2 = 1840500011, 1840500012
	roles := map[int64]string{k1: "one", k2: "two"}
	lease, pid := groupSession(t, "leasectl run app@vm1", []int64{k1, k2}, []int64{k1, k2})
	for _, k := range []int64{k1, k2} {
		if err := locks.Listen(ctx, lease, locks.ResignChannel(k)); err != nil {
			t.Fatal(err)
		}
	}
	taker := pgtest.Conn(t, testLab.DirectDSN(), "leasectl run app@vm2")
	pgtest.StandBy(t, taker, k1, 10*time.Millisecond)
	// The group answers on its own session, in the background.
	drains := make(chan locks.ResignRequest, 4)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for n := 0; n < 2; n++ {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			note, err := lease.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return
			}
			req, err := locks.ParseResignRequest(note.Payload)
			if err != nil {
				continue
			}
			drains <- req
			key := int64(k1)
			if note.Channel == locks.ResignChannel(k2) {
				key = k2
			}
			_ = locks.Notify(ctx, lease, locks.ResignedChannel(key), locks.ResignAck{PID: req.PID, ID: req.ID, StopTimeoutMS: 1000})
			if req.Drain {
				_, _ = lease.Exec(ctx, "SELECT pg_advisory_unlock($1), pg_advisory_unlock($2)", k1, k2)
			}
		}
	}()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "failover")
	d, err := locks.FindDrain(ctx, conn, "vm1", roles)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Replicas) != 1 || d.Replicas[0].Session.PID != pid || len(d.Targets()) != 2 || d.Targets()[0].Group == nil {
		t.Fatalf("drain: %+v", d)
	}
	second := pgtest.Conn(t, testLab.DirectDSN(), "leasectl run app@vm3")
	pgtest.StandBy(t, second, k2, 10*time.Millisecond)
	res, errs := locks.FailoverAll(ctx, conn, d.Targets(), locks.FailoverOptions{TerminateTimeout: 5 * time.Second, Wait: 10 * time.Second, Drain: true})
	<-answered
	close(drains)
	for i := range res {
		if errs[i] != nil || res[i] == nil || res[i].Path != locks.PathGraceful || res[i].Takeover == nil || res[i].Termination != nil || !res[i].Resign.Answered {
			t.Errorf("role %d: %+v, %v", i, res[i], errs[i])
		}
	}
	n := 0
	for req := range drains {
		n++
		if !req.Drain || req.PID != uint32(pid) {
			t.Errorf("request %+v", req)
		}
	}
	if n != 2 {
		t.Errorf("%d requests, want one per role", n)
	}
	if !pgtest.Alive(t, conn, pid) {
		t.Errorf("the group's session was terminated")
	}

	// A name no replica has.
	if _, err := locks.FindDrain(ctx, conn, "vm9", roles); !errors.Is(err, locks.ErrNoReplica) || !strings.Contains(err.Error(), `"leasectl run app@vm1"`) {
		t.Errorf("FindDrain vm9: %v", err)
	}
}

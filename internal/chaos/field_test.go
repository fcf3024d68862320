package chaos

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/lab"
	"github.com/leasectl/leasectl/locks"
)

// standbysLeave runs a leader and three stand-bys through PgBouncer in
// session mode and stops the three stand-bys at once (SIGTERM), rounds
// times. Stand-bys wait in pg_advisory_lock; a client that cancels that
// wait sends PgBouncer a cancel request, and several at once crash
// PgBouncer 1.18 (disconnect_client(): bad client state), taking the
// leader's session with it. The leader must keep its lease throughout.
func standbysLeave(t *testing.T, f *fleet, res *result, rounds int) {
	h, dsn := f.h, testLab.PoolerDSN("session")
	pooler := testLab.Pooler("session")
	poolerPID := lab.PoolerPID(pooler)
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	var left []time.Duration
	from := h.mark()
	leader := f.start(session, dsn, nil)
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))
	for i := range rounds {
		var standbys []*replica
		for range 3 {
			standbys = append(standbys, f.start(session, dsn, nil))
		}
		f.settled(leader)
		for _, r := range standbys {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
		}
		res.faults++
		for _, r := range standbys {
			select {
			case <-r.exited:
			case <-time.After(hang):
				t.Fatalf("round %d: %s did not exit within %s of SIGTERM:\n%s", i+1, r.name, hang, r.log)
			}
			f.remove(r)
		}
		if pid := lab.PoolerPID(pooler); pid != poolerPID {
			t.Fatalf("round %d: PgBouncer (pid %d) is gone after three stand-bys stopped at once (now pid %d):\n%s", i+1, poolerPID, pid, lab.LogTail(pooler.LogFile, 10))
		}
		// Their waits must leave the server's lock queue: the server sees
		// the closed connection (client_connection_check_interval).
		left = append(left, waitNoWaiters(t, admin, fmt.Sprintf("round %d", i+1)))
	}
	// Let a loss, if any, reach the leader's log.
	time.Sleep(time.Second)
	if n := h.count(from, isTermOf(lead.PID)); n > 0 || strings.Contains(leader.log.String(), "lease lost") || leader.state() != "leading" {
		t.Errorf("the leader lost its lease while stand-bys left (state %s):\n%s", leader.state(), leader.log)
	}
	res.notes = append(res.notes, fmt.Sprintf("%d rounds of three stand-bys stopped at once; PgBouncer (pid %d) stayed up and the leader kept its lease; the stopped stand-bys' waits left the server's lock queue %s after their exit", rounds, poolerPID, spread(left)))
}

// waitNoWaiters waits until nobody waits for the role's key on conn's
// server and returns how long that took.
func waitNoWaiters(t *testing.T, conn *pgx.Conn, what string) time.Duration {
	t.Helper()
	k := locks.BigintKey(roleKey)
	start := time.Now()
	for {
		snap, err := locks.Read(context.Background(), conn, locks.Filter{Keys: []locks.Key{k}})
		if err != nil {
			t.Fatal(err)
		}
		l := snap.Find(k)
		if len(l.Waiters) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > hang {
			t.Fatalf("%s: %d session(s) still wait for the key %s after their clients exited: %+v", what, len(l.Waiters), hang, l.Waiters)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

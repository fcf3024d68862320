//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
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

// poolerReload runs three replicas through PgBouncer in session mode, which
// is safe, and then reloads that PgBouncer (SIGHUP) with pool_mode =
// transaction while other clients send traffic through it: sessions judged
// stable at connect time stop being so. Every lease statement must prove
// the session again (the same backend, the key granted to it, a primary),
// so the leader steps down, nobody leads over the pooler again, and no two
// programs run at once. It watches for watch after the reload.
func poolerReload(t *testing.T, f *fleet, res *result, watch time.Duration) {
	h, dsn := f.h, testLab.PoolerDSN("reload")
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	t.Cleanup(func() {
		f.stopAll()
		if err := testLab.ReconfigurePooler("reload", func(p *lab.PoolerSpec) { p.Mode = lab.Session }); err != nil {
			t.Error(err)
		}
		// Locks stranded on the pooler's server connections.
		if _, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks
 WHERE locktype = 'advisory' AND pid <> pg_backend_pid()`); err != nil {
			t.Error(err)
		}
	})
	from := h.mark()
	for range 3 {
		f.start(session, dsn, nil)
	}
	lead := h.await(t, from, hang, "a first leader", isStart)
	leader := f.of(lead)
	f.settled(leader)

	// Traffic from other clients through the same pooler.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var queries atomic.Int64
	for i := range 4 {
		conn := pgtest.Conn(t, dsn, fmt.Sprintf("chaos-traffic-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
					return
				}
				queries.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(500 * time.Millisecond)

	from = h.mark()
	seen := len(leader.lines())
	reload := time.Now()
	if err := testLab.ReconfigurePooler("reload", func(p *lab.PoolerSpec) { p.Mode = lab.Transaction }); err != nil {
		t.Fatal(err)
	}
	res.faults++
	term := h.await(t, from, hang+watch, "the leader stepping down after the pooler went to transaction mode", isTermOf(lead.PID))
	i := f.waitLine(leader, seen, "why it lost the lease", func(l logLine) bool { return l.Msg == "lease lost; stopping work" })
	why := leader.lines()[i].Err
	time.Sleep(time.Until(reload.Add(watch)))
	if n := h.count(from, isStart); n > 0 {
		t.Errorf("%d program(s) started after the pooler went to transaction mode", n)
	}
	refused := 0
	for _, r := range f.live {
		refused += strings.Count(r.log.String(), "refusing to lead")
	}
	res.notes = append(res.notes, fmt.Sprintf("the leader stepped down %s after the reload (%s); no replica led again in %s (%d refusals; %d queries of other clients meanwhile)",
		fmtDur(term.At.Sub(reload)), why, watch, refused, queries.Load()))
}

// daemons: every leader's program leaves a daemon behind that holds the
// witness lock too: two replicas' programs start it in a session of their
// own (setsid), two from a child that exits at once, with an empty
// environment (a double fork). The leader's lease session is terminated n
// times. leasectl must stop the daemon with the program before its stop
// fence passes on, or the next witness finds the lock held: an overlap.
// After each takeover at most one daemon (the new leader's) may be alive.
func daemons(t *testing.T, f *fleet, res *result, n int) {
	h, dsn := f.h, testLab.DirectDSN()
	from := h.mark()
	for _, mode := range []string{"setsid", "setsid", "doublefork", "doublefork"} {
		f.witnessFlags = []string{"-daemon", mode}
		f.start(direct, dsn, nil)
	}
	f.witnessFlags = nil
	f.start(pooled, testLab.PoolerDSN("transaction"), nil)
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	most := 0
	for i := range n {
		pid, err := strconv.ParseUint(lead.BackendPID, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		from := h.mark()
		t0 := time.Now()
		if err := leasetest.Terminate(context.Background(), admin, roleKey, uint32(pid)); err != nil {
			t.Fatal(err)
		}
		res.faults++
		lead = h.await(t, from, hang, fmt.Sprintf("a takeover after termination %d", i+1), isStart)
		res.takeovers = append(res.takeovers, lead.At.Sub(t0))
		f.settled(f.of(lead))
		// The witness reports its start before a double fork's daemon is
		// necessarily there: wait for it.
		for deadline := time.Now().Add(10 * time.Second); len(liveDaemons(h.witness)) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		switch d := liveDaemons(h.witness); {
		case len(d) > 1:
			t.Errorf("after takeover %d, %d daemons of witness programs are alive (%v): an old leader's daemon outlived its lease", i+1, len(d), d)
		case len(d) == 0:
			t.Errorf("after takeover %d no daemon is alive: the new leader's program started none, so this proves nothing", i+1)
		}
		most = max(most, len(liveDaemons(h.witness)))
	}
	f.stopAll()
	if d := liveDaemons(h.witness); len(d) > 0 {
		t.Errorf("daemons %v outlived every replica", d)
	}
	res.notes = append(res.notes, fmt.Sprintf("each leader's program left a daemon holding the witness lock (setsid, or a double fork with an empty environment); after every takeover exactly %d daemon (the leader's) was alive, none once the fleet stopped", most))
}

// liveDaemons returns the pids of witness daemons (the witness binary run
// with -hold) that are alive and not zombies.
func liveDaemons(witness string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 2 && args[0] == witness && args[1] == "-hold" {
			if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !strings.Contains(string(stat), ") Z ") {
				out = append(out, pid)
			}
		}
	}
	return out
}

//go:build linux

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// The scenarios of the durable term: faults that end every session of the
// leader at once (a restart, terminations in one statement), frozen
// processes, and a leader killed with nobody left to record the end of its
// term. Each runs with a program that takes stopDelay to stop, and the
// witness must see no two programs at once.

// shortFlags are the heartbeat settings of the frozen-process scenarios:
// a term is overdue 2 s + 1 s + (2 s + 2 s) after its last renewal, and its
// deadline is a heartbeat timeout later.
var shortFlags = []string{"--heartbeat-interval", "2s", "--heartbeat-timeout", "1s", "--grace", "2s"}

// holderPIDs returns the backends that hold the role's key and its stop
// fence.
func holderPIDs(t *testing.T, admin *pgx.Conn) (lease, fence int32) {
	t.Helper()
	k := locks.BigintKey(roleKey)
	snap, err := locks.Read(context.Background(), admin, locks.Filter{Keys: []locks.Key{k, k.Fence()}})
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := snap.Find(k).Holder(); ok {
		lease = h.PID
	}
	if h, ok := snap.Find(k.Fence()).Holder(); ok {
		fence = h.PID
	}
	return lease, fence
}

// handover waits, after a fault at t0 that stops the program of lead, for
// its SIGTERM, its exit and the next program's start, and records the
// times: from the fault to the exit (the old program's stop) and from the
// exit to the next start (the handover).
func handover(t *testing.T, h *harness, from int, t0 time.Time, lead leasetest.Event, what string, stops, gaps, takeovers *[]time.Duration) leasetest.Event {
	t.Helper()
	h.await(t, from, hang, "SIGTERM to the leader's program after "+what, isTermOf(lead.PID))
	exit := h.await(t, from, hang, "the old program's exit after "+what, isExitOf(lead.PID))
	next := h.await(t, from, hang, "a takeover after "+what, isStart)
	*stops = append(*stops, exit.At.Sub(t0))
	*gaps = append(*gaps, next.At.Sub(exit.At))
	*takeovers = append(*takeovers, next.At.Sub(t0))
	return next
}

func handoverNote(stops, gaps []time.Duration) string {
	return fmt.Sprintf("the program takes %s to stop after SIGTERM; the old program exited %s after the fault, and the next one started %s after that exit",
		stopDelay, spread(stops), spread(gaps))
}

// restarts restarts the primary once per stop mode, with default flags:
// every session ends, the fence with them, and the next leader waits for
// the old one to record the end of its term, which it does once its
// program has stopped and it has reconnected.
func restarts(t *testing.T, f *fleet, res *result, modes []string) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	var stops, gaps, downs []time.Duration
	for i, mode := range modes {
		from := h.mark()
		t0 := time.Now()
		if err := testLab.RestartPrimary(context.Background(), mode); err != nil {
			t.Fatal(err)
		}
		downs = append(downs, time.Since(t0))
		res.faults++
		lead = handover(t, h, from, t0, lead, fmt.Sprintf("restart %d (-m %s)", i+1, mode), &stops, &gaps, &res.takeovers)
		f.settled(f.of(lead))
	}
	res.stops, res.gaps = stops, gaps
	res.notes = append(res.notes, handoverNote(stops, gaps)+"; pg_ctl stop and start took "+spread(downs)+" (modes "+strings.Join(modes, ", ")+")")
}

// terminateByName ends every session of the role's replicas, n times, the
// way an operator ends a service's sessions by application name.
func terminateByName(t *testing.T, f *fleet, res *result, n int) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	var stops, gaps []time.Duration
	for i := range n {
		from := h.mark()
		t0 := time.Now()
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'leasectl run `+role+`@%'`)
		res.faults++
		lead = handover(t, h, from, t0, lead, fmt.Sprintf("termination by name %d", i+1), &stops, &gaps, &res.takeovers)
		f.settled(f.of(lead))
	}
	res.stops, res.gaps = stops, gaps
	res.notes = append(res.notes, handoverNote(stops, gaps))
}

// terminateBoth ends the leader's lease and fence sessions in one
// statement, n times; with freeze, the leader's leasectl is stopped
// (SIGSTOP) first and resumed freeze later, while its program runs on.
func terminateBoth(t *testing.T, f *fleet, res *result, n int, freeze time.Duration) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	var stops, gaps []time.Duration
	for i := range n {
		l, fence := holderPIDs(t, admin)
		if l == 0 || fence == 0 {
			t.Fatalf("round %d: the key is held by %d and its fence by %d", i+1, l, fence)
		}
		r := f.of(lead)
		if freeze > 0 {
			freezeReplica(t, r)
		}
		from := h.mark()
		t0 := time.Now()
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($1, $2)`, l, fence)
		res.faults++
		if freeze > 0 {
			time.Sleep(freeze) // the fault's length: the leader stays frozen this long
			if n := h.count(from, isStart); n > 0 {
				t.Errorf("round %d: a program started while the old leader was frozen", i+1)
			}
			thaw(r)
		}
		lead = handover(t, h, from, t0, lead, fmt.Sprintf("termination %d of both sessions", i+1), &stops, &gaps, &res.takeovers)
		f.settled(f.of(lead))
	}
	res.stops, res.gaps = stops, gaps
	note := handoverNote(stops, gaps)
	if freeze > 0 {
		note = fmt.Sprintf("the leader's leasectl was frozen for %s (shorter than its term's deadline) while its program ran on; ", freeze) + note
	}
	res.notes = append(res.notes, note)
}

// freezeReplica stops r's leasectl (not its program) with SIGSTOP, and
// makes sure it is resumed when the test ends.
func freezeReplica(t *testing.T, r *replica) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { thaw(r) })
}

func thaw(r *replica) { _ = r.cmd.Process.Signal(syscall.SIGCONT) }

// backendOf returns the backend pid r's lease session had when it last
// logged that it stands by.
func backendOf(t *testing.T, f *fleet, r *replica) int32 {
	t.Helper()
	f.waitState(r, "standing_by")
	lines := r.lines()
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].State == "standing_by" && lines[i].BackendPID != 0 {
			return lines[i].BackendPID
		}
	}
	t.Fatalf("%s logged no backend pid while standing by:\n%s", r.name, r.log)
	return 0
}

// frozenStandby freezes the first stand-by in the server's lock queue while
// it waits, and kills the leader: the server grants the frozen process the
// key, and the other replicas must find it silent and end its session.
func frozenStandby(t *testing.T, f *fleet, res *result, rounds int) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	from := h.mark()
	f.start(direct, dsn, nil)
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))
	var costs []time.Duration
	for i := range rounds {
		frozen := f.start(direct, dsn, nil)
		pid := backendOf(t, f, frozen)
		// Freeze it while its backend waits, and kill the leader well
		// within that wait (lock_timeout is the heartbeat interval).
		var killed time.Time
		for try := 0; ; try++ {
			if try > 50 {
				t.Fatalf("round %d: could not freeze %s while it waited for the key", i+1, frozen.name)
			}
			if age, ok := waitAge(t, admin, pid); ok && age < 500*time.Millisecond {
				freezeReplica(t, frozen)
				from = h.mark()
				killed = time.Now()
				f.kill(f.of(lead))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		res.faults++
		if !grantedTo(t, admin, pid, 3*time.Second) {
			thaw(frozen)
			t.Fatalf("round %d: the key did not go to the frozen stand-by (backend %d)", i+1, pid)
		}
		for range 2 {
			f.start(direct, dsn, nil)
		}
		lead = h.await(t, from, hang, fmt.Sprintf("a program after the frozen stand-by held the key (round %d)", i+1), isStart)
		costs = append(costs, lead.At.Sub(killed))
		res.takeovers = append(res.takeovers, lead.At.Sub(killed))
		thaw(frozen)
		leader := f.of(lead)
		f.settled(leader)
		// The next round's frozen stand-by must be first in the queue:
		// only the leader stays.
		f.stopWhere(func(r *replica) bool { return r != leader })
	}
	res.notes = append(res.notes, fmt.Sprintf("from the leader's SIGKILL to the next program, with the first stand-by frozen holding the key: %s (the stand-bys end a holder that is idle without a term for longer than heartbeat interval + timeout + stop time)", spread(costs)))
}

// waitAge is how long backend pid has waited for the role's key, if it
// waits.
func waitAge(t *testing.T, admin *pgx.Conn, pid int32) (time.Duration, bool) {
	t.Helper()
	k := locks.BigintKey(roleKey)
	snap, err := locks.Read(context.Background(), admin, locks.Filter{Keys: []locks.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range snap.Find(k).Waiters {
		if w.PID == pid {
			return w.Waited(snap.Now)
		}
	}
	return 0, false
}

// grantedTo waits up to limit for backend pid to hold the role's key.
func grantedTo(t *testing.T, admin *pgx.Conn, pid int32, limit time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if l, _ := holderPIDs(t, admin); l == pid {
			return true
		}
	}
	return false
}

// frozenLeaderFailover freezes the leader's leasectl and runs `leasectl
// failover ROLE --yes`: the leader cannot answer, so its lease session is
// terminated; the new holder waits for the frozen leader's fence and term
// until it resumes, stops its program and records the end.
func frozenLeaderFailover(t *testing.T, f *fleet, res *result, rounds int, freeze time.Duration) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	var stops, gaps []time.Duration
	for i := range rounds {
		r := f.of(lead)
		freezeReplica(t, r)
		from := h.mark()
		t0 := time.Now()
		cmd := exec.Command(h.leasectl, "failover", role, "--yes", "-o", "json")
		cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+h.keys)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		res.faults++
		time.Sleep(freeze)
		if n := h.count(from, isStart); n > 0 {
			t.Errorf("round %d: a program started while the old leader was frozen", i+1)
		}
		thaw(r)
		lead = handover(t, h, from, t0, lead, fmt.Sprintf("failover %d of a frozen leader", i+1), &stops, &gaps, &res.takeovers)
		if err := cmd.Wait(); err != nil {
			res.notes = append(res.notes, fmt.Sprintf("round %d: failover exited %v: %s", i+1, err, strings.TrimSpace(out.String())))
		}
		f.settled(f.of(lead))
	}
	res.stops, res.gaps = stops, gaps
	res.notes = append(res.notes, fmt.Sprintf("the leader's leasectl was frozen for %s, then `leasectl failover --yes` ran: ", freeze)+handoverNote(stops, gaps))
}

// obituaryOf returns the pid of r's obituary process.
func obituaryOf(t *testing.T, r *replica) int {
	t.Helper()
	pid, ok := leasetest.ObituaryOf(r.pid())
	if !ok {
		t.Fatalf("%s (pid %d) has no obituary process", r.name, r.pid())
	}
	return pid
}

// deadLeader SIGKILLs the leader's leasectl and its obituary and restarts
// the server: nobody can record the end of the term, and the next program
// must start only once the term's deadline has passed.
func deadLeader(t *testing.T, f *fleet, res *result, rounds int) {
	h, dsn := f.h, testLab.DirectDSN()
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	var waits []time.Duration
	for i := range rounds {
		r := f.of(lead)
		obit := obituaryOf(t, r)
		if err := syscall.Kill(obit, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		from := h.mark()
		f.kill(r)
		if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
			t.Fatal(err)
		}
		res.faults++
		next := h.await(t, from, hang, fmt.Sprintf("a takeover from the dead leader (round %d)", i+1), isStart)
		admin = pgtest.Conn(t, dsn, "chaos-admin") // the restart ended the old one
		hist, err := term.History(context.Background(), admin, roleKey, time.Time{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 2 || hist[1].EndReason != term.DeadlinePassed || hist[0].Began.Before(hist[1].Deadline()) {
			t.Fatalf("round %d: history %+v: want the dead leader's term ended by its deadline, and the next one begun after it", i+1, hist)
		}
		waits = append(waits, hist[0].Began.Sub(hist[1].Renewed))
		res.takeovers = append(res.takeovers, hist[0].LeaderlessBefore) // from the last renewal, on the server's clock
		nr := f.of(next)
		if out := nr.log.String(); !strings.Contains(out, "waiting for the previous term to end") || !strings.Contains(out, "deadline; beginning a new term") && !strings.Contains(out, "deadline has passed; beginning a new term") {
			t.Errorf("round %d: the new leader did not log what it waited for:\n%s", i+1, nr.log)
		}
		f.start(direct, dsn, nil)
		lead = next
		f.settled(nr)
	}
	res.notes = append(res.notes, fmt.Sprintf("leasectl and its obituary SIGKILLed, then the server restarted: the next term began %s after the dead term's last renewal (its deadline: heartbeat interval + 2 × timeout + stop time = 8 s)", spread(waits)))
}

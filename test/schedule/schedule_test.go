//go:build linux

package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"

	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/lab"
)

// The fault kinds the schedule draws from, as the report names them.
const (
	sigkill          = "sigkill"            // SIGKILL of a replica; a new one joins
	freezeLeasectl   = "freeze-leasectl"    // SIGSTOP of a replica's leasectl, below its deadline
	freezePast       = "freeze-past"        // SIGSTOP of a leasectl and its programs, past the deadline
	freezeProgram    = "freeze-program"     // SIGSTOP of a replica's programs alone
	terminateByName  = "terminate-sessions" // pg_terminate_backend of every session of the fleet, by application_name
	restartFast      = "restart-fast"       // pg_ctl restart -m fast
	restartImmediate = "restart-immediate"  // pg_ctl restart -m immediate
	poolerReload     = "pooler-reload"      // PgBouncer SIGHUP
	poolerRestart    = "pooler-restart"     // PgBouncer stopped and started
	failoverRole     = "failover-role"      // leasectl failover ROLE --yes
	failoverReplica  = "failover-replica"   // leasectl failover --replica NAME --yes, then that replica's restart
	partition        = "partition"          // the namespace's replica cut off from the server
	pause            = "pause"              // nothing
)

var kinds = []string{sigkill, freezeLeasectl, freezePast, freezeProgram, terminateByName, restartFast, restartImmediate,
	poolerReload, poolerRestart, failoverRole, failoverReplica, partition, pause}

// step is one fault of a schedule.
type step struct {
	Kind string
	Slot int           // the replica it targets
	Role string        // the role it targets (failover-role)
	Hold time.Duration // how long a freeze or a partition lasts
	Gap  time.Duration // the wait before the next fault
}

// plan draws the schedule of seed for d: the same seed gives the same
// faults, targets, holds and gaps. Every number is drawn for every step,
// whatever its kind, so that a change to one kind's use of them does not
// shift the rest of the schedule.
func plan(seed int64, d time.Duration) []step {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	all := roles()
	ms := func(lo, hi int64) time.Duration { return time.Duration(lo+rng.Int64N(hi-lo+1)) * time.Millisecond }
	var out []step
	for at := time.Duration(0); at < d; {
		s := step{Kind: kinds[rng.IntN(len(kinds))], Slot: rng.IntN(slots), Role: all[rng.IntN(len(all))]}
		short, past, cut := ms(500, 2500), ms(10000, 13000), ms(3000, 14000)
		s.Gap = ms(2000, 4000)
		switch s.Kind {
		case freezeLeasectl, freezeProgram:
			// Well below the term's deadline (8 s after the last
			// renewal, which is at most 2 s old): no takeover is due.
			s.Hold = short
		case freezePast:
			// Past the deadline whatever the age of the last renewal.
			s.Hold = past
		case failoverReplica:
			// A drained replica takes no role until it restarts: the
			// node's restart follows its drain.
			s.Hold = short
		case partition:
			// From a blip to past the server's dead-peer time (8 s with
			// 2s/1s/2s): the replica in the namespace is the target.
			s.Hold, s.Slot = cut, netnsSlot
		}
		out = append(out, s)
		at += s.Gap
	}
	return out
}

func TestPlanIsTheSeeds(t *testing.T) {
	a, b, c := plan(7, 10*time.Minute), plan(7, 10*time.Minute), plan(8, 10*time.Minute)
	if !slices.Equal(a, b) {
		t.Fatal("one seed, two schedules")
	}
	if slices.Equal(a, c) {
		t.Fatal("two seeds, one schedule")
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s.Kind] = true
		if s.Gap < 2*time.Second || s.Gap > 4*time.Second {
			t.Fatalf("gap %s out of 2–4 s", s.Gap)
		}
	}
	if len(seen) != len(kinds) {
		t.Errorf("10 minutes of schedule drew %d of the %d kinds", len(seen), len(kinds))
	}
}

// runner applies a schedule to a fleet and records what it did.
type runner struct {
	t *testing.T
	f *fleet

	mu     sync.Mutex
	busy   [slots]bool // frozen or partitioned: no second freeze or cut
	faults []Fault
	frozen []Frozen
	pend   sync.WaitGroup // thaws, heals, failovers
}

func (r *runner) logf(format string, args ...any) {
	r.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// record notes a fault injected at at; the function it returns notes that
// its cause is gone (Fault.Until), for one that lasts.
func (r *runner) record(kind string, at time.Time, replica string) (over func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.faults)
	r.faults = append(r.faults, Fault{Kind: kind, At: at, Replica: replica})
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.faults[i].Until = time.Now()
	}
}

// claim marks slot busy, unless it is already.
func (r *runner) claim(slot int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy[slot] {
		return false
	}
	r.busy[slot] = true
	return true
}

func (r *runner) release(slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[slot] = false
}

// later runs fn after d, counted as pending.
func (r *runner) later(d time.Duration, fn func()) {
	r.pend.Add(1)
	go func() {
		defer r.pend.Done()
		time.Sleep(d)
		fn()
	}()
}

// apply injects s. Freezes, partitions and failovers run on while the
// schedule goes on: faults interleave, as in production.
func (r *runner) apply(s step) {
	f, now := r.f, time.Now()
	target := f.replicaAt(s.Slot)
	switch s.Kind {
	case sigkill:
		dead, next := f.kill(s.Slot)
		r.record(s.Kind, now, dead.name)
		r.logf("%s %s; %s joins", s.Kind, dead.name, next.name)
	case freezeLeasectl, freezePast:
		if !r.claim(s.Slot) {
			r.logf("%s %s skipped: frozen or cut already", s.Kind, target.name)
			return
		}
		all := s.Kind == freezePast
		over := r.record(s.Kind, now, target.name)
		f.freeze(target, all)
		r.logf("%s %s for %s", s.Kind, target.name, s.Hold)
		r.later(s.Hold, func() {
			f.thaw(target, all)
			over()
			if all {
				r.mu.Lock()
				r.frozen = append(r.frozen, Frozen{Replica: target.name, From: now, To: time.Now()})
				r.mu.Unlock()
			}
			r.release(s.Slot)
		})
	case freezeProgram:
		// The target, or else the next replica that runs a program.
		var progs []int
		for k := range slots {
			if target = f.replicaAt((s.Slot + k) % slots); len(f.programsOf(target)) > 0 {
				s.Slot = (s.Slot + k) % slots
				progs = f.programsOf(target)
				break
			}
		}
		if len(progs) == 0 || !r.claim(s.Slot) {
			r.logf("%s %s skipped: no program, or frozen or cut already", s.Kind, target.name)
			return
		}
		over := r.record(s.Kind, now, target.name)
		for _, p := range progs {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		r.logf("%s %s (pids %v) for %s", s.Kind, target.name, progs, s.Hold)
		r.later(s.Hold, func() {
			for _, p := range progs {
				if exeIs(p, f.worker) { // still ours: not exited and reused
					_ = syscall.Kill(p, syscall.SIGCONT)
				}
			}
			over()
			r.release(s.Slot)
		})
	case terminateByName:
		r.record(s.Kind, now, "")
		n, err := r.admin(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE $1 AND pid <> pg_backend_pid()`, f.prefix+"%")
		r.logf("%s: %d sessions (%v)", s.Kind, n, err)
	case restartFast, restartImmediate:
		over := r.record(s.Kind, now, "")
		mode := strings.TrimPrefix(s.Kind, "restart-")
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		err := f.lab.RestartPrimary(ctx, mode)
		cancel()
		if err != nil {
			r.t.Fatalf("%s: %v", s.Kind, err)
		}
		over()
		// The server is down this long: every role's leaderless time
		// after it includes it.
		r.logf("%s (the restart took %s)", s.Kind, time.Since(now).Round(time.Millisecond))
	case poolerReload:
		over := r.record(s.Kind, now, "")
		if err := f.lab.ReconfigurePooler("transaction", func(*lab.PoolerSpec) {}); err != nil {
			r.t.Fatalf("%s: %v", s.Kind, err)
		}
		over()
		r.logf("%s", s.Kind)
	case poolerRestart:
		over := r.record(s.Kind, now, "")
		if err := restartPooler(f.lab); err != nil {
			r.t.Fatalf("%s: %v", s.Kind, err)
		}
		over()
		r.logf("%s (the restart took %s)", s.Kind, time.Since(now).Round(time.Millisecond))
	case failoverRole:
		over := r.record(s.Kind, now, "")
		r.leasectlLater(s.Kind+" "+s.Role, over, "failover", s.Role, "--yes")
	case failoverReplica:
		over := r.record(s.Kind, now, target.name)
		r.leasectlLater(s.Kind+" "+target.name, func() {
			over()
			time.Sleep(s.Hold)
			if next := f.restart(s.Slot, target); next != nil {
				r.logf("%s restarted after its drain: %s", target.name, next.name)
			}
		}, "failover", "--replica", target.name, "--yes")
	case partition:
		if !r.claim(s.Slot) {
			r.logf("%s %s skipped: frozen or cut already", s.Kind, target.name)
			return
		}
		over := r.record(s.Kind, now, target.name)
		if err := ns.Cut(); err != nil {
			r.t.Fatalf("%s: %v", s.Kind, err)
		}
		r.logf("%s %s for %s", s.Kind, target.name, s.Hold)
		r.later(s.Hold, func() {
			if err := ns.Heal(); err != nil {
				r.t.Errorf("heal the partition: %v", err)
			}
			over()
			r.release(s.Slot)
		})
	case pause:
		r.record(s.Kind, now, "")
	}
}

// leasectlLater runs a leasectl command beside the schedule (a failover
// waits for the takeover), then, if given, then; its exit code is logged,
// not judged: a failover during a restart may find no one to take over.
func (r *runner) leasectlLater(what string, then func(), args ...string) {
	f := r.f
	r.pend.Add(1)
	go func() {
		defer r.pend.Done()
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		cmd := exec.CommandContext(ctx, f.leasectl, append(args, "--keys", f.keys, "--dsn", f.directDSN)...)
		out, err := cmd.CombinedOutput()
		r.logf("%s: %v %s", what, exitCode(err), lastLine(string(out)))
		if then != nil {
			then()
		}
	}()
}

// firstLast shows the first and the last of a worker's failures.
func firstLast(fails []string) string {
	switch len(fails) {
	case 0:
		return ""
	case 1:
		return "[" + fails[0] + "]"
	}
	return "[" + fails[0] + " … " + fails[len(fails)-1] + "]"
}

func exitCode(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// admin runs one statement that returns a count, on a connection of its
// own (a restart may have ended any earlier one).
func (r *runner) admin(sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.f.directDSN)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// restartPooler stops the transaction pooler and starts it again on the
// same port and configuration, as an operator's restart does.
func restartPooler(l *lab.Lab) error {
	p := l.Pooler("transaction")
	pid := lab.PoolerPID(p)
	if pid == 0 {
		return fmt.Errorf("pooler %s is not running", p.Name)
	}
	if err := lab.Signal(pid, syscall.SIGTERM); err != nil {
		return err
	}
	for deadline := time.Now().Add(hang); syscall.Kill(pid, 0) == nil; {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer %d did not exit within %s of SIGTERM", pid, hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if _, err := l.Run(ctx, l.Bin.PgBouncer, "-d", p.ConfigFile); err != nil {
		return err
	}
	for deadline := time.Now().Add(hang); !lab.DialOK(p.Port); {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not open port %d within %s", p.Port, hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// TestSchedule runs the schedule of -seed for -duration against the fleet,
// then 20 s of calm, and checks the recorded history. Needs root (the
// partition).
func TestSchedule(t *testing.T) {
	seed, duration := *seedFlag, *durationFlag
	fmt.Printf("seed=%d duration=%s\n", seed, duration)
	if ns == nil {
		t.Fatalf("the schedule partitions a replica, which needs a network namespace: %v", nsErr)
	}
	l := testLab.Get(t)
	f := newFleet(t, l)
	f.relay(ns)
	r := &runner{t: t, f: f}
	// Before the fleet's teardown (cleanups run last first): the thaws,
	// heals and failovers still pending end, and log, within the test.
	t.Cleanup(r.pend.Wait)
	ctx := context.Background()

	if out, err := exec.Command(f.leasectl, "fence", "init", "--dsn", f.directDSN).CombinedOutput(); err != nil {
		t.Fatalf("leasectl fence init: %v\n%s", err, out)
	}
	admin, err := pgx.Connect(ctx, f.directDSN)
	if err != nil {
		t.Fatal(err)
	}
	// A lab may serve several runs (-count): each starts from an empty
	// record, with no replica running.
	for _, sql := range []string{
		"DROP TABLE IF EXISTS schedule_writes",
		"CREATE TABLE schedule_writes (role text NOT NULL, epoch bigint NOT NULL, writer text NOT NULL, seq bigint NOT NULL)",
		"DELETE FROM leasectl.term_history", "DELETE FROM leasectl.term",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin.Close(ctx)

	for i := range slots {
		f.start(i)
	}
	r.waitFor("every role's first committed write", func() (bool, string) {
		n, err := r.admin("SELECT count(DISTINCT role) FROM schedule_writes")
		return err == nil && n == int64(len(roles())), fmt.Sprintf("%d roles wrote (%v)", n, err)
	})

	steps := plan(seed, duration)
	r.logf("schedule of seed %d: %d faults over %s", seed, len(steps), duration)
	for _, s := range steps {
		r.apply(s)
		time.Sleep(s.Gap)
	}
	r.pend.Wait()
	r.logf("calm: 20 s")
	time.Sleep(20 * time.Second)

	// At the end: one program per role, and `who --check` content.
	var atEnd []string
	r.waitFor("one program per role and who --check exit 0", func() (bool, string) {
		atEnd = r.endProblems()
		return len(atEnd) == 0, strings.Join(atEnd, "; ")
	})

	h := History{Seed: seed, Faults: r.faults, Frozen: r.frozen, AtEnd: atEnd, Timing: fleetTiming}
	h.Writes, h.Terms = r.recorded()
	f.teardown()
	r.waitFor("no leasectl, obituary or worker left after teardown", func() (bool, string) {
		left := f.leftovers()
		return len(left) == 0, strings.Join(left, "; ")
	})
	for _, p := range f.leftovers() {
		h.AtEnd = append(h.AtEnd, "left after teardown: "+p)
	}
	runs, err := f.runs()
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]int{}
	for _, w := range h.Writes {
		committed[w.Writer]++
	}
	slices.SortFunc(runs, func(a, b workerRun) int { return a.From.Compare(b.From) })
	for _, x := range runs {
		h.Work = append(h.Work, x.Work)
		h.Refused += x.refused
		// What each worker did, for reading a failing run or a long gap.
		t.Logf("worker %s %s epoch %s %s – %s stopped=%t committed=%d refused=%d failures=%d %s", x.Role, x.Writer, x.epoch,
			x.From.UTC().Format(stamp), x.To.UTC().Format(stamp), x.stopped, committed[x.Writer], x.refused, len(x.fails), firstLast(x.fails))
	}

	if *historyFlag != "" {
		js, err := json.MarshalIndent(h, "", " ")
		if err == nil {
			err = os.WriteFile(*historyFlag, js, 0o644)
		}
		if err != nil {
			t.Errorf("write the history: %v", err)
		} else {
			fmt.Printf("history written to %s (go run ./test/schedule/recheck %s checks it again)\n", *historyFlag, *historyFlag)
		}
	}
	v := Check(h)
	var b strings.Builder
	if err := v.Report(&b, h); err != nil {
		t.Fatal(err)
	}
	fmt.Print(b.String())
	if !v.OK() {
		t.Errorf("the history broke a promise (seed %d reruns this schedule):\n%s", seed, b.String())
	}
}

// waitFor polls cond until it holds; when it does not within hang, it
// fails the test with the last state. The end state is eventual: this is
// not a timing rule.
func (r *runner) waitFor(what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(hang)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("%s: not within %s: %s", what, hang, state)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// endProblems says what is wrong with the fleet at the end: a role
// without exactly one program running, or `who --check` failing.
func (r *runner) endProblems() []string {
	f := r.f
	var out []string
	runs, err := f.runs()
	if err != nil {
		return []string{err.Error()}
	}
	running := map[string]int{}
	for _, x := range runs {
		if !x.stopped && exeIs(x.pid, f.worker) {
			running[x.Role]++
		}
	}
	for _, role := range roles() {
		if n := running[role]; n != 1 {
			out = append(out, fmt.Sprintf("%s: %d programs running", role, n))
		}
	}
	cmd := exec.Command(f.leasectl, append([]string{"who", "--check", "--keys", f.keys, "--dsn", f.directDSN}, roles()...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		out = append(out, fmt.Sprintf("who --check: %v: %s", err, lastLine(string(b))))
	}
	return out
}

// recorded reads the committed writes, with their commit timestamps, and
// every role's terms from `leasectl history ROLE -o json`.
func (r *runner) recorded() ([]Write, []Term) {
	t, f := r.t, r.f
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.directDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT role, epoch, writer, pg_xact_commit_timestamp(xmin) FROM schedule_writes")
	if err != nil {
		t.Fatal(err)
	}
	var writes []Write
	for rows.Next() {
		var w Write
		if err := rows.Scan(&w.Role, &w.Epoch, &w.Writer, &w.Commit); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var terms []Term
	for _, role := range roles() {
		out, err := exec.Command(f.leasectl, "history", role, "-o", "json", "--keys", f.keys, "--dsn", f.directDSN).Output()
		if err != nil {
			t.Fatalf("leasectl history %s: %v", role, err)
		}
		var hist struct {
			Truncated bool `json:"truncated"`
			Terms     []struct {
				Epoch int64     `json:"epoch"`
				Began time.Time `json:"began"`
			} `json:"terms"`
		}
		if err := json.Unmarshal(out, &hist); err != nil {
			t.Fatalf("leasectl history %s -o json: %v", role, err)
		}
		if hist.Truncated {
			t.Fatalf("leasectl history %s -o json is truncated", role)
		}
		for _, x := range hist.Terms {
			terms = append(terms, Term{Role: role, Epoch: x.Epoch, Began: x.Began})
		}
	}
	return writes, terms
}

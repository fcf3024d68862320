//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// plan is how many faults of each kind a run injects, and with which
// settings the partition runs.
type plan struct {
	kills, terminations, partitions int
	// standbyRounds is how many times three stand-bys stop at once.
	standbyRounds int
	// reloadFlags and reloadWatch are the replicas' flags in the
	// pooler-reload scenario, and how long it watches after the reload.
	reloadFlags []string
	reloadWatch time.Duration
	// haSwitchovers and haDeaths are the Patroni faults per DSN form.
	haSwitchovers, haDeaths int
	restarts                []string // pg_ctl stop modes
	// nameTerminations and bothTerminations are the terminations of every
	// replica's sessions by application name, and of the leader's two
	// sessions in one statement; frozenRounds the rounds of each
	// frozen-process scenario.
	nameTerminations, bothTerminations, frozenRounds int
	// partitionFlags are the heartbeat settings of every replica in the
	// partition scenario, and partitionServerTimeout what leasectl makes of
	// them: the server drops a silent client's session after
	// heartbeat-interval + 2 × heartbeat-timeout + grace + 2 s (see
	// cmd/run.go and lease.Config.ServerTimeout).
	partitionFlags         []string
	partitionSettings      string
	partitionServerTimeout time.Duration
}

func currentPlan() plan {
	if *full {
		return plan{kills: 200, terminations: 50, partitions: 3, restarts: modes(15), standbyRounds: 20, haSwitchovers: 3, haDeaths: 3,
			nameTerminations: 30, bothTerminations: 30, frozenRounds: 3,
			reloadWatch:            90 * time.Second,
			partitionSettings:      "defaults: heartbeat 15s/5s, grace 10s → server drops a silent session after 37s",
			partitionServerTimeout: 37 * time.Second}
	}
	return plan{kills: 20, terminations: 10, partitions: 2, restarts: modes(5), standbyRounds: 5, haSwitchovers: 1, haDeaths: 1,
		nameTerminations: 10, bothTerminations: 10, frozenRounds: 1,
		reloadFlags: []string{"--heartbeat-interval", "1s"}, reloadWatch: 15 * time.Second,
		partitionFlags:         []string{"--heartbeat-interval", "1s", "--heartbeat-timeout", "1s", "--grace", "1s"},
		partitionSettings:      "--heartbeat-interval 1s --heartbeat-timeout 1s --grace 1s → server drops a silent session after 6s",
		partitionServerTimeout: 6 * time.Second}
}

// modes is n fast and n immediate pg_ctl stop modes, alternating.
func modes(n int) []string {
	var out []string
	for range n {
		out = append(out, "fast", "immediate")
	}
	return out
}

// result is one scenario's line of the report.
type result struct {
	name      string
	settings  string
	faults    int
	overlaps  int
	unsafe    int // leads over the pooler, or on a standby
	takeovers []time.Duration
	notes     []string
	failed    bool
	// poolerLeads and poolerRefusals count the pooler replica's leads
	// (part of unsafe) and refusals, for its own line of the report.
	poolerLeads, poolerRefusals int
	// stops and gaps, where the old program takes time to stop: from the
	// fault to its exit, and from its exit to the next program's start.
	stops, gaps []time.Duration
	// lags, in the Patroni scenarios: from the new primary accepting
	// writes to the next program's start.
	lags []time.Duration
}

// TestFaults is the fault suite: see the package doc. Each scenario starts a
// fresh fleet of five replicas of `leasectl run` (one through PgBouncer in
// transaction mode), injects its faults, and requires that no two witnesses
// ever ran at once, that the pooler replica never led, and that a takeover
// follows every fault; takeover times are reported, not asserted.
func TestFaults(t *testing.T) {
	h := newHarness(t)
	p := currentPlan()
	var results []*result
	scenario := func(name, settings string, flags []string, fn func(t *testing.T, f *fleet, res *result)) {
		res := &result{name: name, settings: settings}
		results = append(results, res)
		t.Run(name, func(t *testing.T) {
			from := h.mark()
			var f *fleet
			// Registered before the fleet's own cleanup, so that it runs
			// after every replica has stopped.
			t.Cleanup(func() {
				if f != nil {
					res.poolerLeads, res.poolerRefusals = f.checkPoolers()
					res.unsafe += res.poolerLeads
				}
				h.caughtUp(t)
				res.overlaps = h.count(from, isOverlap)
				if res.overlaps > 0 {
					t.Errorf("%d overlap(s): two programs ran at once", res.overlaps)
				}
				res.failed = t.Failed()
			})
			f = h.newFleet(t, flags...)
			fn(t, f, res)
		})
	}
	scenario("SIGKILL of the leading leasectl", "defaults (heartbeat 15s/5s, grace 10s), no takeover delay", nil,
		func(t *testing.T, f *fleet, res *result) { sigkills(t, f, res, p.kills) })
	scenario("pg_terminate_backend of the leader's session", "defaults; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { terminations(t, f, res, p.terminations) })
	scenario("leasectl failover --yes (the leader steps down)", "defaults; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { failovers(t, f, res, p.terminations) })
	scenario("programs that leave daemons behind (setsid, double fork)", "defaults", nil,
		func(t *testing.T, f *fleet, res *result) { daemons(t, f, res, p.terminations) })
	scenario(fmt.Sprintf("PostgreSQL restart (%d × -m fast and -m immediate)", len(p.restarts)/2), "defaults; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { restarts(t, f, res, p.restarts) })
	scenario("pg_terminate_backend of every replica's sessions by application name", "defaults; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { terminateByName(t, f, res, p.nameTerminations) })
	scenario("the leader's lease and fence sessions terminated in one statement", "defaults; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { terminateBoth(t, f, res, p.bothTerminations, 0) })
	scenario("the same, while the leader's leasectl is frozen (SIGSTOP)", "defaults; frozen 5 s; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) { terminateBoth(t, f, res, p.frozenRounds, 5*time.Second) })
	scenario("the first stand-by frozen in the lock queue when the leader dies", strings.Join(shortFlags, " "), shortFlags,
		func(t *testing.T, f *fleet, res *result) { frozenStandby(t, f, res, p.frozenRounds) })
	scenario("a frozen leader, then leasectl failover --yes", "defaults; frozen 8 s; the program takes 300 ms to stop", nil,
		func(t *testing.T, f *fleet, res *result) {
			frozenLeaderFailover(t, f, res, p.frozenRounds, 8*time.Second)
		})
	scenario("leasectl and its obituary SIGKILLed, then a restart (a dead leader)", strings.Join(shortFlags, " "), shortFlags,
		func(t *testing.T, f *fleet, res *result) { deadLeader(t, f, res, p.frozenRounds) })
	scenario("fencing: a frozen leader's program writes after the next term began", strings.Join(fenceFlags, " ")+"; writes through PgBouncer (transaction)", fenceFlags,
		func(t *testing.T, f *fleet, res *result) { frozenLeaderWrites(t, f, res, p.frozenRounds) })
	scenario("fencing: a fenced transaction open across the takeover", strings.Join(fenceFlags, " ")+"; writes through PgBouncer (transaction)", fenceFlags,
		func(t *testing.T, f *fleet, res *result) { longFencedTransaction(t, f, res, p.frozenRounds) })
	scenario("network partition of the leader", p.partitionSettings, p.partitionFlags,
		func(t *testing.T, f *fleet, res *result) { partitions(t, f, res, p) })
	scenario("three stand-bys stopped at once through PgBouncer 1.18 (session mode)", "defaults", nil,
		func(t *testing.T, f *fleet, res *result) { standbysLeave(t, f, res, p.standbyRounds) })
	scenario("PgBouncer reloaded from session to transaction mode under traffic", settingsOf(p.reloadFlags), p.reloadFlags,
		func(t *testing.T, f *fleet, res *result) { poolerReload(t, f, res, p.reloadWatch) })
	scenario("Patroni: switchovers and node deaths, multi-host DSN", "defaults; 3 replicas + 1 on HAProxy's replicas port", nil,
		func(t *testing.T, f *fleet, res *result) {
			checkPatroniProbe(t, h, patroniLab(t))
			patroniFaults(t, f, res, multiHost, p.haSwitchovers, p.haDeaths)
		})
	scenario("Patroni: switchovers and node deaths, HAProxy primary port", "defaults; 3 replicas + 1 on HAProxy's replicas port", nil,
		func(t *testing.T, f *fleet, res *result) {
			patroniFaults(t, f, res, haPrimary, p.haSwitchovers, p.haDeaths)
		})
	t.Cleanup(func() {
		if err := stopPatroniLab(); err != nil {
			t.Errorf("stop the Patroni lab: %v", err)
		}
	})
	scenario("HA failover: primary stopped, standby promoted", "multi-host DSN with target_session_attrs=primary, defaults", nil,
		haFailover)

	h.caughtUp(t)
	if n := h.count(0, isOverlap); n > 0 {
		t.Errorf("%d overlap(s) in the whole suite", n)
	}
	t.Log("fault suite (" + map[bool]string{true: "full", false: "bounded"}[*full] + "):\n" + report(results) + "\n\n" + lagSummary(results))
}

// settingsOf describes a scenario's flags for the report.
func settingsOf(flags []string) string {
	if len(flags) == 0 {
		return "defaults"
	}
	return strings.Join(flags, " ")
}

// sigkills SIGKILLs the leading leasectl n times. With default settings the
// key passes only once its program is gone too (Pdeathsig, and the lease
// socket the program inherits), so no takeover delay is needed.
func sigkills(t *testing.T, f *fleet, res *result, n int) {
	h, dsn := f.h, testLab.DirectDSN()
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	for i := range n {
		from := h.mark()
		killed := time.Now()
		f.kill(f.of(lead))
		res.faults++
		lead = h.await(t, from, hang, fmt.Sprintf("a takeover after SIGKILL %d of the leader", i+1), isStart)
		res.takeovers = append(res.takeovers, lead.At.Sub(killed))
		next := f.of(lead) // a live replica: not the killed one
		f.start(direct, dsn, nil)
		f.settled(next)
	}
}

// stopDelay is how long the witness takes to stop after SIGTERM in the
// scenarios where the server ends the leader's session: a program that
// drains its work. The stop fence must keep the next program from starting
// until it has exited.
const stopDelay = 300 * time.Millisecond

// terminations ends the leader's lease session n times, the way `leasectl
// failover --force` and an operator's pg_terminate_backend do, with default
// flags. The server releases the key as the backend exits, while the old
// program still takes stopDelay to stop: the next leader gets the key at
// once, but must wait for the stop fence, which the old leader releases
// only once its program has exited.
func terminations(t *testing.T, f *fleet, res *result, n int) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	var stepDowns, stops, gaps []time.Duration
	for i := range n {
		pid, err := strconv.ParseUint(lead.BackendPID, 10, 32)
		if err != nil {
			t.Fatalf("witness %d: backend pid %q: %v", lead.PID, lead.BackendPID, err)
		}
		from := h.mark()
		t0 := time.Now()
		if err := leasetest.Terminate(context.Background(), admin, roleKey, uint32(pid)); err != nil {
			t.Fatal(err)
		}
		res.faults++
		term := h.await(t, from, hang, fmt.Sprintf("SIGTERM to the leader's program after termination %d", i+1), isTermOf(lead.PID))
		exit := h.await(t, from, hang, fmt.Sprintf("the old program's exit after termination %d", i+1), isExitOf(lead.PID))
		next := h.await(t, from, hang, fmt.Sprintf("a takeover after termination %d", i+1), isStart)
		stepDowns = append(stepDowns, term.At.Sub(t0))
		stops = append(stops, exit.At.Sub(t0))
		gaps = append(gaps, next.At.Sub(exit.At))
		res.takeovers = append(res.takeovers, next.At.Sub(t0))
		lead = next
		f.settled(f.of(lead))
	}
	res.stops, res.gaps = stops, gaps
	res.notes = append(res.notes, fmt.Sprintf("the program takes %s to stop after SIGTERM; step-down (terminate → SIGTERM): %s; the old program exited %s after the termination, and the next one started %s after that exit (the stop fence)",
		stopDelay, spread(stepDowns), spread(stops), spread(gaps)))
}

// failovers runs `leasectl failover ROLE --yes` n times, with default flags
// and a program that takes stopDelay to stop: the leader is asked to step
// down, stops its program, releases the key, and a stand-by takes over.
func failovers(t *testing.T, f *fleet, res *result, n int) {
	h, dsn := f.h, testLab.DirectDSN()
	f.witnessFlags = []string{"-stop-delay", stopDelay.String()}
	lead := f.startFive(direct, dsn, testLab.PoolerDSN("transaction"))
	var stops, gaps, answers []time.Duration
	paths := map[string]int{}
	for i := range n {
		from := h.mark()
		t0 := time.Now()
		cmd := exec.Command(h.leasectl, "failover", role, "--yes", "-o", "json")
		cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+h.keys)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("failover %d: %v\n%s", i+1, err, out)
		}
		res.faults++
		var doc struct {
			Path   string `json:"path"`
			Resign *struct {
				AnswerMS float64 `json:"answer_ms"`
			} `json:"resign"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("failover %d: %v\n%s", i+1, err, out)
		}
		paths[doc.Path]++
		if doc.Resign != nil {
			answers = append(answers, time.Duration(doc.Resign.AnswerMS*float64(time.Millisecond)))
		}
		exit := h.await(t, from, hang, fmt.Sprintf("the old program's exit after failover %d", i+1), isExitOf(lead.PID))
		next := h.await(t, from, hang, fmt.Sprintf("a takeover after failover %d", i+1), isStart)
		stops = append(stops, exit.At.Sub(t0))
		gaps = append(gaps, next.At.Sub(exit.At))
		res.takeovers = append(res.takeovers, next.At.Sub(t0))
		lead = next
		f.settled(f.of(lead))
	}
	if paths["graceful"] != n {
		t.Errorf("failover paths %v, want every one graceful", paths)
	}
	res.stops, res.gaps = stops, gaps
	res.notes = append(res.notes, fmt.Sprintf("paths %v; the leader answered the request %s after it was sent; its program (%s to stop) exited %s after failover started, and the next one started %s after that exit",
		paths, spread(answers), stopDelay, spread(stops), spread(gaps)))
}

func isExitOf(pid int) func(leasetest.Event) bool {
	return func(ev leasetest.Event) bool { return ev.Kind == leasetest.Exit && ev.PID == pid }
}

// partitions makes the replica in the network namespace the leader and cuts
// its path to PostgreSQL, p.partitions times. The leader must stop its
// program before the server drops its silent session and hands the key on.
func partitions(t *testing.T, f *fleet, res *result, p plan) {
	h := f.h
	ns, err := NewNetns()
	if err != nil {
		res.notes = append(res.notes, "not run: "+err.Error())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.stopAll() // nothing may be left in the namespace
		if err := ns.Close(); err != nil {
			t.Errorf("remove the network namespace: %v", err)
		}
	})
	listenOnVeth(t, ns)
	nsDSN := ns.DSN(testLab.DirectDSN())
	from := h.mark()
	nsr := f.start(partitioned, nsDSN, ns)
	f.start(pooled, testLab.PoolerDSN("transaction"), nil)
	isNSStart := func(ev leasetest.Event) bool { return isStart(ev) && ev.PPID == nsr.pid() }
	lead := h.await(t, from, hang, "the namespace's replica leads", isNSStart)
	limit := hang + p.partitionServerTimeout
	var stepDowns, margins []time.Duration
	for i := range p.partitions {
		if i > 0 {
			// Hand the lease back to the namespace's replica: stop the
			// others (the leader last, so that only it can take over).
			from := h.mark()
			f.stopWhere(func(r *replica) bool { return r.kind == direct })
			lead = h.await(t, from, hang, "the namespace's replica leads again", isNSStart)
		}
		for range 3 {
			f.start(direct, testLab.DirectDSN(), nil)
		}
		f.settled(nsr)

		from := h.mark()
		cut := time.Now()
		if err := ns.Cut(); err != nil {
			t.Fatal(err)
		}
		res.faults++
		term := h.await(t, from, limit, fmt.Sprintf("SIGTERM to the partitioned leader's program (partition %d)", i+1), isTermOf(lead.PID))
		next := h.await(t, from, limit, fmt.Sprintf("a takeover from the partitioned leader (partition %d)", i+1), isStart)
		if err := ns.Heal(); err != nil {
			t.Fatal(err)
		}
		if next.PPID == nsr.pid() {
			t.Fatalf("the partitioned replica started a program during the partition: %+v", next)
		}
		stepDowns = append(stepDowns, term.At.Sub(cut))
		res.takeovers = append(res.takeovers, next.At.Sub(cut))
		margins = append(margins, next.At.Sub(term.At))
		f.settled(f.of(next)) // the namespace's replica too: it reconnected and stands by
		lead = next
	}
	res.notes = append(res.notes,
		"the partitioned leader stopped its program "+spread(stepDowns)+" after the cut; the next program started "+spread(margins)+" after that (the server had dropped the silent session)")
}

// listenOnVeth makes the primary listen on the veth pair's host address too
// (a restart), for as long as the test runs.
func listenOnVeth(t *testing.T, ns *Netns) {
	t.Helper()
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	pgtest.Exec(t, admin, "ALTER SYSTEM SET listen_addresses = '127.0.0.1,"+ns.HostAddr+"'")
	t.Cleanup(func() {
		// Back to the lab's own setting, for the next restart.
		cfg, err := dbconn.Parse(testLab.DirectDSN(), 10*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		conn, err := dbconn.Connect(context.Background(), cfg)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "ALTER SYSTEM RESET listen_addresses"); err != nil {
			t.Error(err)
		}
	})
	if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
}

// haFailover stops the primary and promotes the standby of a lab of its
// own (a promotion cannot be undone), with every replica that may lead on
// the multi-host DSN: the leader's program is stopped, every replica drops
// its session, none ever holds or waits for the key on the standby while it
// is in recovery, and exactly one leads on the promoted server.
func haFailover(t *testing.T, f *fleet, res *result) {
	h, ctx := f.h, context.Background()
	ha, err := lab.Start(ctx, lab.Options{Standby: true, Poolers: []lab.PoolerSpec{{Name: "transaction", Mode: lab.Transaction, PoolSize: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.stopAll()
		if err := ha.Stop(context.Background()); err != nil {
			t.Errorf("stop the HA lab: %v", err)
		}
	})
	lead := f.startFive(multiHost, ha.MultiHostDSN(), ha.PoolerDSN("transaction"))
	checkHolder(t, pgtest.Conn(t, ha.DirectDSN(), "chaos-ha"), "the primary", lead.BackendPID)

	watch := watchStandby(pgtest.Conn(t, ha.StandbyDSN(), "chaos-ha-watch"))
	defer watch.stop()
	seen := map[*replica]int{}
	for _, r := range f.live {
		seen[r] = len(r.lines())
	}
	from := h.mark()
	t0 := time.Now()
	if err := ha.StopServer(ctx, &ha.Primary, "fast"); err != nil {
		t.Fatal(err)
	}
	res.faults++
	h.await(t, from, hang, "SIGTERM to the leader's program when the primary stops", isTermOf(lead.PID))
	for _, r := range f.live {
		if r.kind == multiHost {
			f.waitLine(r, seen[r], "that it dropped its session with the stopped primary", func(l logLine) bool { return l.State == "connecting" })
		}
	}
	promoting := time.Now()
	if err := ha.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promotion := time.Since(promoting)
	next := h.await(t, from, hang, "a leader on the promoted standby", isStart)
	res.takeovers = append(res.takeovers, next.At.Sub(t0))
	polls, violations, err := watch.stop()
	if err != nil {
		t.Errorf("watching the standby's pg_locks: %v", err)
	}
	res.unsafe += len(violations)
	for _, v := range violations {
		t.Error(v)
	}
	newLeader := f.of(next)
	if newLeader.kind != multiHost {
		t.Fatalf("%s led after the failover", newLeader.name)
	}
	checkHolder(t, pgtest.Conn(t, ha.StandbyDSN(), "chaos-ha"), "the promoted standby", next.BackendPID)
	for _, r := range f.live {
		if r.kind == multiHost {
			f.waitLine(r, seen[r], "a connection to the promoted standby", func(l logLine) bool { return l.Msg == "connected" && l.Port == ha.Standby.Port })
		}
	}
	f.settled(newLeader)
	if n := h.count(from, isStart); n != 1 {
		t.Errorf("%d programs started after the failover, want exactly 1", n)
	}
	res.notes = append(res.notes, fmt.Sprintf("takeover counts from stopping the primary; promotion took %s, the new leader's program started %s after it returned (the stand-bys watch every host for a promotion; pg_ctl promote returns a little after the server accepts writes); the standby's pg_locks, polled %d times until then, never showed the key while in recovery",
		fmtDur(promotion), fmtDur(next.At.Sub(promoting.Add(promotion))), polls))
}

// checkHolder fails unless backend pid backendPID holds the role's key on
// conn's server.
func checkHolder(t *testing.T, conn *pgx.Conn, where, backendPID string) {
	t.Helper()
	if holder, ok := roleKeyHolder(t, conn); !ok || strconv.Itoa(int(holder.PID)) != backendPID {
		t.Errorf("on %s the key is held by %+v (held: %v), want the leader's backend %s", where, holder, ok, backendPID)
	}
}

// roleKeyHolder returns the holder of the role's key on conn's server.
func roleKeyHolder(t *testing.T, conn *pgx.Conn) (locks.Session, bool) {
	t.Helper()
	k := locks.BigintKey(roleKey)
	snap, err := locks.Read(context.Background(), conn, locks.Filter{Keys: []locks.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	return snap.Find(k).Holder()
}

// standbyWatch polls a standby's pg_locks for the role's key.
type standbyWatch struct {
	quit, done chan struct{}
	once       sync.Once
	polls      int
	violations []string
	err        error
}

// watchStandby polls conn's server until stop: a holder or waiter of the
// role's key while the server is still in recovery (asked after reading
// pg_locks, so the snapshot was taken in recovery) is a replica leading,
// or about to lead, on a standby.
func watchStandby(conn *pgx.Conn) *standbyWatch {
	w := &standbyWatch{quit: make(chan struct{}), done: make(chan struct{})}
	k := locks.BigintKey(roleKey)
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.quit:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			snap, err := locks.Read(ctx, conn, locks.Filter{Keys: []locks.Key{k}})
			var info dbconn.ServerInfo
			if err == nil {
				info, err = dbconn.Server(ctx, conn)
			}
			cancel()
			if err != nil {
				w.err = err
				return
			}
			w.polls++
			if l := snap.Find(k); info.InRecovery && (len(l.Holders) > 0 || len(l.Waiters) > 0) {
				w.violations = append(w.violations, fmt.Sprintf("the standby's pg_locks shows the role's key while in recovery: holders %+v, waiters %+v", l.Holders, l.Waiters))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// stop ends the polling and returns what it saw.
func (w *standbyWatch) stop() (polls int, violations []string, err error) {
	w.once.Do(func() { close(w.quit) })
	<-w.done
	return w.polls, w.violations, w.err
}

// ---- report ----

// report renders the results as a Markdown table, the pooler's line and the
// notes below it.
func report(results []*result) string {
	var b strings.Builder
	b.WriteString("| scenario | faults | overlaps | unsafe leads | takeover median | takeover max | settings |\n|---|---|---|---|---|---|---|\n")
	refusals, poolerLeads, scenarios := 0, 0, 0
	for _, r := range results {
		name := r.name
		if r.failed {
			name += " **(FAILED)**"
		}
		med, mx := "—", "—"
		if len(r.takeovers) > 0 {
			s := benchutil.Summarize(r.takeovers)
			med, mx = fmtDur(s.Median), fmtDur(s.Max)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s |\n", name, r.faults, r.overlaps, r.unsafe, med, mx, r.settings)
		refusals += r.poolerRefusals
		poolerLeads += r.poolerLeads
		if r.poolerRefusals > 0 {
			scenarios++
		}
	}
	fmt.Fprintf(&b, "| one replica where a lease is unsafe (PgBouncer in transaction mode, HAProxy's replicas port), in %d scenarios | %d refusals | — | %d | — | — | the probe refuses the DSN |\n", scenarios, refusals, poolerLeads)
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(&b, "\n- %s: %s", r.name, n)
		}
	}
	return b.String()
}

// spread renders the median and max of ds, or each of a few.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	if len(ds) <= 3 {
		each := make([]string, len(ds))
		for i, d := range ds {
			each[i] = fmtDur(d)
		}
		return strings.Join(each, ", ")
	}
	s := benchutil.Summarize(ds)
	return "median " + fmtDur(s.Median) + ", max " + fmtDur(s.Max)
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return benchutil.Ms(d)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// TestWitnessSeesOverlaps shows that the witness reports two programs at
// once when they happen: two replicas of leasectl run hold different keys,
// so both lead, and their witnesses share one lock file. Without this, zero
// overlaps in TestFaults could mean a blind witness.
func TestWitnessSeesOverlaps(t *testing.T) {
	h := newHarness(t)
	f := h.newFleet(t)
	from := h.mark()
	first := f.start(direct, testLab.DirectDSN(), nil)
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(first)
	// A second replica on another key: it leads at once, beside the first.
	cmd := exec.Command(h.leasectl, "run", "--key", strconv.FormatInt(roleKey+1, 10), "--", h.witness, "-lock", h.lock, "-notify", h.listener.Path)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+testLab.DirectDSN())
	var log leasetest.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	ev := h.await(t, from, hang, "an overlap report from the witness", isOverlap)
	if ev.PPID != cmd.Process.Pid || lead.PPID == ev.PPID {
		t.Errorf("the overlap was reported by %d, want the second replica %d:\n%s", ev.PPID, cmd.Process.Pid, log.String())
	}
}

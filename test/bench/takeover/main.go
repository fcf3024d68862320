//go:build unix

// Command takeover measures how fast `leasectl run` hands a role over, on a
// lab of its own:
//
//   - takeover: SIGKILL of the leading leasectl run → the next replica's
//     program starts (its first line reaches this program), with default
//     settings; target median ≤ 20 ms, p99 ≤ 100 ms;
//   - step-down: pg_terminate_backend of the leader's lease session → its
//     program receives SIGTERM; target median ≤ 100 ms;
//   - baseline, in the same run: the raw server-side handoff, a pgx session
//     waiting in pg_advisory_lock until it gets the key after SIGKILL of the
//     process that held it;
//   - graceful failover: a request to step down (as `leasectl failover`
//     sends it) → the next replica's program starts;
//   - terminate: pg_terminate_backend of the leader's lease session → the
//     next replica's program starts;
//   - group takeover, per role (group.go): -replicas replicas of `leasectl
//     run --procfile` over -group-roles roles (3 and 50), the same program
//     for each; SIGKILL of the replica that runs the most programs → each
//     of its roles' programs starts on another replica; target median ≤
//     50 ms, p99 ≤ 250 ms.
//
// With -compare REF it also builds leasectl at git ref REF (the previous
// release) and measures both builds in the same run, in -blocks
// alternating blocks each, so that the machine's drift falls on both.
//
// The program is a few lines of sh reporting over a FIFO, so that the
// figures are leasectl's and not the start-up of a heavier child (a Go
// binary takes several milliseconds more to reach its first line).
//
// Like `leasectl run`, it needs Unix (a FIFO, sh, signals); on Windows it is
// not built.
//
// Run it with: go run ./test/bench/takeover [-kills 60] [-stepdowns 30] [-gracefuls 20] [-group-roles 50] [-group-kills 5] [-compare REF -blocks 4]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/leasetest"
)

const (
	roleKey     = 9400001
	baselineKey = 9400002
	holderEnv   = "TAKEOVER_BENCH_HOLD_DSN"
	settle      = 200 * time.Millisecond // after "standing by": the stand-by's lock request reaches the server
)

func main() {
	if dsn := os.Getenv(holderEnv); dsn != "" {
		hold(dsn)
		return
	}
	kills := flag.Int("kills", 60, "SIGKILLs of the leading leasectl run, per build")
	stepdowns := flag.Int("stepdowns", 30, "terminations of the leader's lease session, per build")
	gracefuls := flag.Int("gracefuls", 20, "graceful failovers (a request to step down), per build")
	baseline := flag.Int("baseline", 60, "raw handoffs after SIGKILL of a holder process")
	replicas := flag.Int("replicas", 3, "replicas of leasectl run")
	groupRoles := flag.Int("group-roles", 50, "roles of the group takeover (run --procfile)")
	groupKills := flag.Int("group-kills", 5, "SIGKILLs of a group replica, per build (0: no group takeover)")
	compare := flag.String("compare", "", "also measure leasectl built at this git ref (the previous release), in the same run, in alternating blocks")
	blocks := flag.Int("blocks", 4, "with -compare: blocks per build, alternating")
	flag.Parse()
	o := options{kills: *kills, stepdowns: *stepdowns, gracefuls: *gracefuls, baselines: *baseline, replicas: *replicas,
		groupRoles: *groupRoles, groupKills: *groupKills, compare: *compare, blocks: max(*blocks, 1)}
	if o.compare == "" {
		o.blocks = 1
	}
	if err := bench(o); err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		os.Exit(1)
	}
}

type options struct {
	kills, stepdowns, gracefuls, baselines, replicas, groupRoles, groupKills int
	compare                                                                  string
	blocks                                                                   int
}

// hold takes the baseline key on dsn, says so on stdout and waits to be
// killed.
func hold(dsn string) {
	conn := mustConnect(dsn)
	if ok, err := locks.TryLock(context.Background(), conn, baselineKey); err != nil || !ok {
		fmt.Fprintln(os.Stderr, "hold:", ok, err)
		os.Exit(1)
	}
	fmt.Println("held")
	select {}
}

func mustConnect(dsn string) *pgx.Conn {
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err == nil {
		var conn *pgx.Conn
		if conn, err = dbconn.Connect(context.Background(), cfg); err == nil {
			return conn
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
	return nil
}

// build is one leasectl binary under measurement, and what it measured.
type build struct {
	name, leasectl                          string
	take, down, graceful, terminated, group []time.Duration
	toKey, toStart, toReport                []time.Duration
	moved                                   []int
}

// share splits n into blocks parts, the first ones one larger.
func share(n, blocks, i int) int { return n/blocks + btoi(i < n%blocks) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func bench(o options) error {
	ctx := context.Background()
	l, dir, leasectl, err := benchutil.StartLab(ctx, lab.Options{Poolers: []lab.PoolerSpec{}}, "a lab")
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	builds := []*build{{name: "this tree", leasectl: leasectl}}
	if o.compare != "" {
		fmt.Fprintf(os.Stderr, "building leasectl at %s …\n", o.compare)
		prev, err := benchutil.BuildLeasectlAt(o.compare, filepath.Join(dir, "compare"))
		if err != nil {
			return err
		}
		builds = append(builds, &build{name: o.compare, leasectl: prev})
	}
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "roles:\n  bench: %d\n", roleKey), 0o600); err != nil {
		return err
	}
	events, err := benchutil.ListenFIFO(filepath.Join(dir, "events"))
	if err != nil {
		return err
	}
	s := &setup{lab: l, keys: keysFile, events: events, byPID: map[int]*benchutil.Replica{}}
	defer s.stopAll()

	fmt.Fprintf(os.Stderr, "baseline: %d raw handoffs …\n", o.baselines)
	base, err := s.baseline(o.baselines)
	if err != nil {
		return err
	}
	for blk := range o.blocks {
		for _, b := range builds {
			s.b = b
			s.leasectl = b.leasectl
			kills, downs, gracefuls := share(o.kills, o.blocks, blk), share(o.stepdowns, o.blocks, blk), share(o.gracefuls, o.blocks, blk)
			fmt.Fprintf(os.Stderr, "%s (block %d of %d): %d SIGKILLs of the leader among %d replicas, %d graceful failovers, %d terminations of the leader's session …\n",
				b.name, blk+1, o.blocks, kills, o.replicas, gracefuls, downs)
			take, leader, err := s.takeovers(kills, o.replicas)
			if err != nil {
				return err
			}
			b.take = append(b.take, take...)
			graceful, leader, err := s.gracefulFailovers(gracefuls, leader)
			if err != nil {
				return err
			}
			b.graceful = append(b.graceful, graceful...)
			down, terminated, err := s.stepDowns(downs, leader)
			if err != nil {
				return err
			}
			b.down, b.terminated = append(b.down, down...), append(b.terminated, terminated...)
			s.stopAll()
		}
	}
	if o.groupKills > 0 {
		for blk := range o.blocks {
			for _, b := range builds {
				s.b = b
				s.leasectl = b.leasectl
				n := share(o.groupKills, o.blocks, blk)
				if n == 0 {
					continue
				}
				fmt.Fprintf(os.Stderr, "%s (block %d of %d): group takeover: %d SIGKILLs of the replica leading the most of %d roles among %d replicas of run --procfile …\n",
					b.name, blk+1, o.blocks, n, o.groupRoles, o.replicas)
				group, moved, err := s.groupTakeovers(dir, o.groupRoles, o.replicas, n)
				if err != nil {
					return err
				}
				b.group, b.moved = append(b.group, group...), append(b.moved, moved...)
			}
		}
	}

	fmt.Printf("leasectl run failover on loopback, default settings (%s, %s, %s/%s, %d CPUs)\n", l.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if len(builds) > 1 {
		fmt.Printf("builds: this tree, and %s; measured in %d alternating blocks each\n", o.compare, o.blocks)
	}
	fmt.Printf("\n%-64s %5s %9s %9s %9s\n", "", "n", "median", "p99", "max")
	report("baseline: SIGKILL holder → waiter gets the key (pgx)", base)
	for _, b := range builds {
		tag := ""
		if len(builds) > 1 {
			tag = " [" + b.name + "]"
		}
		report("takeover: SIGKILL leader → next replica's program runs"+tag, b.take)
		report("  of which: SIGKILL → the next replica logs leading", b.toKey)
		report("            leading → program started (fork, exec)", b.toStart)
		report("            started → program's first line (sh)", b.toReport)
		report("graceful failover: request → next replica's program runs"+tag, b.graceful)
		report("terminate leader's session → its program's SIGTERM"+tag, b.down)
		report("terminate leader's session → next replica's program runs"+tag, b.terminated)
		if o.groupKills > 0 {
			report(fmt.Sprintf("group takeover, per role (%d roles, run --procfile)%s", o.groupRoles, tag), b.group)
			fmt.Printf("  SIGKILL of the replica running the most → each of its roles' programs runs elsewhere (roles moved per kill: %s)\n", strings.Trim(fmt.Sprint(b.moved), "[]"))
		}
	}
	cur := builds[0]
	tk, dn := benchutil.Summarize(cur.take), benchutil.Summarize(cur.down)
	baseMedian := benchutil.Summarize(base).Median
	fmt.Printf("\ntakeover median = %s × baseline median\n", benchutil.Ratio(tk.Median, baseMedian))
	if len(builds) > 1 {
		prev := builds[1]
		for _, r := range []struct {
			what      string
			cur, prev []time.Duration
		}{{"takeover", cur.take, prev.take}, {"graceful failover", cur.graceful, prev.graceful}, {"terminate → next program", cur.terminated, prev.terminated}, {"group takeover per role", cur.group, prev.group}} {
			if len(r.cur) > 0 && len(r.prev) > 0 {
				fmt.Printf("%s median: this tree = %s × %s\n", r.what, benchutil.Ratio(benchutil.Summarize(r.cur).Median, benchutil.Summarize(r.prev).Median), o.compare)
			}
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("targets: takeover median ≤ 20 ms %s, p99 ≤ 100 ms %s; step-down median ≤ 100 ms %s",
		verdict(tk.Median <= 20*time.Millisecond), verdict(tk.P99 <= 100*time.Millisecond), verdict(dn.Median <= 100*time.Millisecond))
	if o.groupKills > 0 {
		g := benchutil.Summarize(cur.group)
		fmt.Printf("; group takeover per role median ≤ 50 ms %s, p99 ≤ 250 ms %s", verdict(g.Median <= 50*time.Millisecond), verdict(g.P99 <= 250*time.Millisecond))
	}
	fmt.Println()
	return nil
}

// stopAll stops every replica of the single-role phases.
func (s *setup) stopAll() {
	var rs []*benchutil.Replica
	for pid, r := range s.byPID {
		rs = append(rs, r)
		delete(s.byPID, pid)
	}
	benchutil.StopReplicas(rs)
}

type setup struct {
	lab            *lab.Lab
	leasectl, keys string
	events         *benchutil.FIFO
	pending        []leasetest.Event // received, not yet asked for
	byPID          map[int]*benchutil.Replica
	// b is the build under measurement, which gets the parts of each
	// takeover from the new leader's log: kill → it logs leading; → it has
	// started the program (fork, exec); → the program's first report (its
	// runtime's start).
	b *build
}

// start runs another replica of leasectl run on the lab's primary.
func (s *setup) start() (*benchutil.Replica, error) {
	r, err := benchutil.StartReplica(s.leasectl, "bench", s.events, "LEASECTL_DSN="+s.lab.DirectDSN(), "LEASECTL_KEYS="+s.keys)
	if err != nil {
		return nil, err
	}
	s.byPID[r.PID()] = r
	return r, nil
}

// next returns the oldest event of kind from the programs, keeping the
// others for later: after pg_terminate_backend the new leader's program may
// report its start before the old one reports its SIGTERM.
func (s *setup) next(kind string) (leasetest.Event, error) { return s.nextOf(kind, 0) }

// nextOf is next for the events of program pid only (any, when 0); others
// of that kind stay queued (the SIGTERMs of an earlier phase's programs,
// stopped with their replicas, arrive late).
func (s *setup) nextOf(kind string, pid int) (leasetest.Event, error) {
	match := func(ev leasetest.Event) bool { return ev.Kind == kind && (pid == 0 || ev.PID == pid) }
	for i, ev := range s.pending {
		if match(ev) {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return ev, nil
		}
	}
	deadline := time.After(time.Minute)
	for {
		select {
		case ev := <-s.events.Events:
			if match(ev) {
				return ev, nil
			}
			s.pending = append(s.pending, ev)
		case <-deadline:
			var b strings.Builder
			for pid, r := range s.byPID {
				fmt.Fprintf(&b, "\nreplica %d:\n  %s", pid, r.Tail())
			}
			return leasetest.Event{}, fmt.Errorf("no %s event within a minute%s", kind, b.String())
		}
	}
}

func (s *setup) othersStandingBy(leader int) error {
	for pid, r := range s.byPID {
		if pid != leader {
			if err := r.StandingBy(time.Minute, settle); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeovers returns the measurements and the last leader's start event.
func (s *setup) takeovers(n, replicas int) ([]time.Duration, leasetest.Event, error) {
	for i := 0; i < replicas; i++ {
		if _, err := s.start(); err != nil {
			return nil, leasetest.Event{}, err
		}
	}
	leader, err := s.next(leasetest.Start)
	if err != nil {
		return nil, leader, err
	}
	var out []time.Duration
	for i := 0; i < n; i++ {
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, leader, err
		}
		r := s.byPID[leader.PPID]
		t0 := time.Now()
		_ = r.Cmd.Process.Kill()
		next, err := s.next(leasetest.Start)
		if err != nil {
			return nil, leader, err
		}
		out = append(out, next.At.Sub(t0))
		if nr := s.byPID[next.PPID]; nr != nil {
			leading, started := nr.LoggedStart(t0)
			if !started.IsZero() {
				s.b.toKey = append(s.b.toKey, leading.Sub(t0))
				s.b.toStart = append(s.b.toStart, started.Sub(leading))
				s.b.toReport = append(s.b.toReport, next.At.Sub(started))
			}
		}
		<-r.Exited
		delete(s.byPID, leader.PPID)
		leader = next
		if _, err := s.start(); err != nil {
			return nil, leader, err
		}
	}
	return out, leader, s.othersStandingBy(leader.PPID)
}

// stepDowns terminates the leader's lease session n times and returns, for
// each, how long until its program got SIGTERM and until the next leader's
// program ran.
func (s *setup) stepDowns(n int, leader leasetest.Event) (down, next []time.Duration, err error) {
	admin := mustConnect(s.lab.DirectDSN())
	defer admin.Close(context.Background())
	for i := 0; i < n; i++ {
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, nil, err
		}
		pid, _ := strconv.ParseUint(leader.BackendPID, 10, 32)
		t0 := time.Now()
		if err := leasetest.Terminate(context.Background(), admin, roleKey, uint32(pid)); err != nil {
			return nil, nil, err
		}
		term, err := s.nextOf(leasetest.Term, leader.PID)
		if err != nil {
			return nil, nil, err
		}
		down = append(down, term.At.Sub(t0))
		if leader, err = s.next(leasetest.Start); err != nil {
			return nil, nil, err
		}
		next = append(next, leader.At.Sub(t0))
		// The terminated replica reconnects, probes and stands by again.
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, nil, err
		}
	}
	return down, next, nil
}

// gracefulFailovers asks the leader to step down n times, as `leasectl
// failover` does (this tree's locks package for every build: it is the
// leader and the stand-by that are measured), and returns how long each
// took from the request until the next leader's program ran.
func (s *setup) gracefulFailovers(n int, leader leasetest.Event) ([]time.Duration, leasetest.Event, error) {
	ctx := context.Background()
	conn := mustConnect(s.lab.DirectDSN())
	defer conn.Close(ctx)
	var out []time.Duration
	for i := 0; i < n; i++ {
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, leader, err
		}
		target, err := locks.FindTarget(ctx, conn, locks.BigintKey(roleKey), map[int64]string{roleKey: "bench"})
		if err != nil {
			return nil, leader, err
		}
		t0 := time.Now()
		res, err := target.Failover(ctx, conn, locks.FailoverOptions{})
		if err != nil {
			return nil, leader, err
		}
		if res.Path != locks.PathGraceful {
			return nil, leader, fmt.Errorf("the leader did not step down on request: %s", res.Path)
		}
		next, err := s.next(leasetest.Start)
		if err != nil {
			return nil, leader, err
		}
		out = append(out, next.At.Sub(t0))
		// The old program's SIGTERM, which came first.
		if _, err := s.nextOf(leasetest.Term, leader.PID); err != nil {
			return nil, leader, err
		}
		leader = next
	}
	return out, leader, s.othersStandingBy(leader.PPID)
}

// baseline measures the raw handoff: a holder process takes the key, a pgx
// session here waits for it in pg_advisory_lock, the holder is SIGKILLed.
func (s *setup) baseline(n int) ([]time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	waiter := mustConnect(s.lab.DirectDSN())
	defer waiter.Close(context.Background())
	var out []time.Duration
	for i := 0; i < n; i++ {
		holder := exec.Command(self)
		holder.Env = append(os.Environ(), holderEnv+"="+s.lab.DirectDSN())
		stdout, err := holder.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := holder.Start(); err != nil {
			return nil, err
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "held" {
			_ = holder.Process.Kill()
			return nil, fmt.Errorf("holder: %q %v", line, err)
		}
		got := make(chan time.Time, 1)
		errs := make(chan error, 1)
		go func() {
			ok, err := locks.WaitLock(context.Background(), waiter, locks.BigintKey(baselineKey), time.Minute)
			if err == nil && !ok {
				err = fmt.Errorf("baseline waiter timed out")
			}
			if err != nil {
				errs <- err
				return
			}
			got <- time.Now()
		}()
		time.Sleep(settle)
		t0 := time.Now()
		_ = holder.Process.Kill()
		select {
		case t1 := <-got:
			out = append(out, t1.Sub(t0))
		case err := <-errs:
			return nil, err
		}
		_ = holder.Wait()
		if _, err := locks.Unlock(context.Background(), waiter, baselineKey); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func report(name string, d []time.Duration) {
	st := benchutil.Summarize(d)
	fmt.Printf("%-64s %5d %9s %9s %9s\n", name, st.N, benchutil.Ms(st.Median), benchutil.Ms(st.P99), benchutil.Ms(st.Max))
}

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
//   - group takeover, per role (group.go): -replicas replicas of `leasectl
//     run --procfile` over -group-roles roles (3 and 50), the same program
//     for each; SIGKILL of the replica that runs the most programs → each
//     of its roles' programs starts on another replica.
//
// The program is a few lines of sh reporting over a FIFO, so that the
// figures are leasectl's and not the start-up of a heavier child (a Go
// binary takes several milliseconds more to reach its first line).
//
// Like `leasectl run`, it needs Unix (a FIFO, sh, signals); on Windows it is
// not built.
//
// Run it with: go run ./internal/bench/takeover [-kills 60] [-stepdowns 30] [-group-roles 50] [-group-kills 5]
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
	"github.com/leasectl/leasectl/internal/benchutil"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/internal/leasetest"
	"github.com/leasectl/leasectl/locks"
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
	kills := flag.Int("kills", 60, "SIGKILLs of the leading leasectl run")
	stepdowns := flag.Int("stepdowns", 30, "terminations of the leader's lease session")
	baseline := flag.Int("baseline", 60, "raw handoffs after SIGKILL of a holder process")
	replicas := flag.Int("replicas", 3, "replicas of leasectl run")
	groupRoles := flag.Int("group-roles", 50, "roles of the group takeover (run --procfile)")
	groupKills := flag.Int("group-kills", 5, "SIGKILLs of a group replica (0: no group takeover)")
	flag.Parse()
	if err := bench(*kills, *stepdowns, *baseline, *replicas, *groupRoles, *groupKills); err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		os.Exit(1)
	}
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

func bench(kills, stepdowns, baselines, replicas, groupRoles, groupKills int) error {
	ctx := context.Background()
	l, dir, leasectl, err := benchutil.StartLab(ctx, lab.Options{Poolers: []lab.PoolerSpec{}}, "a lab")
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "roles:\n  bench: %d\n", roleKey), 0o600); err != nil {
		return err
	}
	events, err := benchutil.ListenFIFO(filepath.Join(dir, "events"))
	if err != nil {
		return err
	}
	s := &setup{lab: l, leasectl: leasectl, keys: keysFile, events: events, byPID: map[int]*benchutil.Replica{}}
	defer func() {
		var rs []*benchutil.Replica
		for _, r := range s.byPID {
			rs = append(rs, r)
		}
		benchutil.StopReplicas(rs)
	}()

	fmt.Fprintf(os.Stderr, "baseline: %d raw handoffs …\n", baselines)
	base, err := s.baseline(baselines)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "takeover: %d SIGKILLs of the leader among %d replicas …\n", kills, replicas)
	take, leader, err := s.takeovers(kills, replicas)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "step-down: %d terminations of the leader's session …\n", stepdowns)
	down, err := s.stepDowns(stepdowns, leader)
	if err != nil {
		return err
	}
	var group []time.Duration
	var moved []int
	if groupKills > 0 {
		var rs []*benchutil.Replica
		for pid, r := range s.byPID {
			rs = append(rs, r)
			delete(s.byPID, pid)
		}
		benchutil.StopReplicas(rs)
		fmt.Fprintf(os.Stderr, "group takeover: %d SIGKILLs of the replica leading the most of %d roles among %d replicas of run --procfile …\n", groupKills, groupRoles, replicas)
		if group, moved, err = s.groupTakeovers(dir, groupRoles, replicas, groupKills); err != nil {
			return err
		}
	}

	fmt.Printf("leasectl run failover on loopback, default settings (%s, %s, %s/%s, %d CPUs)\n\n", l.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Printf("%-58s %5s %9s %9s %9s\n", "", "n", "median", "p99", "max")
	report("baseline: SIGKILL holder → waiter gets the key (pgx)", base)
	report("takeover: SIGKILL leader → next replica's program runs", take)
	report("  of which: SIGKILL → the next replica holds the key", s.toKey)
	report("            key → program started (fork, exec)", s.toStart)
	report("            started → program's first line (sh)", s.toReport)
	report("step-down: terminate leader's session → program SIGTERM", down)
	if groupKills > 0 {
		report(fmt.Sprintf("group takeover, per role (%d roles, run --procfile):", groupRoles), group)
		fmt.Printf("  SIGKILL of the replica running the most → each of its roles' programs runs elsewhere (roles moved per kill: %s)\n", strings.Trim(fmt.Sprint(moved), "[]"))
	}
	tk, dn := benchutil.Summarize(take), benchutil.Summarize(down)
	fmt.Printf("\ntakeover median = %s × baseline median\n", benchutil.Ratio(tk.Median, benchutil.Summarize(base).Median))
	if groupKills > 0 {
		fmt.Printf("group takeover median per role = %s × the single-role takeover median\n", benchutil.Ratio(benchutil.Summarize(group).Median, tk.Median))
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("targets: takeover median ≤ 20 ms %s, p99 ≤ 100 ms %s; step-down median ≤ 100 ms %s\n",
		verdict(tk.Median <= 20*time.Millisecond), verdict(tk.P99 <= 100*time.Millisecond), verdict(dn.Median <= 100*time.Millisecond))
	return nil
}

type setup struct {
	lab            *lab.Lab
	leasectl, keys string
	events         *benchutil.FIFO
	pending        []leasetest.Event // received, not yet asked for
	byPID          map[int]*benchutil.Replica
	// The parts of each takeover, from the new leader's log: kill → it holds
	// the key; → it has started the program (fork, exec); → the program's
	// first report (its runtime's start).
	toKey, toStart, toReport []time.Duration
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
func (s *setup) next(kind string) (leasetest.Event, error) {
	for i, ev := range s.pending {
		if ev.Kind == kind {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return ev, nil
		}
	}
	deadline := time.After(time.Minute)
	for {
		select {
		case ev := <-s.events.Events:
			if ev.Kind == kind {
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
				s.toKey = append(s.toKey, leading.Sub(t0))
				s.toStart = append(s.toStart, started.Sub(leading))
				s.toReport = append(s.toReport, next.At.Sub(started))
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

func (s *setup) stepDowns(n int, leader leasetest.Event) ([]time.Duration, error) {
	admin := mustConnect(s.lab.DirectDSN())
	defer admin.Close(context.Background())
	var out []time.Duration
	for i := 0; i < n; i++ {
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, err
		}
		pid, _ := strconv.ParseUint(leader.BackendPID, 10, 32)
		t0 := time.Now()
		if err := leasetest.Terminate(context.Background(), admin, roleKey, uint32(pid)); err != nil {
			return nil, err
		}
		term, err := s.next(leasetest.Term)
		if err != nil {
			return nil, err
		}
		if term.PID != leader.PID {
			return nil, fmt.Errorf("SIGTERM reached %d, not the leader's program %d", term.PID, leader.PID)
		}
		out = append(out, term.At.Sub(t0))
		if leader, err = s.next(leasetest.Start); err != nil {
			return nil, err
		}
		// The terminated replica reconnects, probes and stands by again.
		if err := s.othersStandingBy(leader.PPID); err != nil {
			return nil, err
		}
	}
	return out, nil
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
	fmt.Printf("%-58s %5d %9s %9s %9s\n", name, st.N, benchutil.Ms(st.Median), benchutil.Ms(st.P99), benchutil.Ms(st.Max))
}

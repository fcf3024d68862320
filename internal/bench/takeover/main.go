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
//     process that held it.
//
// The program is a few lines of sh reporting over a FIFO, so that the
// figures are leasectl's and not the start-up of a heavier child (a Go
// binary takes several milliseconds more to reach its first line).
//
// Like `leasectl run`, it needs Unix (a FIFO, sh, signals); on Windows it is
// not built.
//
// Run it with: go run ./internal/bench/takeover [-kills 60] [-stepdowns 30]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/internal/benchutil"
	"github.com/leasectl/leasectl/internal/leasetest"
	"github.com/leasectl/leasectl/lab"
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
	flag.Parse()
	if err := bench(*kills, *stepdowns, *baseline, *replicas); err != nil {
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

func bench(kills, stepdowns, baselines, replicas int) error {
	ctx := context.Background()
	fmt.Fprintln(os.Stderr, "starting a lab …")
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{}})
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	dir := filepath.Join(l.Dir, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "building leasectl …")
	leasectl, err := benchutil.BuildLeasectl(dir)
	if err != nil {
		return err
	}
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "roles:\n  bench: %d\n", roleKey), 0o600); err != nil {
		return err
	}
	events, err := listenFIFO(filepath.Join(dir, "events"))
	if err != nil {
		return err
	}
	s := &setup{lab: l, leasectl: leasectl, keys: keysFile, events: events, byPID: map[int]*replica{}}
	defer s.stopAll()

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

	fmt.Printf("leasectl run failover on loopback, default settings (%s, %s, %s/%s, %d CPUs)\n\n", l.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Printf("%-58s %5s %9s %9s %9s\n", "", "n", "median", "p99", "max")
	report("baseline: SIGKILL holder → waiter gets the key (pgx)", base)
	report("takeover: SIGKILL leader → next replica's program runs", take)
	report("  of which: SIGKILL → the next replica holds the key", s.toKey)
	report("            key → program started (fork, exec)", s.toStart)
	report("            started → program's first line (sh)", s.toReport)
	report("step-down: terminate leader's session → program SIGTERM", down)
	tk, dn := benchutil.Summarize(take), benchutil.Summarize(down)
	fmt.Printf("\ntakeover median = %s × baseline median\n", benchutil.Ratio(tk.Median, benchutil.Summarize(base).Median))
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
	events         *fifo
	pending        []leasetest.Event // received, not yet asked for
	byPID          map[int]*replica
	// The parts of each takeover, from the new leader's log: kill → it holds
	// the key; → it has started the program (fork, exec); → the program's
	// first report (its runtime's start).
	toKey, toStart, toReport []time.Duration
}

// replica is one leasectl run process.
type replica struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	states []string
	// leadingAt and startedAt are the log times of the last "leading" and
	// "program started" lines.
	leadingAt, startedAt time.Time
	// tail is the last lines of its log, for a failure report.
	tail   []string
	seen   chan struct{} // a line was logged (capacity 1: a wake-up, not a count)
	exited chan struct{}
}

func (s *setup) start() (*replica, error) {
	cmd := exec.Command(s.leasectl, "run", "--role", "bench", "--log-format", "json", "--", "sh", "-c", childScript, s.events.path)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+s.lab.DirectDSN(), "LEASECTL_KEYS="+s.keys)
	r := &replica{cmd: cmd, seen: make(chan struct{}, 1), exited: make(chan struct{})}
	stderr, w := io.Pipe()
	cmd.Stderr = w
	cmd.WaitDelay = time.Second // do not wait for the stderr copy once leasectl is gone
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(r.exited)
	}()
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Time  time.Time
				Msg   string
				State string
			}
			r.mu.Lock()
			r.tail = append(r.tail, sc.Text())
			if len(r.tail) > 8 {
				r.tail = r.tail[1:]
			}
			r.mu.Unlock()
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			r.mu.Lock()
			if line.Msg == "program started" {
				r.startedAt = line.Time
			}
			if line.State == "leading" {
				r.leadingAt = line.Time
			}
			if line.State != "" {
				r.states = append(r.states, line.State)
			}
			r.mu.Unlock()
			select { // never block: leasectl must not stall on a full stderr pipe
			case r.seen <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	s.byPID[cmd.Process.Pid] = r
	return r, nil
}

// standingBy waits until r's last logged state is standing_by, and then a
// little longer for its lock request to reach the server.
func (r *replica) standingBy() error {
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		ok := len(r.states) > 0 && r.states[len(r.states)-1] == "standing_by"
		r.mu.Unlock()
		if ok {
			time.Sleep(settle)
			return nil
		}
		select {
		case <-r.seen:
		case <-deadline:
			return fmt.Errorf("replica %d is not standing by after a minute (states %v)", r.cmd.Process.Pid, r.states)
		}
	}
}

// loggedStart returns the log times of r's "leading" and "program started"
// lines after t0, waiting a little for them: the program's own line can
// arrive first.
func (r *replica) loggedStart(t0 time.Time) (leading, started time.Time) {
	deadline := time.After(time.Second)
	for {
		r.mu.Lock()
		leading, started = r.leadingAt, r.startedAt
		r.mu.Unlock()
		if started.After(t0) && leading.After(t0) {
			return leading, started
		}
		select {
		case <-r.seen:
		case <-deadline:
			return time.Time{}, time.Time{}
		}
	}
}

func (s *setup) stopAll() {
	for _, r := range s.byPID {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range s.byPID {
		select {
		case <-r.exited:
		case <-time.After(15 * time.Second):
			_ = r.cmd.Process.Kill()
		}
	}
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
		case ev := <-s.events.events:
			if ev.Kind == kind {
				return ev, nil
			}
			s.pending = append(s.pending, ev)
		case <-deadline:
			var b strings.Builder
			for pid, r := range s.byPID {
				r.mu.Lock()
				fmt.Fprintf(&b, "\nreplica %d:\n  %s", pid, strings.Join(r.tail, "\n  "))
				r.mu.Unlock()
			}
			return leasetest.Event{}, fmt.Errorf("no %s event within a minute%s", kind, b.String())
		}
	}
}

// childScript is the program under the lease: it reports its start and
// SIGTERM as lines on the FIFO named by $0. Its short sleeps hold none of
// the inherited descriptors: the lease socket (3) and the stop fence
// socket (4) would keep the key and the fence held after a SIGKILL of
// leasectl, which Pdeathsig does not pass on to them, until they end.
const childScript = `trap 'echo "term $$" > "$0"; exit 0' TERM INT
echo "start $$ $PPID $LEASECTL_BACKEND_PID" > "$0"
while :; do sleep 1 </dev/null >/dev/null 2>&1 3>&- 4>&- & wait $!; done`

// fifo collects the lines the programs write to a named pipe.
type fifo struct {
	path   string
	events chan leasetest.Event
}

func listenFIFO(path string) (*fifo, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	// Read-write, so that writers never block or see a closed pipe and the
	// reader never sees EOF between writers.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	q := &fifo{path: path, events: make(chan leasetest.Event, 1024)}
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			at := time.Now()
			f := strings.Fields(sc.Text())
			ev := leasetest.Event{At: at}
			switch {
			case len(f) == 4 && f[0] == "start":
				ev.Kind, ev.BackendPID = leasetest.Start, f[3]
				ev.PID, _ = strconv.Atoi(f[1])
				ev.PPID, _ = strconv.Atoi(f[2])
			case len(f) == 2 && f[0] == "term":
				ev.Kind = leasetest.Term
				ev.PID, _ = strconv.Atoi(f[1])
			default:
				continue
			}
			q.events <- ev
		}
	}()
	return q, nil
}

func (s *setup) othersStandingBy(leader int) error {
	for pid, r := range s.byPID {
		if pid != leader {
			if err := r.standingBy(); err != nil {
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
		_ = r.cmd.Process.Kill()
		next, err := s.next(leasetest.Start)
		if err != nil {
			return nil, leader, err
		}
		out = append(out, next.At.Sub(t0))
		if nr := s.byPID[next.PPID]; nr != nil {
			leading, started := nr.loggedStart(t0)
			if !started.IsZero() {
				s.toKey = append(s.toKey, leading.Sub(t0))
				s.toStart = append(s.toStart, started.Sub(leading))
				s.toReport = append(s.toReport, next.At.Sub(started))
			}
		}
		<-r.exited
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

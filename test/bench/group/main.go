//go:build linux

// Command group measures `leasectl run --procfile` (many roles in one
// process per replica) against the same roles run the old way, one
// `leasectl run --role R` process per role per replica, on a lab of its own
// and in the same run:
//
//   - baseline: ROLES roles × REPLICAS replicas as single-role processes;
//   - group: REPLICAS processes of `leasectl run --procfile` over the same
//     roles.
//
// Every role's program is `sleep 3600`, and every flag has its default. For
// each, it measures the server sessions (pg_stat_activity, sampled every few
// milliseconds: settled, and the peak during start-up), the resident set of
// the leasectl processes (VmRSS of /proc/PID/status, without their
// programs; the obituary helpers apart), the time until every role is led
// (pg_locks), and then, for several rounds, the takeover per role: the
// replica that leads the most roles is SIGKILLed (in the baseline, every
// process of that replica) and a dedicated connection polls pg_locks every
// couple of milliseconds until each of its roles' keys is held by the
// replica that runs the role's program next; the programs' starts come from
// the replicas' JSON logs. The killed replica is started again and the
// fleet settles between rounds. Last, the group's other replicas are
// stopped and the resident set of one replica leading every role is read.
// Terms of the roles that are still open once a mode's processes have all
// stopped are printed and closed, so that the next mode does not wait for
// their deadlines.
//
// A replica of the baseline is one process per role, grouped by replica
// index; each replica's sessions are told apart by the application_name of
// its DSN (bench-MODE-INDEX).
//
// It reads /proc, so it runs on Linux only. Run it from the repository root:
//
//	go run ./test/bench/group [-roles 50] [-replicas 3] [-rounds 5]
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/benchutil"
)

const (
	keyBase = 1840000000 // role rNN has key keyBase+NN
	// benchApp prefixes this program's own sessions, which no count includes.
	benchApp = "group-bench"
	// stableFor is how long the leaders and every replica's session count
	// must stay the same for the fleet to count as settled.
	stableFor = 2 * time.Second
)

type options struct {
	roles, replicas, rounds int
	poll, sample            time.Duration
	logDir                  string
	verbose                 bool
}

func main() {
	var o options
	flag.IntVar(&o.roles, "roles", 50, "roles in keys.yaml and the Procfile")
	flag.IntVar(&o.replicas, "replicas", 3, "replicas")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of SIGKILL of the replica that leads the most roles, per mode")
	flag.DurationVar(&o.poll, "poll", 2*time.Millisecond, "pg_locks poll interval during a takeover")
	flag.DurationVar(&o.sample, "sample", 5*time.Millisecond, "pg_stat_activity sample interval")
	flag.StringVar(&o.logDir, "logs", "", "directory for every leasectl process's log (default: none kept)")
	flag.BoolVar(&o.verbose, "v", false, "print every role's takeover on stderr")
	flag.Parse()
	if o.roles < 1 || o.replicas < 2 || o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "group: need -roles ≥ 1, -replicas ≥ 2, -rounds ≥ 1")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "group:", err)
		os.Exit(1)
	}
}

// mode is how the roles run: one process per role per replica, or one
// --procfile process per replica.
type mode struct {
	name  string
	group bool
}

var (
	baseline = mode{name: "baseline"}
	grouped  = mode{name: "group", group: true}
)

// app is the application_name of replica i's sessions.
func (m mode) app(i int) string { return fmt.Sprintf("bench-%s-%d", m.name, i) }

type bench struct {
	o        options
	lab      *lab.Lab
	leasectl string
	keys     string
	procfile string
	roles    []string
	keyList  []int64
	roleOf   map[int64]string
	sampler  *sampler
	poller   *pgx.Conn
	pidCache map[uint32]int // backend pid → replica index, -1: none of the mode's
	load     string         // the load average at the start
}

func run(o options) error {
	ctx := context.Background()
	started := time.Now()
	// 150 processes of three sessions each (the lease, the fence and the
	// obituary's), their probes, and this program's: above the lab's 300.
	conns := strconv.Itoa(max(300, 3*o.roles*o.replicas+4*o.replicas+o.roles+50))
	l, dir, leasectl, err := benchutil.StartLab(ctx, lab.Options{Poolers: []lab.PoolerSpec{}, Settings: map[string]string{"max_connections": conns}}, "a lab")
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	if leasectl, err = filepath.Abs(leasectl); err != nil {
		return err
	}
	if o.logDir != "" {
		if err := os.MkdirAll(o.logDir, 0o755); err != nil {
			return err
		}
	}
	b := &bench{o: o, lab: l, leasectl: leasectl, roleOf: map[int64]string{}, pidCache: map[uint32]int{}, load: loadavg()}
	var keys, pf strings.Builder
	keys.WriteString("roles:\n")
	for i := 1; i <= o.roles; i++ {
		role := fmt.Sprintf("r%02d", i)
		key := int64(keyBase + i)
		b.roles, b.keyList, b.roleOf[key] = append(b.roles, role), append(b.keyList, key), role
		fmt.Fprintf(&keys, "  %s: %d\n", role, key)
		fmt.Fprintf(&pf, "%s: sleep 3600\n", role)
	}
	b.keys, b.procfile = filepath.Join(dir, "keys.yaml"), filepath.Join(dir, "Procfile")
	if err := os.WriteFile(b.keys, []byte(keys.String()), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(b.procfile, []byte(pf.String()), 0o600); err != nil {
		return err
	}
	if b.poller, err = connect(b.dsn(benchApp + " poller")); err != nil {
		return err
	}
	defer b.poller.Close(context.Background())
	mon, err := connect(b.dsn(benchApp + " sampler"))
	if err != nil {
		return err
	}
	b.sampler = newSampler(mon, o.sample)
	defer b.sampler.close()

	var results []*result
	for _, m := range []mode{baseline, grouped} {
		fmt.Fprintf(os.Stderr, "%s: %d roles × %d replicas …\n", m.name, o.roles, o.replicas)
		r, err := b.measure(m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		results = append(results, r)
	}
	b.report(results[0], results[1], time.Since(started))
	return nil
}

func (b *bench) dsn(app string) string {
	return b.lab.DirectDSN() + "&application_name=" + url.QueryEscape(app)
}

func connect(dsn string) (*pgx.Conn, error) {
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return dbconn.Connect(ctx, cfg)
}

// ---- the leasectl processes ----

// proc is one leasectl run process: a single-role process of the baseline
// (role set) or a replica of the group.
type proc struct {
	replica int
	role    string
	cmd     *exec.Cmd
	exited  chan struct{}
	mu      sync.Mutex
	starts  map[string]time.Time // role → log time of its program's last start
	tail    []string
}

func (b *bench) start(m mode, replica int, role string) (*proc, error) {
	args := []string{"run", "--procfile", b.procfile, "-o", "json"}
	if !m.group {
		args = []string{"run", "--role", role, "-o", "json", "--", "sleep", "3600"}
	}
	cmd := exec.Command(b.leasectl, args...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+b.dsn(m.app(replica)), "LEASECTL_KEYS="+b.keys)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	p := &proc{replica: replica, role: role, cmd: cmd, exited: make(chan struct{}), starts: map[string]time.Time{}}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	var logFile io.Writer = io.Discard
	if b.o.logDir != "" {
		name := fmt.Sprintf("%s-%d-%s-%d.log", m.name, replica, cmp.Or(role, "all"), cmd.Process.Pid)
		if f, err := os.Create(filepath.Join(b.o.logDir, name)); err == nil {
			logFile = f
		}
	}
	go func() {
		// The pipe ends once every writer is gone: leasectl, its obituary
		// and the programs.
		defer r.Close()
		if c, ok := logFile.(io.Closer); ok {
			defer c.Close()
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			var line struct {
				Time time.Time
				Msg  string
				Role string
			}
			_ = json.Unmarshal(sc.Bytes(), &line)
			p.mu.Lock()
			p.tail = append(p.tail, sc.Text())
			if len(p.tail) > 6 {
				p.tail = p.tail[1:]
			}
			if line.Msg == "program started" {
				p.starts[cmp.Or(line.Role, p.role)] = line.Time
			}
			p.mu.Unlock()
		}
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startedAfter is the log time of role's program's start on p, if after t.
func (p *proc) startedAfter(role string, t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.starts[role]
	return at, ok && at.After(t)
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("pid %d (replica %d %s):\n    %s", p.cmd.Process.Pid, p.replica, cmp.Or(p.role, "group"), strings.Join(p.tail, "\n    "))
}

// fleet is the processes of one mode, by replica.
type fleet struct {
	m     mode
	procs [][]*proc
}

func (b *bench) startReplica(f *fleet, i int) error {
	f.procs[i] = nil
	if f.m.group {
		p, err := b.start(f.m, i, "")
		if err != nil {
			return err
		}
		f.procs[i] = append(f.procs[i], p)
		return nil
	}
	for _, role := range b.roles {
		p, err := b.start(f.m, i, role)
		if err != nil {
			return err
		}
		f.procs[i] = append(f.procs[i], p)
	}
	return nil
}

func (f *fleet) all() []*proc {
	var ps []*proc
	for _, rs := range f.procs {
		ps = append(ps, rs...)
	}
	return ps
}

// stop sends SIGTERM to ps and waits for them, with SIGKILL after 20 s.
func stop(ps []*proc) {
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// ---- server sessions ----

// sampler counts the server's client sessions every interval, by replica
// of the current mode, while it is on.
type sampler struct {
	conn     *pgx.Conn
	interval time.Duration
	mu       sync.Mutex
	m        mode
	replicas int
	on       bool
	last     counts
	peak     counts
	samples  int
	err      error
	quit     chan struct{}
	done     chan struct{}
}

// counts is one sample: all client sessions but this program's, each
// replica's, and the others (obituaries recording a term's end).
type counts struct {
	total, other int
	per          []int
}

func (c counts) String() string { return fmt.Sprint(c.total, c.per, c.other) }

func newSampler(conn *pgx.Conn, interval time.Duration) *sampler {
	s := &sampler{conn: conn, interval: interval, quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.mu.Lock()
		on, m, n := s.on, s.m, s.replicas
		s.mu.Unlock()
		if !on {
			continue
		}
		c, err := sessions(s.conn, m, n)
		s.mu.Lock()
		if err != nil {
			s.err = err
		} else if s.on {
			s.last = c
			s.samples++
			s.peak.total, s.peak.other = max(s.peak.total, c.total), max(s.peak.other, c.other)
			for i, v := range c.per {
				s.peak.per[i] = max(s.peak.per[i], v)
			}
		}
		s.mu.Unlock()
	}
}

func sessions(conn *pgx.Conn, m mode, replicas int) (counts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, `SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND coalesce(application_name, '') NOT LIKE '`+benchApp+`%' GROUP BY 1`)
	if err != nil {
		return counts{}, err
	}
	c := counts{per: make([]int, replicas)}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return counts{}, err
		}
		c.total += n
		if i := replicaOfApp(m, replicas, name); i >= 0 {
			c.per[i] += n
		} else {
			c.other += n
		}
	}
	return c, rows.Err()
}

// replicaOfApp is the replica whose sessions carry application_name name
// (its own or with " fence" after it), or -1.
func replicaOfApp(m mode, replicas int, name string) int {
	for i := 0; i < replicas; i++ {
		if app := m.app(i); name == app || strings.HasPrefix(name, app+" ") {
			return i
		}
	}
	return -1
}

// reset starts a new peak for mode m; on says whether to sample.
func (s *sampler) reset(m mode, replicas int, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m, s.replicas, s.on = m, replicas, on
	s.peak, s.last, s.samples = counts{per: make([]int, replicas)}, counts{per: make([]int, replicas)}, 0
}

func (s *sampler) setOn(on bool) {
	s.mu.Lock()
	s.on = on
	s.mu.Unlock()
}

// read returns the peak since the last reset, the last sample and how many
// samples there were.
func (s *sampler) read() (peak, last counts, n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	peak, last = s.peak, s.last
	peak.per, last.per = slices.Clone(peak.per), slices.Clone(last.per)
	return peak, last, s.samples, s.err
}

func (s *sampler) close() {
	close(s.quit)
	<-s.done
	_ = s.conn.Close(context.Background())
}

// ---- leaders ----

// holders returns the backend holding each of the roles' keys.
func (b *bench) holders(ctx context.Context) (map[int64]uint32, error) {
	rows, err := b.poller.Query(ctx, `SELECT (classid::bigint << 32) | objid::bigint, pid FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND mode = 'ExclusiveLock'
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((classid::bigint << 32) | objid::bigint) = ANY ($1::int8[])`, b.keyList)
	if err != nil {
		return nil, err
	}
	out := map[int64]uint32{}
	for rows.Next() {
		var k int64
		var pid uint32
		if err := rows.Scan(&k, &pid); err != nil {
			return nil, err
		}
		out[k] = pid
	}
	return out, rows.Err()
}

// replicaOf returns the replica of backend pid in mode m, asking the server
// for pids it has not seen.
func (b *bench) replicaOf(ctx context.Context, m mode, pid uint32) (int, error) {
	if i, ok := b.pidCache[pid]; ok {
		return i, nil
	}
	var name string
	err := b.poller.QueryRow(ctx, `SELECT coalesce(application_name, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1, nil // gone already; do not remember
	}
	if err != nil {
		return -1, err
	}
	i := replicaOfApp(m, b.o.replicas, name)
	b.pidCache[pid] = i
	return i, nil
}

// leaders returns the replica leading each role's key (-1: no replica of
// m, or nobody) and how many each replica leads.
func (b *bench) leaders(ctx context.Context, m mode) (map[int64]int, []int, error) {
	hs, err := b.holders(ctx)
	if err != nil {
		return nil, nil, err
	}
	by, per := map[int64]int{}, make([]int, b.o.replicas)
	for _, k := range b.keyList {
		by[k] = -1
		if pid, ok := hs[k]; ok {
			i, err := b.replicaOf(ctx, m, pid)
			if err != nil {
				return nil, nil, err
			}
			if by[k] = i; i >= 0 {
				per[i]++
			}
		}
	}
	return by, per, nil
}

// settle waits until every key is led by a replica, the group's spread is
// within its rule (no replica above ceil(roles/replicas) + 1), every
// leader's program runs, and the leaders and every replica's session count
// have not changed for stableFor.
func (b *bench) settle(ctx context.Context, f *fleet, since time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	share := (b.o.roles + b.o.replicas - 1) / b.o.replicas
	var prev string
	var prevAt time.Time
	for {
		by, per, err := b.leaders(ctx, f.m)
		if err != nil {
			return err
		}
		_, last, _, err := b.sampler.read()
		if err != nil {
			return err
		}
		ok := !f.m.group || slices.Max(per) <= share+1
		for _, k := range b.keyList {
			if by[k] < 0 {
				ok = false
			}
		}
		sig := fmt.Sprint(by, last.per)
		switch {
		case !ok || sig != prev:
			prev, prevAt = sig, time.Now()
		case time.Since(prevAt) >= stableFor && b.programsRun(f, by, since):
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after %v: leaders per replica %v, sessions %v%s", limit, per, last, tails(f.all(), 6))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// programsRun says whether the leader of every key has logged its program's
// start since t.
func (b *bench) programsRun(f *fleet, by map[int64]int, t time.Time) bool {
	for _, k := range b.keyList {
		if by[k] < 0 {
			return false
		}
		found := false
		for _, p := range f.procs[by[k]] {
			if p.alive() && (p.role == "" || p.role == b.roleOf[k]) {
				if _, ok := p.startedAfter(b.roleOf[k], t); ok {
					found = true
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func tails(ps []*proc, n int) string {
	var sb strings.Builder
	for i, p := range ps {
		if i == n {
			break
		}
		sb.WriteString("\n  " + p.String())
	}
	return sb.String()
}

// ---- one mode ----

// result is what one mode measured.
type result struct {
	m                 mode
	procs, obituaries int
	// sessions settled (a sample after settling) and the peak from the
	// start until settled; per replica, the largest; settledMax is the
	// largest count of one replica in any sample while settled, over the
	// run.
	settled, startPeak counts
	settledMax         int
	perReplicaSettled  []int
	samples            int
	// resident sets once settled, of each leasectl process (not its
	// programs) and of the obituaries.
	rss, hwm, obitRSS []int64
	replicaRSS        []int64 // the sum of each replica's processes
	endRSS            []int64 // after the rounds
	// times from the start of the first process
	keysHeld, programsStarted, spread time.Duration
	// takeovers, per role, from the SIGKILL: its key held by the replica
	// that runs its program next; that program started
	toKey, toRun []time.Duration
	rounds       []round
	// group only: one replica leading every role, the others stopped
	soloRSS, soloHWM int64
	soloLed          int
	// terms of the roles still open once every process had stopped
	leftOpen []string
	// the time between consecutive pg_locks polls during the takeovers:
	// a key's time is at most this late
	pollGaps []time.Duration
}

type round struct {
	victim, roles   int
	worstKey, worst time.Duration
	missing         int // roles not running elsewhere within the limit
}

func (b *bench) measure(m mode) (_ *result, err error) {
	ctx := context.Background()
	res := &result{m: m}
	f := &fleet{m: m, procs: make([][]*proc, b.o.replicas)}
	defer func() {
		stop(f.all())
		b.waitQuiet(ctx)
		// What the stop left: the next mode must not wait for it.
		open, cerr := b.closeOpenTerms(ctx)
		res.leftOpen = open
		if err == nil {
			err = cerr
		}
	}()

	b.pidCache = map[uint32]int{}
	b.sampler.reset(m, b.o.replicas, true)
	time.Sleep(3 * b.o.sample)
	t0 := time.Now()
	// Interleaved, role by role, so that no replica starts all its roles
	// before the others.
	if m.group {
		for i := range b.o.replicas {
			if err := b.startReplica(f, i); err != nil {
				return nil, err
			}
		}
	} else {
		for _, role := range b.roles {
			for i := range b.o.replicas {
				p, err := b.start(m, i, role)
				if err != nil {
					return nil, err
				}
				f.procs[i] = append(f.procs[i], p)
			}
		}
	}
	res.procs = len(f.all())
	// Every key held, then every program started.
	for {
		hs, err := b.holders(ctx)
		if err != nil {
			return nil, err
		}
		if len(hs) == len(b.keyList) {
			res.keysHeld = time.Since(t0)
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return nil, fmt.Errorf("only %d of %d keys held after 2 minutes%s", len(hs), len(b.keyList), tails(f.all(), 6))
		}
		time.Sleep(2 * time.Millisecond)
	}
	for {
		latest, all := time.Time{}, true
		for _, role := range b.roles {
			first := time.Time{}
			for _, p := range f.all() {
				if at, ok := p.startedAfter(role, t0); ok && (first.IsZero() || at.Before(first)) {
					first = at
				}
			}
			if first.IsZero() {
				all = false
				break
			}
			if first.After(latest) {
				latest = first
			}
		}
		if all {
			res.programsStarted = latest.Sub(t0)
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return nil, fmt.Errorf("not every role's program started after 2 minutes%s", tails(f.all(), 6))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.settle(ctx, f, t0, 2*time.Minute); err != nil {
		return nil, err
	}
	res.spread = time.Since(t0) - stableFor
	peak, _, n, err := b.sampler.read()
	if err != nil {
		return nil, err
	}
	res.startPeak, res.samples = peak, n
	// Settled: sample a while longer.
	b.sampler.reset(m, b.o.replicas, true)
	time.Sleep(stableFor)
	peak, last, _, err := b.sampler.read()
	if err != nil {
		return nil, err
	}
	res.settled, res.perReplicaSettled, res.settledMax = last, peak.per, slices.Max(peak.per)
	res.rss, res.hwm, res.obitRSS, res.replicaRSS = b.memory(f)
	res.obituaries = len(res.obitRSS)
	fmt.Fprintf(os.Stderr, "  all keys held after %s, settled; sessions %d (peak %d at start-up), per replica %v; RSS total %s\n",
		benchutil.Ms(res.keysHeld), res.settled.total, res.startPeak.total, res.perReplicaSettled, benchutil.MiB(sum(res.rss)))

	for r := 0; r < b.o.rounds; r++ {
		rd, err := b.takeover(ctx, f, res)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
		res.rounds = append(res.rounds, rd)
		fmt.Fprintf(os.Stderr, "  round %d: replica %d (leading %d roles) SIGKILLed; every key held again after %s, every program running after %s\n",
			r+1, rd.victim, rd.roles, benchutil.Ms(rd.worstKey), benchutil.Ms(rd.worst))
		// Started again; settled; sampled while settled.
		t := time.Now()
		if err := b.startReplica(f, rd.victim); err != nil {
			return nil, err
		}
		b.sampler.setOn(true)
		if err := b.settle(ctx, f, t.Add(-time.Hour), 2*time.Minute); err != nil {
			return nil, err
		}
		b.sampler.reset(m, b.o.replicas, true)
		time.Sleep(stableFor)
		peak, _, _, err := b.sampler.read()
		if err != nil {
			return nil, err
		}
		res.settledMax = max(res.settledMax, slices.Max(peak.per))
	}
	res.endRSS, _, _, _ = b.memory(f)

	if m.group {
		// One replica for every role: stop the others, one after the
		// other (a replica being stopped could take the roles of one
		// stopped before it).
		b.sampler.setOn(false)
		for i := b.o.replicas - 1; i >= 1; i-- {
			stop(f.procs[i])
		}
		deadline := time.Now().Add(time.Minute)
		for {
			_, per, err := b.leaders(ctx, m)
			if err != nil {
				return nil, err
			}
			if per[0] == b.o.roles && b.programsRun(f, onlyReplica0(b.keyList), time.Time{}) {
				res.soloLed = per[0]
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("one replica left leads %d of %d roles after a minute%s", per[0], b.o.roles, tails(f.procs[0], 1))
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Second)
		rss, hwm, _, _ := b.memory(&fleet{m: m, procs: [][]*proc{f.procs[0]}})
		res.soloRSS, res.soloHWM = rss[0], hwm[0]
	}
	return res, nil
}

func onlyReplica0(keys []int64) map[int64]int {
	by := map[int64]int{}
	for _, k := range keys {
		by[k] = 0
	}
	return by
}

// takeover SIGKILLs the replica that leads the most roles (each of its
// processes, leaders first) and measures, per role it led, how long until
// the role's program started on another replica (from that replica's log)
// and until that replica held the role's key (polling pg_locks every
// b.o.poll). A group's stand-by tries every key it waits for and releases
// the ones above its share, so the first replica seen holding a key is not
// always the one that leads it: the key's time is the first poll that saw
// it held by its next leader.
func (b *bench) takeover(ctx context.Context, f *fleet, res *result) (round, error) {
	by, per, err := b.leaders(ctx, f.m)
	if err != nil {
		return round{}, err
	}
	victim := 0
	for i, n := range per {
		if n > per[victim] {
			victim = i
		}
	}
	var keys []int64
	led := map[string]bool{}
	for _, k := range b.keyList {
		if by[k] == victim {
			keys, led[b.roleOf[k]] = append(keys, k), true
		}
	}
	rd := round{victim: victim, roles: len(keys)}
	procs := slices.Clone(f.procs[victim])
	slices.SortStableFunc(procs, func(a, c *proc) int { // leaders first
		switch la, lc := led[a.role], led[c.role]; {
		case la && !lc:
			return -1
		case lc && !la:
			return 1
		}
		return 0
	})
	b.sampler.setOn(false) // the poller alone, while it polls
	time.Sleep(2 * b.o.sample)
	seen := map[int64]map[int]time.Duration{} // key → replica → first poll that saw it hold the key
	startAt, startBy := map[int64]time.Duration{}, map[int64]int{}
	t0 := time.Now()
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
	}
	limit := t0.Add(30 * time.Second)
	next, prev := t0, time.Duration(0)
	for len(startAt) < len(keys) && time.Now().Before(limit) {
		hs, err := b.holders(ctx)
		if err != nil {
			return rd, err
		}
		at := time.Since(t0)
		res.pollGaps, prev = append(res.pollGaps, at-prev), at
		for _, k := range keys {
			pid, ok := hs[k]
			if !ok {
				continue
			}
			i, err := b.replicaOf(ctx, f.m, pid)
			if err != nil {
				return rd, err
			}
			if i < 0 || i == victim {
				continue
			}
			if seen[k] == nil {
				seen[k] = map[int]time.Duration{}
			}
			if _, ok := seen[k][i]; !ok {
				seen[k][i] = at
			}
		}
		for _, k := range keys {
			if _, ok := startAt[k]; ok {
				continue
			}
			for i, ps := range f.procs {
				for _, p := range ps {
					if t, ok := p.startedAfter(b.roleOf[k], t0); i != victim && ok {
						if d, done := startAt[k]; !done || t.Sub(t0) < d {
							startAt[k], startBy[k] = t.Sub(t0), i
						}
					}
				}
			}
		}
		next = next.Add(b.o.poll)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
	for _, k := range keys {
		run, ok := startAt[k]
		if !ok {
			rd.missing++
			continue
		}
		key, ok := seen[k][startBy[k]]
		if !ok || key > run {
			key = run // held and started between two polls: the start bounds it
		}
		res.toKey, res.toRun = append(res.toKey, key), append(res.toRun, run)
		rd.worstKey, rd.worst = max(rd.worstKey, key), max(rd.worst, run)
		if b.o.verbose {
			fmt.Fprintf(os.Stderr, "    %s: held by replica %d after %s, its program started after %s\n", b.roleOf[k], startBy[k], benchutil.Ms(key), benchutil.Ms(run))
		}
	}
	for _, p := range procs {
		<-p.exited
	}
	if rd.missing > 0 {
		return rd, fmt.Errorf("%d of the killed replica's %d roles not running elsewhere 30 s after the SIGKILL%s", rd.missing, rd.roles, tails(f.all(), 6))
	}
	return rd, nil
}

// waitQuiet waits until no client session is left but this program's (the
// obituaries and the stopped processes' sessions gone).
func (b *bench) waitQuiet(ctx context.Context) {
	b.sampler.setOn(false)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := b.poller.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
 AND coalesce(application_name, '') NOT LIKE '`+benchApp+`%'`).Scan(&n); err != nil || n == 0 {
			return
		}
	}
}

// closeOpenTerms records the end of every term of the roles left open once
// every process of a mode has stopped (a stand-by told to stop while it
// began a term, for one), so that the next mode's leaders do not wait for
// their deadlines, and returns them, described.
func (b *bench) closeOpenTerms(ctx context.Context) ([]string, error) {
	rows, err := b.poller.Query(ctx, `UPDATE leasectl.term_history SET ended = clock_timestamp(), end_reason = 'session lost'
 WHERE key = ANY ($1::int8[]) AND ended IS NULL
 RETURNING role, epoch, os_pid, application_name, to_char(began, 'HH24:MI:SS.MS')`, b.keyList)
	if err != nil {
		return nil, fmt.Errorf("close the terms left open: %w", err)
	}
	var out []string
	for rows.Next() {
		var role, app, began string
		var epoch int64
		var pid int
		if err := rows.Scan(&role, &epoch, &pid, &app, &began); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s epoch %d (leasectl pid %d, %s, began %s)", role, epoch, pid, app, began))
	}
	return out, rows.Err()
}

// ---- memory ----

// memory reads VmRSS and VmHWM of every live leasectl process of f (not its
// programs), the VmRSS of their obituaries (children running leasectl's
// executable), and each replica's sum.
func (b *bench) memory(f *fleet) (rss, hwm, obit, perReplica []int64) {
	for _, ps := range f.procs {
		var total int64
		for _, p := range ps {
			if !p.alive() {
				continue
			}
			r, h := status(p.cmd.Process.Pid)
			rss, hwm = append(rss, r), append(hwm, h)
			total += r
			for _, c := range children(p.cmd.Process.Pid) {
				if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c)); exe == b.leasectl {
					r, _ := status(c)
					obit = append(obit, r)
				}
			}
		}
		perReplica = append(perReplica, total)
	}
	return rss, hwm, obit, perReplica
}

// status returns VmRSS and VmHWM of pid, in bytes.
func status(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kib, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kib << 10
		case "VmHWM:":
			hwm = kib << 10
		}
	}
	return rss, hwm
}

func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

func sum(xs []int64) int64 {
	var t int64
	for _, x := range xs {
		t += x
	}
	return t
}

func median(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ---- the report ----

func (b *bench) report(base, grp *result, took time.Duration) {
	fmt.Printf("leasectl run: %d roles × %d replicas, single-role processes (baseline) against --procfile (group), default settings\n", b.o.roles, b.o.replicas)
	fmt.Printf("(%s, %s, %s/%s, %d CPUs, load average %s at the start, %s at the end; every program sleep 3600)\n\n", b.lab.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), b.load, loadavg())
	row := func(name, a, g, ratio string) { fmt.Printf("%-58s %18s %18s %10s\n", name, a, g, ratio) }
	num := func(n int) string { return strconv.Itoa(n) }
	rat := func(a, g float64) string {
		if g == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", a/g)
	}
	row("", "baseline", "group", "group/base")
	row("leasectl processes (+ as many obituary helpers)", num(base.procs), num(grp.procs), rat(float64(grp.procs), float64(base.procs)))
	row("server sessions, settled", num(base.settled.total), num(grp.settled.total), rat(float64(grp.settled.total), float64(base.settled.total)))
	row("server sessions, peak during start-up", num(base.startPeak.total), num(grp.startPeak.total), rat(float64(grp.startPeak.total), float64(base.startPeak.total)))
	row("  per replica, settled (largest, any sample, all rounds)", num(base.settledMax), num(grp.settledMax), rat(float64(grp.settledMax), float64(base.settledMax)))
	row("  per replica, peak during start-up (largest)", num(slices.Max(base.startPeak.per)), num(slices.Max(grp.startPeak.per)), rat(float64(slices.Max(grp.startPeak.per)), float64(slices.Max(base.startPeak.per))))
	mib := func(n int64) string { return benchutil.MiB(n) }
	row("RSS of the leasectl processes, settled: total", mib(sum(base.rss)), mib(sum(grp.rss)), rat(float64(sum(grp.rss)), float64(sum(base.rss))))
	row("  per process: median", mib(median(base.rss)), mib(median(grp.rss)), rat(float64(median(grp.rss)), float64(median(base.rss))))
	row("  per process: max", mib(slices.Max(base.rss)), mib(slices.Max(grp.rss)), rat(float64(slices.Max(grp.rss)), float64(slices.Max(base.rss))))
	row("  per process: peak (VmHWM), max", mib(slices.Max(base.hwm)), mib(slices.Max(grp.hwm)), rat(float64(slices.Max(grp.hwm)), float64(slices.Max(base.hwm))))
	row("  per replica (its processes): max", mib(slices.Max(base.replicaRSS)), mib(slices.Max(grp.replicaRSS)), rat(float64(slices.Max(grp.replicaRSS)), float64(slices.Max(base.replicaRSS))))
	row("  per process after the rounds: max", mib(slices.Max(base.endRSS)), mib(slices.Max(grp.endRSS)), rat(float64(slices.Max(grp.endRSS)), float64(slices.Max(base.endRSS))))
	row("RSS of the obituary helpers, settled: total", mib(sum(base.obitRSS)), mib(sum(grp.obitRSS)), rat(float64(sum(grp.obitRSS)), float64(sum(base.obitRSS))))
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	row("start → every role's key held", sec(base.keysHeld), sec(grp.keysHeld), rat(grp.keysHeld.Seconds(), base.keysHeld.Seconds()))
	row("start → every role's program started", sec(base.programsStarted), sec(grp.programsStarted), rat(grp.programsStarted.Seconds(), base.programsStarted.Seconds()))
	row("start → settled (spread, sessions steady)", sec(base.spread), sec(grp.spread), rat(grp.spread.Seconds(), base.spread.Seconds()))
	bk, gk := benchutil.Summarize(base.toKey), benchutil.Summarize(grp.toKey)
	br, gr := benchutil.Summarize(base.toRun), benchutil.Summarize(grp.toRun)
	ms := benchutil.Ms
	fmt.Printf("\ntakeover per role after SIGKILL of the replica leading the most roles, %d rounds:\n", b.o.rounds)
	row("", "baseline", "group", "group/base")
	row("roles moved (n)", num(bk.N), num(gk.N), "")
	row("SIGKILL → key held by the role's next leader: median", ms(bk.Median), ms(gk.Median), benchutil.Ratio(gk.Median, bk.Median))
	row("  p90", ms(bk.P90), ms(gk.P90), benchutil.Ratio(gk.P90, bk.P90))
	row("  max", ms(bk.Max), ms(gk.Max), benchutil.Ratio(gk.Max, bk.Max))
	row("SIGKILL → the role's program started there: median", ms(br.Median), ms(gr.Median), benchutil.Ratio(gr.Median, br.Median))
	row("  p90", ms(br.P90), ms(gr.P90), benchutil.Ratio(gr.P90, br.P90))
	row("  max", ms(br.Max), ms(gr.Max), benchutil.Ratio(gr.Max, br.Max))
	bp, gp := benchutil.Summarize(base.pollGaps), benchutil.Summarize(grp.pollGaps)
	row("  (pg_locks poll interval: median / max)", ms(bp.Median)+" / "+ms(bp.Max), ms(gp.Median)+" / "+ms(gp.Max), "")
	for _, r := range []*result{base, grp} {
		var parts []string
		for _, rd := range r.rounds {
			parts = append(parts, fmt.Sprintf("%d roles %s/%s", rd.roles, ms(rd.worstKey), ms(rd.worst)))
		}
		fmt.Printf("  %s rounds (roles moved, last key held / last program started): %s\n", r.m.name, strings.Join(parts, "; "))
	}
	fmt.Printf("\ngroup, one replica alone leading all %d roles (the others stopped): RSS %s, peak (VmHWM) %s\n", grp.soloLed, mib(grp.soloRSS), mib(grp.soloHWM))
	for _, r := range []*result{base, grp} {
		if len(r.leftOpen) > 0 {
			fmt.Printf("%s: %d terms still open after every process had stopped (closed by this program): %s\n", r.m.name, len(r.leftOpen), strings.Join(r.leftOpen, "; "))
		}
	}

	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	worst := time.Duration(0)
	for _, rd := range grp.rounds {
		worst = max(worst, rd.worst)
	}
	fmt.Printf("\ntargets (group): ≤ 3 server sessions per replica once settled: %s (%d); one replica serving %d roles under 40 MiB RSS: %s (%s settled, %s leading all %d);\n",
		verdict(grp.settledMax <= 3), grp.settledMax, b.o.roles, verdict(slices.Max(grp.rss) < 40<<20 && grp.soloRSS < 40<<20), mib(slices.Max(grp.rss)), mib(grp.soloRSS), grp.soloLed)
	fmt.Printf("  every role of a SIGKILLed replica running again elsewhere within 2 s: %s (worst %s); median ≤ 100 ms per role: %s (%s)\n",
		verdict(worst <= 2*time.Second), ms(worst), verdict(gr.Median <= 100*time.Millisecond), ms(gr.Median))
	fmt.Printf("run time %s; %d + %d pg_stat_activity samples during start-up (every %v)\n", took.Round(time.Second), base.samples, grp.samples, b.o.sample)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

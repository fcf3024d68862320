//go:build unix

// Command ha measures how soon `leasectl run` leads again on a new primary
// when Patroni changes it, on a Patroni lab of its own (etcd, two nodes,
// HAProxy routing by Patroni's REST checks):
//
//   - lag: from the moment the new primary first accepts a write (a
//     transaction id asked of every node every 5 ms) to the moment the
//     next program under the lease starts (its first line reaches this
//     program), with default settings; goal median ≤ 100 ms, max ≤ 500 ms;
//   - for switchovers (Patroni's REST switchover: the old primary shuts
//     down cleanly) and node deaths (SIGKILL of the primary's Patroni and
//     PostgreSQL: the other node takes over once the leader key expires);
//   - over both forms of DSN a lease can use in front of Patroni: the
//     multi-host DSN with target_session_attrs=primary, and HAProxy's
//     primary port. Each form has its own role and its own three replicas,
//     and runs through its own faults, one form after the other;
//   - baseline, in the same run and over the same DSN: a plain client
//     that polls every 5 ms (a query on its session; once that fails, a
//     new connection and pg_try_advisory_lock on a key of its own, on a
//     server not in recovery) until it holds its key on the new primary.
//     It shows what the DSN form itself costs: connecting through it, and
//     for HAProxy its health checks.
//
// Run it with: go run ./test/bench/ha [-switchovers 5] [-deaths 5]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/leasetest"
)

const (
	switchover = "switchover"
	nodeDeath  = "node death"
	// poll is the write watch's and the baseline client's interval.
	poll = 5 * time.Millisecond
	// settle: after "standing by", the stand-by's lock request reaches
	// the server.
	settle = 200 * time.Millisecond
	// connectTimeout bounds each of the baseline client's connection
	// attempts: through HAProxy, one to a node that is going away can
	// hang until HAProxy gives up on it.
	connectTimeout = 300 * time.Millisecond
)

func main() {
	switchovers := flag.Int("switchovers", 5, "Patroni switchovers")
	deaths := flag.Int("deaths", 5, "node deaths (SIGKILL of the primary's Patroni and PostgreSQL), each revived afterwards")
	replicas := flag.Int("replicas", 3, "replicas of leasectl run per DSN form")
	only := flag.String("forms", "multi-host,haproxy", "the DSN forms to run, comma-separated: multi-host, haproxy")
	flag.StringVar(&benchutil.LogDir, "logs", "", "a directory to keep each replica's whole log in")
	flag.Parse()
	for _, id := range strings.Split(*only, ",") {
		if id != "multi-host" && id != "haproxy" {
			fmt.Fprintf(os.Stderr, "ha: -forms: unknown form %q: name multi-host, haproxy or both\n", id)
			os.Exit(2)
		}
	}
	if err := bench(*switchovers, *deaths, *replicas, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "ha:", err)
		os.Exit(1)
	}
}

// form is one DSN form with its fleet and its baseline client.
type form struct {
	id, name, role, dsn string
	key                 int64
	replicas            []*benchutil.Replica
	base                *baseline
	// lags and baseLags by fault kind.
	lags, baseLags map[string][]time.Duration
	// toKey and toStart split each lag at the new leader's "leading" log
	// line: first write → key held; key held → program's first line.
	toKey, toStart []time.Duration
}

func bench(switchovers, deaths, replicas int, only []string) error {
	ctx := context.Background()
	l, dir, leasectl, err := benchutil.StartLab(ctx, lab.Options{HA: &lab.HASpec{}}, "a Patroni lab")
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	var forms []*form
	for _, f := range []*form{
		{id: "multi-host", name: "multi-host DSN", role: "ha_multi", key: 9400011, dsn: l.HAMultiHostDSN()},
		{id: "haproxy", name: "HAProxy primary port", role: "ha_proxy", key: 9400012, dsn: l.HAPrimaryDSN()},
	} {
		if slices.Contains(only, f.id) {
			forms = append(forms, f)
		}
	}
	keysFile := filepath.Join(dir, "keys.yaml")
	var keys strings.Builder
	keys.WriteString("roles:\n")
	for _, f := range forms {
		fmt.Fprintf(&keys, "  %s: %d\n", f.role, f.key)
	}
	if err := os.WriteFile(keysFile, []byte(keys.String()), 0o600); err != nil {
		return err
	}
	fifo, err := benchutil.ListenFIFO(filepath.Join(dir, "events"))
	if err != nil {
		return err
	}
	ev := collect(fifo)
	var faults []string
	for i := range max(switchovers, deaths) {
		if i < switchovers {
			faults = append(faults, switchover)
		}
		if i < deaths {
			faults = append(faults, nodeDeath)
		}
	}
	// One form at a time, as a fleet would run: the faults' lags depend on
	// how many clients reconnect at once on this small machine.
	writable := map[string][]time.Duration{}
	for _, f := range forms {
		if err := f.run(ctx, l, ev, leasectl, keysFile, fifo, replicas, faults, writable); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}

	fmt.Printf("leasectl run on a new primary: %s, etcd %s, HAProxy; %d replicas per DSN form, default settings (%s, %s/%s, %d CPUs)\n",
		l.HA.PatroniVersion, l.HA.Etcd.Version, replicas, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Printf("lag: the new primary accepts a write (polled every %v) → the next program starts; baseline: a client polling every %v holds its key there\n\n", poll, poll)
	fmt.Printf("%-48s %4s %9s %9s %9s %9s\n", "", "n", "median", "p90", "max", "vs base")
	for _, f := range forms {
		for _, kind := range []string{"", switchover, nodeDeath} {
			lags, base := pick(f.lags, kind), pick(f.baseLags, kind)
			label := "all faults"
			if kind != "" {
				label = "  " + kind + "s"
			}
			row(f.name+", leasectl run: "+label, lags, base)
			row(f.name+", baseline: "+label, base, nil)
		}
		row("  of which: first write → leasectl holds the key", f.toKey, nil)
		row("            key held → the program's first line", f.toStart, nil)
		var excess []time.Duration
		for _, kind := range []string{switchover, nodeDeath} {
			for i, d := range f.lags[kind] {
				excess = append(excess, d-f.baseLags[kind][i])
			}
		}
		row("  leasectl run − baseline, fault by fault", excess, nil)
		st := benchutil.Summarize(pick(f.lags, ""))
		fmt.Printf("%s: goal median ≤ 100 ms %s, max ≤ 500 ms %s\n\n", f.name, verdict(st.Median <= 100*time.Millisecond), verdict(st.Max <= 500*time.Millisecond))
	}
	for _, kind := range []string{switchover, nodeDeath} {
		if st := benchutil.Summarize(writable[kind]); st.N > 0 {
			fmt.Printf("%ss: the new primary accepted writes %s (median) after the %s began\n", kind, benchutil.Ms(st.Median), kind)
		}
	}
	return nil
}

// run starts f's replicas and its baseline client, takes them through
// faults and stops them.
func (f *form) run(ctx context.Context, l *lab.Lab, ev *events, leasectl, keysFile string, fifo *benchutil.FIFO, replicas int, faults []string, writable map[string][]time.Duration) error {
	bctx, stopBaseline := context.WithCancel(ctx)
	defer stopBaseline()
	defer func() { benchutil.StopReplicas(f.replicas) }()
	f.lags, f.baseLags = map[string][]time.Duration{}, map[string][]time.Duration{}
	for range replicas {
		r, err := benchutil.StartReplica(leasectl, f.role, fifo, "LEASECTL_DSN="+f.dsn, "LEASECTL_KEYS="+keysFile)
		if err != nil {
			return err
		}
		f.replicas = append(f.replicas, r)
	}
	f.base = startBaseline(bctx, f.dsn, f.key+100) // a key of its own
	begin := time.Now().Add(-time.Hour)
	if _, err := ev.startOf(f, begin, 2*time.Minute); err != nil {
		return fmt.Errorf("no first leader: %w", err)
	}
	if _, err := f.base.heldAfter(begin, 2*time.Minute); err != nil {
		return err
	}
	for i, fault := range faults {
		if err := ev.settled(f); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s: %s %d of %d …\n", f.name, fault, i+1, len(faults))
		w := labtest.WatchWrites(l, poll)
		t0 := time.Now()
		var ch *lab.HAChange
		var err error
		if fault == switchover {
			ch, err = l.Switchover(ctx)
		} else {
			ch, err = l.KillPrimary(ctx)
		}
		if err != nil {
			w.Stop()
			return fmt.Errorf("%s %d: %w", fault, i+1, err)
		}
		writable[fault] = append(writable[fault], ch.Writable)
		start, startErr := ev.startOf(f, t0, 2*time.Minute)
		held, heldErr := f.base.heldAfter(t0, 2*time.Minute)
		w.Stop()
		if err := errors.Join(startErr, heldErr); err != nil {
			return fmt.Errorf("%s %d: %w", fault, i+1, err)
		}
		primary := l.HANode(ch.To)
		at, ok := w.WritableAt(primary.Port)
		if !ok {
			return fmt.Errorf("%s %d: no write was seen on the new primary %s", fault, i+1, ch.To)
		}
		// Both must be on the new primary. (A lag can come out a few
		// milliseconds below zero: the watch polls every 5 ms.)
		if err := holds(ctx, l, primary, f.key, start.BackendPID); err != nil {
			return fmt.Errorf("%s %d: %w", fault, i+1, err)
		}
		if held.port != primary.Port {
			return fmt.Errorf("%s %d: the baseline client took its key on port %d, not on the new primary %s (port %d)", fault, i+1, held.port, primary.Name, primary.Port)
		}
		lag, baseLag := start.At.Sub(at), held.at.Sub(at)
		if leading, _ := f.leader(start).LoggedStart(t0); !leading.IsZero() {
			f.toKey = append(f.toKey, leading.Sub(at))
			f.toStart = append(f.toStart, start.At.Sub(leading))
		}
		f.lags[fault] = append(f.lags[fault], lag)
		f.baseLags[fault] = append(f.baseLags[fault], baseLag)
		fmt.Fprintf(os.Stderr, "  the program started %s after the first write; the baseline took its key after %s\n", benchutil.Ms(lag), benchutil.Ms(baseLag))
		if fault == nodeDeath {
			if _, err := l.ReviveNode(ctx, ch.From); err != nil {
				return fmt.Errorf("revive %s: %w", ch.From, err)
			}
		}
	}
	return nil
}

func pick(m map[string][]time.Duration, kind string) []time.Duration {
	if kind != "" {
		return m[kind]
	}
	return append(slices.Clone(m[switchover]), m[nodeDeath]...)
}

func row(name string, d, base []time.Duration) {
	st := benchutil.Summarize(d)
	if st.N == 0 {
		return
	}
	ratio := ""
	if base != nil {
		ratio = benchutil.Ratio(st.Median, benchutil.Summarize(base).Median) + "×"
	}
	fmt.Printf("%-48s %4d %9s %9s %9s %9s\n", name, st.N, benchutil.Ms(st.Median), benchutil.Ms(st.P90), benchutil.Ms(st.Max), ratio)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// holds checks that the backend pid (as the program saw it) holds key on
// the node n.
func holds(ctx context.Context, l *lab.Lab, n *lab.HANode, key int64, backendPID string) error {
	cfg, err := dbconn.Parse(l.DSN(n.Port, l.User, "postgres"), 5*time.Second)
	if err != nil {
		return err
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, holders, err := locks.KeyHolders(ctx, conn, key)
	if err != nil {
		return err
	}
	for _, pid := range holders {
		if strconv.FormatUint(uint64(pid), 10) == backendPID {
			return nil
		}
	}
	return fmt.Errorf("the new program's backend %s does not hold the key on the new primary %s (holders %v)", backendPID, n.Name, holders)
}

// events keeps every event of the programs, for any form to look up.
type events struct {
	mu   sync.Mutex
	all  []leasetest.Event
	more chan struct{} // an event arrived (capacity 1: a wake-up)
}

func collect(fifo *benchutil.FIFO) *events {
	e := &events{more: make(chan struct{}, 1)}
	go func() {
		for ev := range fifo.Events {
			e.mu.Lock()
			e.all = append(e.all, ev)
			e.mu.Unlock()
			select {
			case e.more <- struct{}{}:
			default:
			}
		}
	}()
	return e
}

// startOf waits up to limit for the first program start of f's fleet after
// t0.
func (e *events) startOf(f *form, t0 time.Time, limit time.Duration) (leasetest.Event, error) {
	deadline := time.After(limit)
	for {
		e.mu.Lock()
		for _, ev := range e.all {
			if ev.Kind == leasetest.Start && ev.At.After(t0) && f.leader(ev) != nil {
				e.mu.Unlock()
				return ev, nil
			}
		}
		e.mu.Unlock()
		select {
		case <-e.more:
		case <-deadline:
			var b strings.Builder
			for _, r := range f.replicas {
				fmt.Fprintf(&b, "\nreplica %d:\n  %s", r.PID(), r.Tail())
			}
			return leasetest.Event{}, fmt.Errorf("no program started within %v%s", limit, b.String())
		}
	}
}

// settled waits until f has a leader and its other replicas stand by.
func (e *events) settled(f *form) error {
	e.mu.Lock()
	var last *benchutil.Replica
	for _, ev := range e.all {
		if ev.Kind == leasetest.Start {
			if r := f.leader(ev); r != nil {
				last = r
			}
		}
	}
	e.mu.Unlock()
	for _, r := range f.replicas {
		if r != last {
			if err := r.StandingBy(2*time.Minute, settle); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	return nil
}

// leader is the replica of f whose program ev started, or nil.
func (f *form) leader(ev leasetest.Event) *benchutil.Replica {
	for _, r := range f.replicas {
		if r.PID() == ev.PPID {
			return r
		}
	}
	return nil
}

// baseline is the plain client: one session that holds its key on a
// primary, checked every poll; once the session fails, a new connection
// every poll until one holds the key again on a server not in recovery.
type baseline struct {
	mu   sync.Mutex
	held []taken // each time it took the key
	err  error   // the last failure, for a report
}

// taken is when the baseline client took its key, and the port of the
// server it took it on.
type taken struct {
	at   time.Time
	port int
}

func startBaseline(ctx context.Context, dsn string, key int64) *baseline {
	b := &baseline{}
	go func() {
		var conn *pgx.Conn
		holds := false
		drop := func(err error) {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			if conn != nil {
				conn.Close(context.Background())
			}
			conn, holds = nil, false
		}
		for ctx.Err() == nil {
			if conn == nil {
				cfg, err := dbconn.Parse(dsn, connectTimeout)
				if err == nil {
					conn, err = dbconn.Connect(ctx, cfg)
				}
				if err != nil {
					drop(err)
				}
			}
			if conn != nil {
				qctx, cancel := context.WithTimeout(ctx, time.Second)
				if holds {
					if _, err := conn.Exec(qctx, "SELECT 1"); err != nil {
						drop(err)
					}
				} else {
					var ok bool
					var port int
					err := conn.QueryRow(qctx, "SELECT CASE WHEN pg_is_in_recovery() THEN false ELSE pg_try_advisory_lock($1) END, inet_server_port()", key).Scan(&ok, &port)
					switch {
					case err != nil:
						drop(err)
					case ok:
						holds = true
						b.mu.Lock()
						b.held = append(b.held, taken{time.Now(), port})
						b.mu.Unlock()
					default:
						drop(fmt.Errorf("a standby, or the key is held"))
					}
				}
				cancel()
			}
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	return b
}

// heldAfter waits up to limit for the client to take its key after t0.
func (b *baseline) heldAfter(t0 time.Time, limit time.Duration) (taken, error) {
	deadline := time.Now().Add(limit)
	for {
		b.mu.Lock()
		for _, h := range b.held {
			if h.at.After(t0) {
				b.mu.Unlock()
				return h, nil
			}
		}
		last := b.err
		b.mu.Unlock()
		if time.Now().After(deadline) {
			return taken{}, fmt.Errorf("the baseline client did not take its key within %v (last error: %v)", limit, last)
		}
		time.Sleep(poll)
	}
}

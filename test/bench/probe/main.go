// Command probe benchmarks `leasectl probe` (the whole process) against psql
// running the textbook six-statement session probe from a file, on the same server
// in the same run, alternating the two so that machine noise hits both.
//
//	go run ./test/bench/probe [-n 40]
//
// It starts its own lab (PostgreSQL + PgBouncer), prints medians, p90 and the
// ratio of medians for the direct DSN over TCP (SCRAM), over TCP with trust
// (a role that pg_hba.conf trusts from 127.0.0.1), over the unix socket
// (trust), and through the poolers, and stops the lab. Guard: ratio ≤ 1.0
// over SCRAM and ≤ 1.5 over TCP with trust, where the fixed costs of the
// command line and of the probe's second backend show. It also times the lease's reconnect (lease.Run
// until it stands by), which runs the same probe, and where the fixed cost
// goes: process start and exit, one connection and a second at once, the
// probe in process, psql's statements.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/test/benchutil"
)

// textbookProbe is the textbook session probe: each statement its own
// transaction.
const textbookProbe = `SELECT pg_backend_pid();
CREATE TEMP TABLE textbook_probe AS SELECT 1 AS v;
INSERT INTO textbook_probe VALUES (2);
SELECT pg_backend_pid();
SELECT count(*) FROM textbook_probe;
DROP TABLE textbook_probe;
`

func main() {
	n := flag.Int("n", 40, "runs of each command per target")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "leasectl-bench-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := benchutil.BuildLeasectl(tmp)
	if err != nil {
		return err
	}
	// The psql binary, not Debian's pg_wrapper script on PATH, which costs
	// ~40 % of a short run in Perl start-up.
	bins, err := lab.FindBinaries()
	if err != nil {
		return err
	}
	psql := filepath.Join(filepath.Dir(bins.Postgres), "psql")
	if _, err := os.Stat(psql); err != nil {
		return fmt.Errorf("psql not found next to %s (apt-get install postgresql-client): %w", bins.Postgres, err)
	}
	sqlFile := filepath.Join(tmp, "textbookProbe.sql")
	if err := os.WriteFile(sqlFile, []byte(textbookProbe), 0o644); err != nil {
		return err
	}
	l, err := lab.Start(ctx, lab.Options{})
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())

	trustDSN, err := benchutil.TrustOverTCP(ctx, l)
	if err != nil {
		return err
	}

	fmt.Printf("leasectl probe vs %s -f textbookProbe.sql (6 statements), %d alternating runs each, %s\n\n", psql, n, l.Version)
	fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", "target", "psql median", "probe median", "psql p90", "probe p90", "ratio")
	for _, target := range []struct {
		name, dsn string
		code      int
	}{
		{"direct (TCP, SCRAM)", l.DirectDSN(), 0},
		{"direct (TCP, trust)", trustDSN, 0},
		{"direct (socket, trust)", l.SocketDSN(), 0},
		{"PgBouncer transaction", l.PoolerDSN("transaction"), 1},
		{"PgBouncer session", l.PoolerDSN("session"), 0},
	} {
		var psqlTimes, probeTimes []time.Duration
		for i := -3; i < n; i++ { // three warm-up rounds
			d1, code, err := benchutil.TimeProcess(ctx, nil, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", target.dsn, "-f", sqlFile)
			if err != nil || code != 0 {
				return fmt.Errorf("psql on %s: exit %d: %v", target.name, code, err)
			}
			d2, code, err := benchutil.TimeProcess(ctx, []string{"NO_COLOR=1"}, bin, "probe", target.dsn)
			if err != nil || code != target.code {
				return fmt.Errorf("leasectl probe on %s: exit %d, want %d: %v", target.name, code, target.code, err)
			}
			if i >= 0 {
				psqlTimes = append(psqlTimes, d1)
				probeTimes = append(probeTimes, d2)
			}
		}
		a, b := benchutil.Summarize(psqlTimes), benchutil.Summarize(probeTimes)
		fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", target.name, benchutil.Ms(a.Median), benchutil.Ms(b.Median), benchutil.Ms(a.P90), benchutil.Ms(b.P90), benchutil.Ratio(b.Median, a.Median))
	}
	// The same direct probe while 200 sessions hold 10,000 advisory locks:
	// a probe that scanned pg_locks would pay for each of them.
	held, err := holdLocks(ctx, l.DirectDSN(), 200, 50)
	defer func() {
		for _, c := range held {
			c.Close(context.Background())
		}
	}()
	if err != nil {
		return err
	}
	var psqlTimes, probeTimes []time.Duration
	for i := -3; i < n; i++ {
		d1, code, err := benchutil.TimeProcess(ctx, nil, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", l.DirectDSN(), "-f", sqlFile)
		if err != nil || code != 0 {
			return fmt.Errorf("psql: exit %d: %v", code, err)
		}
		d2, code, err := benchutil.TimeProcess(ctx, []string{"NO_COLOR=1"}, bin, "probe", l.DirectDSN())
		if err != nil || code != 0 {
			return fmt.Errorf("leasectl probe with 10k locks: exit %d: %v", code, err)
		}
		if i >= 0 {
			psqlTimes = append(psqlTimes, d1)
			probeTimes = append(probeTimes, d2)
		}
	}
	a, b := benchutil.Summarize(psqlTimes), benchutil.Summarize(probeTimes)
	fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", "direct, 10k locks held", benchutil.Ms(a.Median), benchutil.Ms(b.Median), benchutil.Ms(a.P90), benchutil.Ms(b.P90), benchutil.Ratio(b.Median, a.Median))
	for _, c := range held {
		c.Close(context.Background())
	}
	held = nil
	fmt.Println("\nratio = probe median / psql median; guard: ≤ 1.00 over TCP with SCRAM, ≤ 1.50 over TCP with trust")

	// The lease's reconnect: lease.Run from its start until it stands by
	// (lease and fence sessions connected, the probe passed), against the
	// same psql run as the baseline, alternating.
	holder, err := dbconn.Connect(ctx, mustParse(l.DirectDSN()))
	if err != nil {
		return err
	}
	defer holder.Close(ctx)
	const key = 1849999999
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(key)); err != nil {
		return err
	}
	psqlTimes, leaseTimes := []time.Duration(nil), []time.Duration(nil)
	for i := -3; i < n; i++ {
		d1, code, err := benchutil.TimeProcess(ctx, nil, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", l.DirectDSN(), "-f", sqlFile)
		if err != nil || code != 0 {
			return fmt.Errorf("psql: exit %d: %v", code, err)
		}
		d2, err := timeStandBy(ctx, l.DirectDSN(), key)
		if err != nil {
			return err
		}
		if i >= 0 {
			psqlTimes = append(psqlTimes, d1)
			leaseTimes = append(leaseTimes, d2)
		}
	}
	a, b = benchutil.Summarize(psqlTimes), benchutil.Summarize(leaseTimes)
	fmt.Printf("\n%-22s %12s %12s %12s %12s %8s\n", "lease (re)connect", "psql median", "lease median", "psql p90", "lease p90", "ratio")
	fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", "direct (TCP)", benchutil.Ms(a.Median), benchutil.Ms(b.Median), benchutil.Ms(a.P90), benchutil.Ms(b.P90), benchutil.Ratio(b.Median, a.Median))
	fmt.Println("lease = lease.Run in-process from its start to standing by: lease and stop fence sessions open, the probe passed")

	fmt.Printf("\nwhere the time goes, medians of %d alternating runs:\n", n)
	for _, target := range []struct{ name, dsn string }{{"direct (TCP, SCRAM)", l.DirectDSN()}, {"direct (socket, trust)", l.SocketDSN()}} {
		if err := breakdown(ctx, n, bin, psql, sqlFile, target.name, target.dsn); err != nil {
			return err
		}
	}
	return nil
}

// breakdown times the pieces of both commands on dsn, alternating: each
// process started and ended with nothing to do (leasectl version, psql -V),
// psql with one connection and no statement (-f /dev/null) and with the
// textbook's six, the whole probe, the probe in process (probe.Run), and
// one pgx connection in process alone and with a second opened at once, as
// the probe opens its contender.
func breakdown(ctx context.Context, n int, bin, psql, sqlFile, name, dsn string) error {
	var lv, pv, pnull, ptext, probeProc, probeRun, alone, paired []time.Duration
	for i := -3; i < n; i++ {
		// The last round's connections closed just now: let their backends
		// exit, or the first timing of this one (leasectl version) pays
		// for it.
		time.Sleep(20 * time.Millisecond)
		d1, _, err := benchutil.TimeProcess(ctx, []string{"NO_COLOR=1"}, bin, "version")
		if err != nil {
			return err
		}
		d2, _, err := benchutil.TimeProcess(ctx, nil, psql, "-V")
		if err != nil {
			return err
		}
		d3, code, err := benchutil.TimeProcess(ctx, nil, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", os.DevNull)
		if err != nil || code != 0 {
			return fmt.Errorf("psql -f %s: exit %d: %v", os.DevNull, code, err)
		}
		d4, code, err := benchutil.TimeProcess(ctx, nil, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", sqlFile)
		if err != nil || code != 0 {
			return fmt.Errorf("psql: exit %d: %v", code, err)
		}
		d5, code, err := benchutil.TimeProcess(ctx, []string{"NO_COLOR=1"}, bin, "probe", dsn)
		if err != nil || code != 0 {
			return fmt.Errorf("leasectl probe: exit %d: %v", code, err)
		}
		rep, err := probe.Run(ctx, probe.Options{ConnConfig: mustParse(dsn)})
		if err != nil || rep.Verdict != probe.Stable {
			return fmt.Errorf("probe.Run: %v", err)
		}
		d7, d8, err := connects(ctx, dsn)
		if err != nil {
			return err
		}
		if i >= 0 {
			lv, pv, pnull, ptext = append(lv, d1), append(pv, d2), append(pnull, d3), append(ptext, d4)
			probeProc, probeRun = append(probeProc, d5), append(probeRun, rep.Elapsed)
			alone, paired = append(alone, d7), append(paired, d8)
		}
	}
	m := func(ds []time.Duration) time.Duration { return benchutil.Summarize(ds).Median }
	fmt.Printf("\n%s\n", name)
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "leasectl", "median", "psql", "median")
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "process start and exit (leasectl version)", benchutil.Ms(m(lv)), "process start and exit (-V)", benchutil.Ms(m(pv)))
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "pgx connect in process, alone", benchutil.Ms(m(alone)), "one connection (-f /dev/null)", benchutil.Ms(m(pnull)))
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "pgx connect, with a second at once", benchutil.Ms(m(paired)), "", "")
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "probe.Run in process", benchutil.Ms(m(probeRun)), "", "")
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "leasectl probe", benchutil.Ms(m(probeProc)), "the textbook's six statements", benchutil.Ms(m(ptext)))
	fmt.Printf("  %-44s %8s   %-30s %8s\n", "  outside probe.Run (probe − probe.Run)", benchutil.Ms(m(probeProc)-m(probeRun)), "  statements (six − none)", benchutil.Ms(m(ptext)-m(pnull)))
	return nil
}

// connects times one connection on its own, then the first of two opened
// at the same moment (the probe's A and its contender).
func connects(ctx context.Context, dsn string) (alone, paired time.Duration, err error) {
	cfg := mustParse(dsn)
	start := time.Now()
	c, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	alone = time.Since(start)
	c.Close(ctx)
	start = time.Now()
	other := make(chan error, 1)
	go func() {
		c, err := dbconn.Connect(ctx, cfg)
		if err == nil {
			c.Close(ctx)
		}
		other <- err
	}()
	c, err = dbconn.Connect(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	paired = time.Since(start)
	c.Close(ctx)
	return alone, paired, <-other
}

// timeStandBy measures lease.Run from its start until it stands by for key,
// which another session holds.
func timeStandBy(ctx context.Context, dsn string, key int64) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	standing := make(chan time.Time, 1)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		errc <- lease.Run(ctx, lease.Config{Key: key, DSN: dsn, OnStateChange: func(c lease.Change) {
			if c.To == lease.StandingBy {
				select {
				case standing <- c.At:
				default:
				}
			}
		}}, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	select {
	case at := <-standing:
		cancel()
		<-errc
		return at.Sub(start), nil
	case err := <-errc:
		return 0, fmt.Errorf("lease.Run returned before standing by: %v", err)
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("lease.Run did not stand by within a minute")
	}
}

// holdLocks opens n sessions that each take perSession advisory locks
// (keys far from any probe's) and then stay idle.
func holdLocks(ctx context.Context, dsn string, n, perSession int) ([]*pgx.Conn, error) {
	var conns []*pgx.Conn
	for i := range n {
		conn, err := dbconn.Connect(ctx, mustParse(dsn))
		if err != nil {
			return conns, err
		}
		conns = append(conns, conn)
		first := int64(7_000_000_000 + i*perSession)
		if _, err := conn.Exec(ctx, "SELECT count(pg_advisory_lock(k)) FROM generate_series($1::bigint, $2::bigint) k", first, first+int64(perSession)-1); err != nil {
			return conns, fmt.Errorf("take locks (max_locks_per_transaction too low?): %w", err)
		}
	}
	return conns, nil
}

func mustParse(dsn string) *pgx.ConnConfig {
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		panic(err)
	}
	return cfg
}

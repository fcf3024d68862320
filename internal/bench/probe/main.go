// Command probe benchmarks `leasectl probe` (the whole process) against psql
// running the textbook six-statement session probe from a file, on the same server
// in the same run, alternating the two so that machine noise hits both.
//
//	go run ./internal/bench/probe [-n 40]
//
// It starts its own lab (PostgreSQL + PgBouncer), prints medians, p90 and the
// ratio of medians for the direct DSN and for the transaction pooler, and
// stops the lab. Target: ratio ≤ 1.0. It also times the lease's reconnect
// (lease.Run until it stands by), which runs the same probe.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/internal/benchutil"
	"github.com/leasectl/leasectl/lab"
	"github.com/leasectl/leasectl/lease"
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

	fmt.Printf("leasectl probe vs %s -f textbookProbe.sql (6 statements), %d alternating runs each, %s\n\n", psql, n, l.Version)
	fmt.Printf("%-22s %12s %12s %12s %12s %8s\n", "target", "psql median", "probe median", "psql p90", "probe p90", "ratio")
	for _, target := range []struct {
		name, dsn string
		code      int
	}{
		{"direct (TCP)", l.DirectDSN(), 0},
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
	fmt.Println("\nratio = probe median / psql median; target ≤ 1.00")

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
	return nil
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

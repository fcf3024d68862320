// Command fence benchmarks fenced against unfenced transactions: eight
// pgbench clients doing one-row insert transactions, with and without
// leasectl.fence(token) in them, through the direct DSN and through
// PgBouncer in transaction mode, alternating runs of each so that machine
// noise hits both. A real lease (lease.Run with Fencing) holds the term
// whose token the fenced script checks.
//
//	go run ./test/bench/fence [-n 5] [-t 5s] [-soak 60s] [-durable]
//
// It prints the median transactions per second of each script, the ratio
// fenced/unfenced (target: at least 0.9), and then runs the fenced script
// for -soak while sampling the server's lock queue and its MultiXact ids,
// which must not grow with time. -durable runs the lab with fsync,
// synchronous_commit and full_page_writes on, as a production server is;
// by default it keeps the lab's (all off), where a commit costs least and
// the check's share is largest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/lease"
)

func main() {
	n := flag.Int("n", 5, "runs of each script per target")
	dur := flag.Duration("t", 5*time.Second, "length of each run")
	soak := flag.Duration("soak", time.Minute, "length of the fenced soak run (0: none)")
	durable := flag.Bool("durable", false, "fsync, synchronous_commit and full_page_writes on")
	flag.Parse()
	if err := run(*n, *dur, *soak, *durable); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

const clients = 8

func run(n int, dur, soak time.Duration, durable bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := lab.Options{Poolers: []lab.PoolerSpec{{Name: "transaction", Mode: lab.Transaction, PoolSize: 20}}}
	if durable {
		opts.Settings = map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
	}
	l, err := lab.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	pgbench := filepath.Join(filepath.Dir(l.Bin.Postgres), "pgbench")

	// A real term, and its token.
	const key = 1840000001
	tokens := make(chan string, 1)
	go func() {
		_ = lease.Run(ctx, lease.Config{Role: "poller", Key: key, DSN: l.DirectDSN(), Fencing: true}, func(ctx context.Context) error {
			s, _ := lease.SessionFrom(ctx)
			tokens <- s.FenceToken()
			<-ctx.Done()
			return nil
		})
	}()
	var token string
	select {
	case token = <-tokens:
	case <-time.After(time.Minute):
		return fmt.Errorf("the lease did not lead within a minute")
	}
	admin, err := connect(ctx, l.DirectDSN())
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE TABLE bench_writes (id bigserial PRIMARY KEY, v int, epoch bigint)"); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "leasectl-bench-fence-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scripts := []struct{ name, sql string }{
		{"unfenced", "BEGIN;\nINSERT INTO bench_writes (v) VALUES (1);\nCOMMIT;\n"},
		{"fenced", "BEGIN;\nINSERT INTO bench_writes (v, epoch) VALUES (1, leasectl.fence('" + token + "'));\nCOMMIT;\n"},
		{"fenced, own statement", "BEGIN;\nSELECT leasectl.fence('" + token + "');\nINSERT INTO bench_writes (v) VALUES (1);\nCOMMIT;\n"},
	}
	for i := range scripts {
		path := filepath.Join(dir, strconv.Itoa(i)+".sql")
		if err := os.WriteFile(path, []byte(scripts[i].sql), 0o600); err != nil {
			return err
		}
		scripts[i].sql = path
	}
	fmt.Printf("fencing benchmark: %d clients, one-row insert transactions, %d alternating runs of %s each, durable=%v\n", clients, n, dur, durable)
	fmt.Printf("%-24s %-22s %12s %8s\n", "target", "script", "median tps", "ratio")
	for _, target := range []struct{ name, dsn string }{{"direct", l.DirectDSN()}, {"PgBouncer transaction", l.PoolerDSN("transaction")}} {
		tps := make([][]float64, len(scripts))
		for range n {
			for i, s := range scripts {
				v, err := bench(ctx, pgbench, target.dsn, s.sql, dur)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", target.name, s.name, err)
				}
				tps[i] = append(tps[i], v)
			}
		}
		base := median(tps[0])
		for i, s := range scripts {
			fmt.Printf("%-24s %-22s %12.0f %8.2f\n", target.name, s.name, median(tps[i]), median(tps[i])/base)
		}
	}
	if soak <= 0 {
		return nil
	}
	return soakRun(ctx, admin, pgbench, l.DirectDSN(), scripts[1].sql, soak)
}

// soakRun runs the fenced script for d and samples, every 5 s, the
// server's MultiXact id counter and how many lock requests wait.
func soakRun(ctx context.Context, admin *pgx.Conn, pgbench, dsn, script string, d time.Duration) error {
	done := make(chan error, 1)
	go func() { _, err := bench(ctx, pgbench, dsn, script, d); done <- err }()
	fmt.Printf("\nsoak: the fenced script for %s (direct)\n%8s %16s %14s\n", d, "t", "next multixact", "waiting locks")
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			var mxid string
			var waiting int
			if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			if err := admin.QueryRow(ctx, `SELECT next_multixact_id::text, (SELECT count(*) FROM pg_locks WHERE NOT granted)
  FROM pg_control_checkpoint()`).Scan(&mxid, &waiting); err != nil {
				return err
			}
			fmt.Printf("%8s %16s %14d\n", time.Since(start).Round(time.Second), mxid, waiting)
		}
	}
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// bench runs pgbench with script for d and returns its transactions per
// second; a failed transaction (a refused fence) fails the run.
func bench(ctx context.Context, pgbench, dsn, script string, d time.Duration) (float64, error) {
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(int(d.Seconds())), "-f", script, dsn)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench's output:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return dbconn.Connect(ctx, cfg)
}

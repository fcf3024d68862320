// Command who measures `leasectl who` as a whole process against psql
// running the same query, on a server with many idle sessions holding many
// advisory locks.
//
// It starts its own lab (PostgreSQL, no pooler), opens -sessions idle
// connections that each hold -locks-per-session advisory locks (three of
// them hold the roles of keys.yaml), builds leasectl, and then times, with
// runs alternating so that drift hits both alike:
//
//	leasectl who --all             vs  psql -X -At -f all.sql
//	leasectl who --all -o json     vs  psql -X -At -f all.sql
//	leasectl who (over keys.yaml)  vs  psql -X -At -f roles.sql
//
// where the .sql files hold the statement of locks.Read with its parameters inlined
// and psql connects with gssencmode=disable (pgx does not try GSSAPI
// either). Each pair is timed three times: over TCP, where the lab's server
// asks for SCRAM; over TCP as a role that pg_hba.conf trusts from
// 127.0.0.1 (trustOverTCP); and over its unix socket, where it trusts the
// client. stdout of both goes to /dev/null (not a terminal: plain output,
// compact JSON).
// It prints medians, p90 and the ratio leasectl / psql, and the median peak
// RSS of each over -rss-runs more runs under GNU time (/usr/bin/time, which
// a small parent keeps accurate). Run it from the repository root:
//
//	go run ./test/bench/who
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/benchutil"
)

func main() {
	sessions := flag.Int("sessions", 200, "idle sessions holding locks")
	perSession := flag.Int("locks-per-session", 50, "advisory locks each session holds")
	runs := flag.Int("n", 30, "timed runs of each command")
	keysFile := flag.String("keys", "keys.yaml", "role map for `leasectl who` (its roles are among the held keys)")
	flag.BoolVar(&explain, "explain", false, "also print EXPLAIN ANALYZE of both queries")
	flag.BoolVar(&serve, "serve", false, "set up, print the environment to reach it, and wait for Ctrl-C instead of timing (for profiling)")
	flag.IntVar(&rssRuns, "rss-runs", 5, "runs of each command under /usr/bin/time for its peak RSS (0: skip)")
	flag.StringVar(&prebuilt, "bin", "", "time this leasectl binary instead of building one (to compare builds)")
	flag.Parse()
	if err := run(*sessions, *perSession, *runs, *keysFile); err != nil {
		fmt.Fprintln(os.Stderr, "bench who:", err)
		os.Exit(1)
	}
}

var (
	explain, serve bool
	prebuilt       string
	rssRuns        int
)

func run(sessions, perSession, runs int, keysPath string) error {
	ctx := context.Background()
	roles, err := keys.Load(keysPath)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or pass -keys)", err)
	}
	// The psql binary, not Debian's pg_wrapper script on PATH, whose Perl
	// start-up would flatter every ratio.
	bins, err := lab.FindBinaries()
	if err != nil {
		return err
	}
	psql := filepath.Join(filepath.Dir(bins.Postgres), "psql")
	if _, err := os.Stat(psql); err != nil {
		return fmt.Errorf("psql is the baseline and is not next to %s (Debian: apt-get install postgresql-client): %w", bins.Postgres, err)
	}
	work, err := os.MkdirTemp("", "leasectl-bench-who-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	leasectl := prebuilt
	if leasectl == "" {
		fmt.Fprintln(os.Stderr, "building leasectl ...")
		if leasectl, err = benchutil.BuildLeasectl(work); err != nil {
			return err
		}
	}

	fmt.Fprintln(os.Stderr, "starting lab ...")
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	l, err := lab.Start(startCtx, lab.Options{Poolers: []lab.PoolerSpec{}})
	cancel()
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	dsn := l.DirectDSN()

	fmt.Fprintf(os.Stderr, "opening %d sessions holding %d advisory locks each ...\n", sessions, perSession)
	conns, err := holdLocks(ctx, dsn, sessions, perSession, roles)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()

	var roleKeys []string
	for _, r := range roles.Roles {
		roleKeys = append(roleKeys, strconv.FormatInt(r.Key, 10))
	}
	allSQL := filepath.Join(work, "all.sql")
	rolesSQL := filepath.Join(work, "roles.sql")
	if err := os.WriteFile(allSQL, []byte(inline(true, nil)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(rolesSQL, []byte(inline(false, roleKeys)), 0o600); err != nil {
		return err
	}
	trustDSN, err := benchutil.TrustOverTCP(ctx, l)
	if err != nil {
		return err
	}
	// Each command runs over three ways in: TCP, where the server asks for
	// SCRAM; TCP as a role the server trusts; and the unix socket, where it
	// trusts the client: without the login's cost the rest of the run
	// shows.
	type target struct{ auth, dsn, psqlDSN string }
	targets := []target{
		// libpq tries GSSAPI encryption first by default; pgx does not, so
		// the baseline does not either.
		{"TCP, SCRAM", dsn, dsn + "&gssencmode=disable"},
		{"TCP, trust", trustDSN, trustDSN + "&gssencmode=disable"},
		{"socket, trust", l.SocketDSN(), l.SocketDSN() + " gssencmode=disable"},
	}
	whoAll := cmdSpec{leasectl, []string{"who", "--all", "--keys", keysPath}}
	whoJSON := cmdSpec{leasectl, []string{"who", "--all", "-o", "json", "--keys", keysPath}}
	whoRoles := cmdSpec{leasectl, []string{"who", "--keys", keysPath}}
	psqlOf := func(t target, file string) cmdSpec {
		return cmdSpec{psql, []string{"-X", "-At", "-d", t.psqlDSN, "-f", file}}
	}
	envOf := func(t target) []string { return []string{"LEASECTL_DSN=" + t.dsn, "PGPASSFILE=" + l.PassFile} }

	// Check that both sides see the same locks, both ways in, before
	// timing them.
	total := sessions * perSession
	for _, t := range targets {
		env := envOf(t)
		if n, err := countLines(psqlOf(t, allSQL), env); err != nil || n != total {
			return fmt.Errorf("%s: psql --all printed %d rows (%v), want %d", t.auth, n, err, total)
		}
		if n, err := countLines(whoAll, env); err != nil || n < total {
			return fmt.Errorf("%s: leasectl who --all printed %d lines (%v), want at least %d", t.auth, n, err, total)
		}
		if n, err := countLeases(whoJSON, env); err != nil || n < total {
			return fmt.Errorf("%s: leasectl who --all -o json printed %d leases (%v), want at least %d", t.auth, n, err, total)
		}
	}

	if serve {
		fmt.Printf("export LEASECTL_DSN='%s' PGPASSFILE='%s'\n# trust over TCP: LEASECTL_DSN='%s'\n# trust over the socket: LEASECTL_DSN='%s'\n# queries: %s %s\n# Ctrl-C to stop\n",
			dsn, l.PassFile, trustDSN, l.SocketDSN(), allSQL, rolesSQL)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		return nil
	}
	if explain {
		for _, f := range []string{allSQL, rolesSQL} {
			sql, _ := os.ReadFile(f)
			cmd := exec.Command(psql, "-X", "-d", dsn, "-c", "EXPLAIN (ANALYZE, COSTS OFF) "+strings.TrimSuffix(string(sql), ";\n"))
			cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), envOf(targets[0])...), os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				return err
			}
		}
	}
	fmt.Printf("who benchmark: %d idle sessions, %d advisory locks held, %s, %d runs each, alternating\n",
		sessions, total, l.Version, runs)
	fmt.Printf("%-14s %-34s %10s %10s %8s %12s\n", "auth", "command", "median", "p90", "vs psql", "peak RSS")
	for _, t := range targets {
		env := envOf(t)
		for _, pair := range [][2]cmdSpec{{whoAll, psqlOf(t, allSQL)}, {whoJSON, psqlOf(t, allSQL)}, {whoRoles, psqlOf(t, rolesSQL)}} {
			a, b, err := alternate(ctx, pair[0], pair[1], env, runs)
			if err != nil {
				return fmt.Errorf("%s: %w", t.auth, err)
			}
			sa, sb := benchutil.Summarize(a), benchutil.Summarize(b)
			ra, err := pair[0].peakRSS(ctx, env)
			if err != nil {
				return err
			}
			rb, err := pair[1].peakRSS(ctx, env)
			if err != nil {
				return err
			}
			fmt.Printf("%-14s %-34s %10s %10s %7sx %12s\n", t.auth, pair[0].label(), benchutil.Ms(sa.Median), benchutil.Ms(sa.P90), benchutil.Ratio(sa.Median, sb.Median), ra)
			fmt.Printf("%-14s %-34s %10s %10s %8s %12s\n", t.auth, pair[1].label(), benchutil.Ms(sb.Median), benchutil.Ms(sb.P90), "", rb)
		}
	}
	return nil
}

// peakRSS is the median peak RSS of rssRuns runs of c, or "-" for none.
func (c cmdSpec) peakRSS(ctx context.Context, env []string) (string, error) {
	if rssRuns <= 0 {
		return "-", nil
	}
	var rss []int64
	for range rssRuns {
		n, err := benchutil.PeakRSS(ctx, env, c.path, c.args...)
		if err != nil {
			return "", err
		}
		rss = append(rss, n)
	}
	slices.Sort(rss)
	return benchutil.MiB(rss[len(rss)/2]), nil
}

// holdLocks opens n sessions that each take perSession advisory locks in
// one statement and then stay idle. The first sessions take the roles' keys
// among theirs, so that `leasectl who` finds them held.
func holdLocks(ctx context.Context, dsn string, n, perSession int, roles *keys.File) ([]*pgx.Conn, error) {
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		return nil, err
	}
	var conns []*pgx.Conn
	for i := range n {
		c := cfg.Copy()
		c.RuntimeParams["application_name"] = fmt.Sprintf("bench-worker-%d", i)
		conn, err := dbconn.Connect(ctx, c)
		if err != nil {
			return conns, err
		}
		conns = append(conns, conn)
		keys := make([]int64, 0, perSession)
		if i < len(roles.Roles) {
			keys = append(keys, roles.Roles[i].Key)
		}
		for k := int64(len(keys)); k < int64(perSession); k++ {
			keys = append(keys, 7_000_000_000+int64(i)*int64(perSession)+k)
		}
		if _, err := conn.Exec(ctx, "SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) k", keys); err != nil {
			return conns, fmt.Errorf("take locks (max_locks_per_transaction too low?): %w", err)
		}
	}
	return conns, nil
}

// inline returns the statement of locks.Read with its parameters written in, for psql.
func inline(all bool, bigints []string) string {
	arr := "'{" + strings.Join(bigints, ",") + "}'"
	r := strings.NewReplacer("$1::bool", strconv.FormatBool(all), "$2::bigint[]", arr+"::bigint[]", "$3::bigint[]", "'{}'::bigint[]")
	sql, _ := locks.Filter{All: all}.Query()
	return r.Replace(sql) + ";\n"
}

type cmdSpec struct {
	path string
	args []string
}

func (c cmdSpec) label() string {
	name := filepath.Base(c.path)
	if name == "psql" {
		return "psql -X -At -f " + filepath.Base(c.args[len(c.args)-1])
	}
	return name + " " + strings.Join(c.args[:len(c.args)-2], " ")
}

func (c cmdSpec) time(ctx context.Context, env []string) (time.Duration, error) {
	d, code, err := benchutil.TimeProcess(ctx, env, c.path, c.args...)
	if err == nil && code != 0 {
		err = fmt.Errorf("%s: exit %d", c.label(), code)
	}
	return d, err
}

func countLines(c cmdSpec, env []string) (int, error) {
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	return strings.Count(string(out), "\n"), err
}

// countLeases runs c, a `who -o json`, and counts the leases of its
// document, which must hide no session (every way in reads the same). Its
// layout is not checked, so that -bin can time a build from before JSON
// was compact when piped.
func countLeases(c cmdSpec, env []string) (int, error) {
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	var doc struct {
		Leases []json.RawMessage
		Hidden bool
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, err
	}
	if doc.Hidden {
		return 0, fmt.Errorf("sessions are hidden from the role")
	}
	return len(doc.Leases), nil
}

// alternate runs a and b in turns, after one untimed warm-up of each.
func alternate(ctx context.Context, a, b cmdSpec, env []string, n int) (ta, tb []time.Duration, err error) {
	for i := -1; i < n; i++ {
		da, err := a.time(ctx, env)
		if err != nil {
			return nil, nil, err
		}
		db, err := b.time(ctx, env)
		if err != nil {
			return nil, nil, err
		}
		if i >= 0 {
			ta, tb = append(ta, da), append(tb, db)
		}
	}
	return ta, tb, nil
}

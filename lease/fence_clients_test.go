package lease_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/test/pgtest"
	"github.com/leasectl/leasectl/test/runtimes"
)

// The fencing tests of docs/fencing.md's and docs/lease-package.md's
// programs: each is taken from its page as it is and run, from its own
// language's driver, through the lab's PgBouncer in transaction mode. A
// runtime that is missing fails the test: Debian's python3-psycopg and
// ruby-pg, node and npm (which installs node-postgres from the npm registry
// into the user's cache directory, once), and go.

// fenceJobs is how many jobs each run claims, one fenced transaction each.
const fenceJobs = 50

// docBlock returns the one fenced block of docs/PAGE whose info string is
// lang and whose text contains marker, as the page shows it.
func docBlock(t *testing.T, page, lang, marker string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	var block []string
	in, take := false, false
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && strings.HasPrefix(trimmed, "```"):
			in, take, block = true, strings.TrimPrefix(trimmed, "```") == lang, nil
		case in && trimmed == "```":
			in = false
			if text := strings.Join(block, ""); take && strings.Contains(text, marker) {
				found = append(found, text)
			}
		case in:
			block = append(block, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/%s has %d ```%s blocks that contain %q, want 1", page, len(found), lang, marker)
	}
	return found[0]
}

// fenceDriver is one language's program of docs/fencing.md and how to run it.
type fenceDriver struct {
	name, lang, file string
	// marker tells the language's program apart from the page's other
	// blocks in that language.
	marker string
	// setting is what the page's program sets for a transaction pooler; the
	// driver-defaults control runs the program without it.
	setting string
	// prepares: with its defaults the driver prepares statements on the
	// server, which a transaction pooler loses.
	prepares bool
	// runner returns the command that runs the program in file.
	runner func(t *testing.T, file string) *exec.Cmd
}

// The runners end a program that a driver error ended with "SQLSTATE XXXXX"
// on stderr: the same program, run by the interpreter, inside a catch that
// reads the error's SQLSTATE the way fencing.md says.
const (
	pythonRunner = `import runpy, sys
import psycopg
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
except psycopg.Error as e:
    print(f"SQLSTATE {e.sqlstate}: {e}", file=sys.stderr)
    sys.exit(3)
`
	rubyRunner = `require "pg"
begin
  load ARGV.fetch(0)
rescue PG::Error => e
  state = e.respond_to?(:result) && e.result ? e.result.error_field(PG::PG_DIAG_SQLSTATE) : "none"
  warn "SQLSTATE #{state}: #{e.message}"
  exit 3
end
`
	nodeRunner = `import(process.argv[1]).catch((e) => {
  console.error("SQLSTATE " + e.code + ": " + e.message);
  process.exit(3);
});
`
)

var fenceDrivers = []fenceDriver{
	{
		name: "psycopg", lang: "python", file: "worker.py", marker: "leasectl.fence",
		setting: ", prepare_threshold=None", prepares: true,
		runner: func(t *testing.T, file string) *exec.Cmd {
			return exec.Command(runtimes.PsycopgPython(t), "-c", pythonRunner, file)
		},
	},
	{
		name: "node-postgres", lang: "js", file: "worker.mjs", marker: "leasectl.fence",
		runner: func(t *testing.T, file string) *exec.Cmd {
			runtimes.LinkNodePg(t, filepath.Dir(file))
			return exec.Command(runtimes.Need(t, "node", "apt-get install nodejs"), "-e", nodeRunner, file)
		},
	},
	{
		name: "ruby-pg", lang: "ruby", file: "worker.rb", marker: "leasectl.fence",
		runner: func(t *testing.T, file string) *exec.Cmd {
			ruby := runtimes.Need(t, "ruby", "apt-get install ruby-pg")
			if out, err := exec.Command(ruby, "-e", `require "pg"`).CombinedOutput(); err != nil {
				t.Fatalf("ruby cannot load pg (apt-get install ruby-pg): %v\n%s", err, out)
			}
			return exec.Command(ruby, "-e", rubyRunner, file)
		},
	},
	{
		name: "pgx", lang: "go", file: "worker.go", marker: "lease.Fence",
		setting: "\tcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec\n", prepares: true,
		runner: func(t *testing.T, file string) *exec.Cmd { return exec.Command(goBuild(t, file)) },
	},
}

// TestFencingDocProgramsThroughATransactionPooler runs each program of
// docs/fencing.md as the page shows it, through PgBouncer in transaction
// mode: twice with the current term's token (the second run a new process,
// as after a restart or at the next term, which gets the server connections
// that the first left), each run claiming all 50 jobs in 50 fenced
// transactions, then with the token of the term before, which must be
// refused with SQLSTATE LF001 and claim nothing. The programs of the
// drivers that prepare statements by default are then run with the page's
// setting taken out: that must fail (PgBouncer 1.18 keeps no prepared
// statements), or the test would not show what the setting is for.
func TestFencingDocProgramsThroughATransactionPooler(t *testing.T) {
	const key = 9100300
	f := newFenceJobs(t, "fence_clients")
	a := startLeader(t, key, f.direct)
	old := a.session(t)
	b := startLeader(t, key, f.direct)
	a.cancel()
	cur := b.session(t)
	stale, current := old.FenceToken(), cur.FenceToken()
	for _, d := range fenceDrivers {
		t.Run(d.name, func(t *testing.T) {
			block := docBlock(t, "fencing.md", d.lang, d.marker)
			set := d.setting == "" || strings.Contains(block, d.setting)
			if !set {
				t.Errorf("docs/fencing.md's %s program does not set %q for a transaction pooler", d.name, d.setting)
			}
			cmd := d.runner(t, writeProgram(t, d.file, block))
			f.mustClaimAll(t, cmd, f.pooled, current, "run 1")
			f.mustClaimAll(t, cmd, f.pooled, current, "run 2, a new process")
			f.mustBeRefused(t, cmd, f.pooled, stale)

			if !d.prepares || !set {
				return
			}
			if n := f.poolerPreparedStatements(t); n > 0 {
				t.Logf("PgBouncer keeps prepared statements (max_prepared_statements = %d): the driver-defaults control does not apply", n)
				return
			}
			defaults := strings.Replace(block, d.setting, "", 1)
			cmd = d.runner(t, writeProgram(t, d.file, defaults))
			var failures []string
			for run := 1; run <= 2; run++ {
				r := f.run(t, cmd, f.pooled, current)
				t.Logf("driver defaults, run %d: %d of %d claimed, %s", run, r.claimed, fenceJobs, r.summary())
				if r.err != nil {
					if r.sqlstate != "42P05" && r.sqlstate != "26000" {
						t.Errorf("driver defaults, run %d failed, but not on a prepared statement (SQLSTATE %q): %s", run, r.sqlstate, r.summary())
					}
					failures = append(failures, r.sqlstate)
				}
			}
			if len(failures) == 0 {
				t.Errorf("%s with its defaults (without %q) claimed every job twice through PgBouncer in transaction mode: the test no longer shows what the setting is for", d.name, d.setting)
			}
		})
	}
}

// TestFencingDocProgramsTakeTheSettingInTheDSN: the pgx program of
// docs/fencing.md without the exec mode set in code, with
// default_query_exec_mode=exec (the page's alternative) or simple_protocol
// in the DSN instead.
func TestFencingDocProgramsTakeTheSettingInTheDSN(t *testing.T) {
	const key = 9100310
	f := newFenceJobs(t, "fence_clients_dsn")
	a := startLeader(t, key, f.direct)
	old := a.session(t)
	b := startLeader(t, key, f.direct)
	a.cancel()
	cur := b.session(t)
	var pgxDriver fenceDriver
	for _, d := range fenceDrivers {
		if d.name == "pgx" {
			pgxDriver = d
		}
	}
	block := docBlock(t, "fencing.md", pgxDriver.lang, pgxDriver.marker)
	if !strings.Contains(block, pgxDriver.setting) {
		t.Fatalf("docs/fencing.md's pgx program does not set %q", pgxDriver.setting)
	}
	cmd := pgxDriver.runner(t, writeProgram(t, pgxDriver.file, strings.Replace(block, pgxDriver.setting, "", 1)))
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			dsn := f.pooled + "&default_query_exec_mode=" + mode
			f.mustClaimAll(t, cmd, dsn, cur.FenceToken(), "run 1")
			f.mustClaimAll(t, cmd, dsn, cur.FenceToken(), "run 2, a new process")
			f.mustBeRefused(t, cmd, dsn, old.FenceToken())
		})
	}
}

// TestLeasePackageDocFencingProgram builds docs/lease-package.md's fenced
// poller and runs it: it leads (its own lease, with Fencing) and claims
// every job through PgBouncer in transaction mode, then returns.
func TestLeasePackageDocFencingProgram(t *testing.T) {
	f := newFenceJobs(t, "fence_lease_doc")
	bin := goBuild(t, writeProgram(t, "poller.go", docBlock(t, "lease-package.md", "go", "lease.Fence")))
	cmd := exec.Command(bin)
	cmd.Env = append(cmd.Environ(), "LEASECTL_DSN="+f.direct)
	r := f.run(t, cmd, f.pooled, "")
	if r.err != nil || r.claimed != fenceJobs {
		t.Fatalf("docs/lease-package.md's poller: %d of %d claimed, %s", r.claimed, fenceJobs, r.summary())
	}
	var epoch int64
	if err := f.admin.QueryRow(context.Background(), "SELECT epoch FROM leasectl.term WHERE key = 1840000001").Scan(&epoch); err != nil || epoch < 1 {
		t.Errorf("the poller's term: epoch %d, %v; want the term it led in", epoch, err)
	}
}

// fenceJobsDB is a database of its own with a table of jobs, reached
// directly and through the lab's PgBouncer in transaction mode.
type fenceJobsDB struct {
	direct, pooled string
	// password is the programs' PGPASSWORD (the DSNs name the lab's pgpass
	// file, which node-postgres does not read).
	password string
	admin    *pgx.Conn
}

func newFenceJobs(t *testing.T, name string) *fenceJobsDB {
	t.Helper()
	direct := pgtest.Database(t, testLab, name)
	p := testLab.Pooler("transaction")
	if p == nil {
		t.Fatal("the lab has no pooler \"transaction\"")
	}
	password, err := testLab.Password()
	if err != nil {
		t.Fatal(err)
	}
	f := &fenceJobsDB{direct: direct, pooled: testLab.DSN(p.Port, testLab.User, name), password: password, admin: pgtest.Conn(t, direct, "fence-jobs")}
	pgtest.Exec(t, f.admin, "CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL DEFAULT 'new')")
	pgtest.Exec(t, f.admin, "INSERT INTO jobs (id) SELECT generate_series(1, $1::int)", fenceJobs)
	return f
}

// fenceRun is what one run of a program did.
type fenceRun struct {
	claimed  int
	err      error
	sqlstate string
	stderr   string
}

// summary is how the run ended: its exit status and, after a failure, the
// line of stderr that names a SQLSTATE, else its last line.
func (r fenceRun) summary() string {
	if r.err == nil {
		return "exit 0"
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	for _, l := range lines {
		if sqlstateRE.MatchString(l) {
			last = l
			break
		}
	}
	return fmt.Sprintf("%v: %s", r.err, strings.TrimSpace(last))
}

var sqlstateRE = regexp.MustCompile(`SQLSTATE:? ([0-9A-Z]{5})`)

// run sets every job new, runs a copy of cmd with DATABASE_URL dsn and
// LEASECTL_FENCE_TOKEN token (unless empty), and counts the jobs claimed.
func (f *fenceJobsDB) run(t *testing.T, cmd *exec.Cmd, dsn, token string) fenceRun {
	t.Helper()
	ctx := context.Background()
	pgtest.Exec(t, f.admin, "UPDATE jobs SET state = 'new'")
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(runCtx, cmd.Path, cmd.Args[1:]...)
	c.Dir = cmd.Dir
	c.Env = cmd.Environ()
	c.Env = append(c.Env, "DATABASE_URL="+dsn, "PGPASSWORD="+f.password)
	if token != "" {
		c.Env = append(c.Env, "LEASECTL_FENCE_TOKEN="+token)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	r := fenceRun{err: c.Run(), stderr: stderr.String()}
	if m := sqlstateRE.FindStringSubmatch(r.stderr); m != nil {
		r.sqlstate = m[1]
	}
	if err := f.admin.QueryRow(ctx, "SELECT count(*) FROM jobs WHERE state = 'claimed'").Scan(&r.claimed); err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fenceJobsDB) mustClaimAll(t *testing.T, cmd *exec.Cmd, dsn, token, what string) {
	t.Helper()
	r := f.run(t, cmd, dsn, token)
	if r.err != nil || r.claimed != fenceJobs {
		t.Errorf("%s with the current term's token: %d of %d jobs claimed, want all: %s", what, r.claimed, fenceJobs, r.summary())
		return
	}
	t.Logf("%s with the current term's token: %d of %d claimed, %s", what, r.claimed, fenceJobs, r.summary())
}

func (f *fenceJobsDB) mustBeRefused(t *testing.T, cmd *exec.Cmd, dsn, token string) {
	t.Helper()
	r := f.run(t, cmd, dsn, token)
	if r.err == nil || r.sqlstate != "LF001" || r.claimed != 0 {
		t.Errorf("with the token of a term that has ended: %d jobs claimed, SQLSTATE %q, want none and LF001: %s", r.claimed, r.sqlstate, r.summary())
		return
	}
	t.Logf("with the token of a term that has ended: %d claimed, %s", r.claimed, r.summary())
}

// poolerPreparedStatements is the transaction pooler's
// max_prepared_statements (PgBouncer 1.21 and later): above 0 it keeps
// protocol-level prepared statements itself. 0 when it has no such setting.
func (f *fenceJobsDB) poolerPreparedStatements(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	p := testLab.Pooler("transaction")
	cfg, err := pgx.ParseConfig(testLab.DSN(p.Port, testLab.User, "pgbouncer"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // the admin console knows no other
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("PgBouncer's admin console: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) >= 2 && fmt.Sprint(v[0]) == "max_prepared_statements" {
			fmt.Sscan(fmt.Sprint(v[1]), &n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeProgram writes a program's text to a file of its own directory.
func writeProgram(t *testing.T, name, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// goBuild builds the Go program in file within this module, as a
// developer's program that imports it would be built, and returns the binary.
func goBuild(t *testing.T, file string) string {
	t.Helper()
	goTool := runtimes.Need(t, "go", "https://go.dev/dl/")
	bin := strings.TrimSuffix(file, ".go")
	cmd := exec.Command(goTool, "build", "-o", bin, file)
	cmd.Dir = ".." // the module's root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", filepath.Base(file), err, out)
	}
	return bin
}

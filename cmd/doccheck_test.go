package cmd

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/doccheck"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestDocExamples runs every `$ leasectl` line of README.md and docs/ in the
// scenario its block names (<!-- doccheck: NAME --> on the line before the
// fence), against this package's lab, and compares what it prints with what
// the page shows, after doccheck.Normalize has put pids, addresses,
// durations, times and the server's version in placeholders on both sides.
// A block with no marker fails; one that cannot be reproduced says why in
// <!-- doccheck: skip REASON -->.
func TestDocExamples(t *testing.T) {
	examples, problems, err := doccheck.Examples("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	ran := 0
	for _, ex := range examples {
		if ex.Skip != "" {
			continue
		}
		scenario, ok := docScenarios[ex.Scenario]
		if !ok {
			t.Errorf("%s: no doccheck scenario %q in cmd/doccheck_test.go", ex.Where(), ex.Scenario)
			continue
		}
		ran++
		t.Run(ex.Where(), func(t *testing.T) {
			d := newDocLab(t)
			scenario(t, d)
			for _, c := range ex.Commands {
				page := strings.Join(c.Output, "\n")
				real := d.run(t, c)
				if diff := doccheck.Compare(c.Output, strings.Split(real, "\n")); diff != "" {
					t.Errorf("%s:%d: $ %s\nprints what the page does not show (- page, + real, after placeholders):\n%s\npage:\n%s\nreal:\n%s",
						ex.File, c.Line, c.Text, diff, page, real)
				}
			}
		})
	}
	if ran < 5 {
		t.Errorf("only %d examples ran: is the parser blind?", ran)
	}
}

// docLab is one example's world: a fresh database app on the lab's primary
// (what the pages show), a keys file, and the environment the page's
// commands see.
type docLab struct {
	l    *lab.Lab
	dir  string
	dsn  string // database app, as the lab's superuser
	keys string
	env  map[string]string
	tty  bool
}

// The roles of the pages' keys.yaml.
const (
	docPoller     = 1840000001
	docScheduler  = 1840000002
	docReconciler = 1840000003
)

func newDocLab(t *testing.T) *docLab {
	t.Helper()
	l := needLab(t)
	d := &docLab{l: l, dir: t.TempDir(), dsn: pgtest.Database(t, l, "app")}
	d.writeKeys(t, "poller", "scheduler", "reconciler")
	d.env = map[string]string{"LEASECTL_DSN": d.dsn, "LEASECTL_KEYS": d.keys, "NO_COLOR": "1", "COLUMNS": "80"}
	return d
}

// writeKeys makes keys.yaml the pages' roles, or some of them.
func (d *docLab) writeKeys(t *testing.T, roles ...string) {
	t.Helper()
	keys := map[string]int{"poller": docPoller, "scheduler": docScheduler, "reconciler": docReconciler}
	var b strings.Builder
	b.WriteString("roles:\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "  %s: %d\n", r, keys[r])
	}
	d.keys = filepath.Join(d.dir, "keys.yaml")
	if err := os.WriteFile(d.keys, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// as is a DSN for database db as user (a login of pgtest.Login).
func (d *docLab) as(user, db string) string { return d.l.DSN(d.l.Primary.Port, user, db) }

// worker opens a session named app on database app as role app, the
// pages' workers.
func (d *docLab) worker(t *testing.T, app string) *pgx.Conn {
	t.Helper()
	return pgtest.Conn(t, d.as("app", "app"), app)
}

// termRecord creates the term record (schema leasectl) in database app,
// as `leasectl fence init` does.
func (d *docLab) termRecord(t *testing.T) {
	t.Helper()
	if res := runCLI(t, nil, "--dsn", d.dsn, "fence", "init"); res.Code != ExitOK {
		t.Fatalf("fence init: exit %d: %s", res.Code, res.Stderr)
	}
}

// appRole creates the login role app the pages' workers run as.
func (d *docLab) appRole(t *testing.T) { pgtest.Login(t, d.l, "app", "doccheck-app-pw") }

var (
	pageDSN  = regexp.MustCompile(`postgres://([A-Za-z0-9_]+)@127\.0\.0\.1:\d+/([A-Za-z0-9_]+)`)
	shellVar = regexp.MustCompile(`\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)
)

// run runs one command line of a page: leasectl in this process (on a
// terminal when the scenario says so, the answer of a [y/N] prompt the
// page shows typed in and echoed), or head, and returns what it printed,
// stdout and stderr as they interleave. A DSN the page spells out with a
// loopback port is the lab's, for the same user and database.
func (d *docLab) run(t *testing.T, c doccheck.Command) string {
	t.Helper()
	line := pageDSN.ReplaceAllStringFunc(c.Text, func(s string) string {
		m := pageDSN.FindStringSubmatch(s)
		return d.as(m[1], m[2])
	})
	line = shellVar.ReplaceAllStringFunc(line, func(s string) string {
		m := shellVar.FindStringSubmatch(s)
		v, ok := d.env[m[1]+m[2]]
		if !ok {
			t.Fatalf("%d: $ %s: the scenario sets no %s", c.Line, c.Text, m[1]+m[2])
		}
		return v
	})
	args, err := shellWords(line)
	if err != nil {
		t.Fatalf("%d: $ %s: %v", c.Line, c.Text, err)
	}
	redirect := ""
	if n := len(args); n >= 2 && args[n-2] == ">" {
		redirect, args = filepath.Join(d.dir, args[n-1]), args[:n-2]
	}
	switch {
	case len(args) == 3 && args[0] == "head" && strings.HasPrefix(args[1], "-"):
		n, _ := strconv.Atoi(args[1][1:])
		data, err := os.ReadFile(filepath.Join(d.dir, args[2]))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(data), "\n")
		return strings.Join(lines[:min(n, len(lines))], "")
	case len(args) == 0 || args[0] != "leasectl":
		t.Fatalf("%d: $ %s: the doc check runs leasectl and head only", c.Line, c.Text)
	}
	stdin := ""
	prompt := strings.Contains(strings.Join(c.Output, "\n"), "[y/N] y")
	if prompt {
		stdin = "y\n"
	}
	var out bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &out, InTTY: d.tty, OutTTY: d.tty, ErrTTY: d.tty},
		Getenv: func(k string) string { return d.env[k] },
	}
	if redirect != "" {
		app.IO.Out = &bytes.Buffer{}
		app.IO.OutTTY = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	Run(ctx, app, args[1:])
	if redirect != "" {
		if err := os.MkdirAll(filepath.Dir(redirect), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(redirect, app.IO.Out.(*bytes.Buffer).Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := strings.TrimSuffix(out.String(), "\n")
	if prompt {
		s = strings.Replace(s, "[y/N] ", "[y/N] y\n", 1)
	}
	return s
}

// shellWords splits a command line as sh does, for the quoting the pages
// use: blanks, '…' and "…".
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c", quote)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// docScenarios set up, on a fresh docLab, the state a page's example shows.
var docScenarios = map[string]func(t *testing.T, d *docLab){
	// Nothing: the command fails before it connects.
	"no-database": func(t *testing.T, d *docLab) {},

	// Database app2, without the term record.
	"fence-init-app2": func(t *testing.T, d *docLab) {
		d.dsn = pgtest.Database(t, d.l, "app2")
		d.env["LEASECTL_DSN"] = d.dsn
	},

	// Role worker, which may not create schemas in database app2.
	"fence-init-no-create": func(t *testing.T, d *docLab) {
		pgtest.Database(t, d.l, "app2")
		pgtest.Login(t, d.l, "worker", "doccheck-worker-pw")
	},

	// The owner has made the term record in database app; role worker has
	// no grant on it.
	"fence-init-no-grant": func(t *testing.T, d *docLab) {
		pgtest.Login(t, d.l, "worker", "doccheck-worker-pw")
		if res := runCLI(t, nil, "--dsn", d.dsn, "fence", "init"); res.Code != ExitOK {
			t.Fatalf("fence init: exit %d: %s", res.Code, res.Stderr)
		}
	},

	// The lab's environment (`eval "$(leasectl lab env)"`).
	"lab-env": func(t *testing.T, d *docLab) {
		d.env["LEASECTL_LAB_TX_DSN"] = d.l.PoolerDSN("transaction")
	},

	// poller held by worker poller-7f9c, which poller-b21e waits for;
	// scheduler held by scheduler-0a4d, idle for longer than --stale;
	// reconciler free.
	"who-leader-and-waiter": func(t *testing.T, d *docLab) {
		d.appRole(t)
		sched := d.worker(t, "scheduler-0a4d")
		hold(t, sched, docScheduler)
		idleFor(t, d, pgtest.PID(t, sched), 3*time.Second)
		hold(t, d.worker(t, "poller-7f9c"), docPoller)
		waitFor(t, d, d.worker(t, "poller-b21e"), docPoller)
	},
}

// waitFor starts conn waiting for key and returns once pg_locks shows it
// queued.
func waitFor(t *testing.T, d *docLab, conn *pgx.Conn, key int64) {
	t.Helper()
	pid := pgtest.PID(t, conn)
	pgtest.Wait(t, conn, key)
	obs := pgtest.Conn(t, d.dsn, "doccheck-observer")
	for deadline := time.Now().Add(hang); ; {
		var n int
		if err := obs.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND NOT granted", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d does not wait for key %d", pid, key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idleFor returns once the server has seen session pid idle for longer
// than d.
func idleFor(t *testing.T, dl *docLab, pid int32, d time.Duration) {
	t.Helper()
	obs := pgtest.Conn(t, dl.dsn, "doccheck-observer")
	for deadline := time.Now().Add(hang + d); ; {
		var idle float64
		if err := obs.QueryRow(context.Background(),
			"SELECT extract(epoch FROM clock_timestamp() - state_change) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&idle); err != nil {
			t.Fatal(err)
		}
		if idle > d.Seconds() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d is not idle for %s", pid, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// heldBy returns once the session named app holds key (granted) or, with
// waiting, queues for it.
func heldBy(t *testing.T, d *docLab, key int64, app string, waiting bool) {
	t.Helper()
	obs := pgtest.Conn(t, d.dsn, "doccheck-observer")
	for deadline := time.Now().Add(hang); ; {
		var n int
		if err := obs.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND ((l.classid::int8 << 32) | l.objid::int8) = $1
			AND a.application_name = $2 AND l.granted = $3`, key, app, !waiting).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not hold key %d (waiting: %v)", app, key, waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// named is d's DSN with application_name app.
func (d *docLab) named(app string) string { return d.dsn + "&application_name=" + url.PathEscape(app) }

// runEnvOf is the environment of a `leasectl run` of d named app.
func (d *docLab) runEnvOf(app string) map[string]string {
	return map[string]string{"LEASECTL_DSN": d.named(app), "LEASECTL_KEYS": d.keys}
}

func init() {
	// A leasectl run poller@vm1 leads poller, one poller@vm2 stands by;
	// the leader's program takes 300 ms to stop. On a terminal wide enough
	// for the prompt's line.
	docScenarios["failover-graceful"] = func(t *testing.T, d *docLab) {
		d.tty = true
		d.env["COLUMNS"] = "250"
		f := newRunFixture(t, "poller", docPoller)
		args := append([]string{"--role", "poller", "--retry-interval", "200ms", "-o", "json", "--"}, f.witnessArgs("-stop-delay", "300ms")...)
		startRun(t, d.runEnvOf("leasectl run poller@vm1"), args...)
		f.next(leasetest.Start)
		second := startRun(t, d.runEnvOf("leasectl run poller@vm2"), args...)
		second.stderr.WaitFor(t, `"state":"standing_by"`, 1, hang)
	}

	// Workers of their own: poller-7f9c leads poller, poller-b21e waits;
	// no one leads scheduler. The lab's PgBouncer in transaction mode
	// ($LEASECTL_LAB_TX_DSN, as lab env exports it). The database
	// has the term record, which changes nothing for such workers.
	docScenarios["verify-drill"] = func(t *testing.T, d *docLab) {
		d.writeKeys(t, "poller", "scheduler")
		d.env["LEASECTL_KEYS"] = d.keys
		d.env["LEASECTL_LAB_TX_DSN"] = d.l.PoolerDSN("transaction")
		d.appRole(t)
		d.termRecord(t)
		hold(t, d.worker(t, "poller-7f9c"), docPoller)
		waitFor(t, d, d.worker(t, "poller-b21e"), docPoller)
	}

	// The term record exists; workers of their own lead poller
	// (poller-7f9c, with poller-b21e queued) and a leasectl run
	// (reconciler@vm1) leads reconciler in its first term; scheduler is
	// free.
	docScenarios["who-own-elector-with-terms"] = func(t *testing.T, d *docLab) {
		d.appRole(t)
		d.termRecord(t)
		hold(t, d.worker(t, "poller-7f9c"), docPoller)
		waitFor(t, d, d.worker(t, "poller-b21e"), docPoller)
		f := newRunFixture(t, "reconciler", docReconciler)
		startRun(t, d.runEnvOf("leasectl run reconciler@vm1"), append([]string{"--role", "reconciler", "--"}, f.witnessArgs()...)...)
		f.next(leasetest.Start)
	}

	// Five terms of poller, as the page tells: a run that finishes; a
	// leader asked to step down; its successor SIGKILLed; the next one's
	// lease session terminated, after which it leads again, and is stopped.
	docScenarios["history-lab-run"] = func(t *testing.T, d *docLab) {
		const app = "leasectl run poller@vm"
		f := newRunFixture(t, "poller", docPoller)
		first := startRun(t, d.runEnvOf(app), "--role", "poller", "--", "sleep", "2")
		select {
		case <-first.done:
		case <-time.After(hang):
			t.Fatal("leasectl run -- sleep 2 did not end")
		}
		a := f.startReplica(d.named(app))
		f.next(leasetest.Start)
		b := f.startReplica(d.named(app))
		b.log.WaitFor(t, `"state":"standing_by"`, 1, hang)
		if res := runCLI(t, d.env, "failover", "poller", "--yes"); res.Code != ExitOK {
			t.Fatalf("failover: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		if ev := f.next(leasetest.Start); ev.PPID != b.cmd.Process.Pid {
			t.Fatalf("pid %d leads after the step-down, not the stand-by %d", ev.PPID, b.cmd.Process.Pid)
		}
		a.log.WaitFor(t, `"state":"standing_by"`, 1, hang)
		_ = b.cmd.Process.Kill()
		<-b.exited
		ev := f.next(leasetest.Start)
		pid, err := strconv.ParseUint(ev.BackendPID, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		if err := leasetest.Terminate(context.Background(), pgtest.Conn(t, d.dsn, ""), docPoller, uint32(pid)); err != nil {
			t.Fatal(err)
		}
		f.next(leasetest.Start)
		if code := a.stop(t); code != 0 {
			t.Fatalf("leasectl run exit %d:\n%s", code, a.log)
		}
	}

	// Two group replicas (app@vm1, app@vm2) of poller and scheduler, each
	// leading one and standing by for the other, and a single-role run
	// (poller@vm3) queued for poller.
	// They run as role app, which may not create the term record: the
	// page shows them without terms.
	groupRuns := func(t *testing.T, d *docLab) {
		d.appRole(t)
		asApp := *d
		asApp.dsn = d.as("app", "app")
		procfile := filepath.Join(d.dir, "Procfile")
		if err := os.WriteFile(procfile, []byte("poller: sleep 600\nscheduler: sleep 600\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		group := []string{"--procfile", procfile, "--retry-interval", "100ms", "-o", "json"}
		startRun(t, asApp.runEnvOf("leasectl run app@vm2"), group...)
		heldBy(t, d, docPoller, "leasectl run app@vm2", false)
		heldBy(t, d, docScheduler, "leasectl run app@vm2", false)
		vm1 := startRun(t, asApp.runEnvOf("leasectl run app@vm1"), group...)
		vm1.stderr.WaitFor(t, `"msg":"standing by"`, 1, hang)
		if res := runCLI(t, d.env, "failover", "poller", "--yes"); res.Code != ExitOK {
			t.Fatalf("failover: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		heldBy(t, d, docPoller, "leasectl run app@vm1", false)
		startRun(t, asApp.runEnvOf("leasectl run poller@vm3"), "--role", "poller", "--retry-interval", "100ms", "--", "sleep", "600")
		heldBy(t, d, docPoller, "leasectl run poller@vm3", true)
	}
	docScenarios["who-group-runs"] = groupRuns
}

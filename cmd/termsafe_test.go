package cmd

// Terminal safety: names that the server hands back (roles, databases,
// application names) and the errors that quote them reach an operator's
// terminal. Anyone who may create a role or a database, or name a
// connection, chooses those bytes; none of them may act on the terminal.

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

const (
	// evilRole holds ESC sequences (set the window title, clear the
	// screen), BEL, CR, tab, another C0 control, DEL, two C1 controls
	// (NEL, and CSI, which some terminals obey on its own) and a
	// right-to-left override, which would show "gnp" as "png".
	evilRole = "evil\x1b]0;owned\a\x1b[2J\r\t\x01\x7f\u0085\u009b\u202egnp"
	// evilRoleShown is how it must be shown: every one of them escaped,
	// written out by hand.
	evilRoleShown = `evil\x1b]0;owned\a\x1b[2J\r\t\x01\x7f\u0085\u009b\u202egnp`
	evilDB        = "db\x1b[31m\u202e\u200b"
	evilDBShown   = `db\x1b[31m\u202e\u200b`
	evilPW        = "Evil-Pw-3Jq"

	evilPollerKey = 1840900001
)

// rawControl matches what may not reach a terminal raw: C0 controls but the
// line feed, DEL, C1 controls, and the bidi and other format characters
// that termSafe escapes.
var rawControl = regexp.MustCompile("[\x00-\x09\x0b-\x1f\x7f\u0080-\u009f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ufeff]")

// sgrOnly matches the only escape sequences leasectl writes itself: SGR
// styles.
var sgrOnly = regexp.MustCompile("\x1b\\[[0-9;]*m")

// noRawControls fails when out holds a control character, leasectl's own
// styles (with colour on) aside.
func noRawControls(t *testing.T, what, out string) {
	t.Helper()
	if loc := rawControl.FindStringIndex(sgrOnly.ReplaceAllString(out, "")); loc != nil {
		t.Errorf("%s: a raw control character reaches the terminal (at byte %d):\n%q", what, loc[0], out)
	}
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not UTF-8:\n%q", what, out)
	}
}

// evilLogin creates evilRole (a login that may read all sessions and end
// backends) and returns a DSN that connects as it, with its password, to
// database db.
func evilLogin(t *testing.T, db string) string {
	t.Helper()
	admin := pgtest.Conn(t, needLab(t).DirectDSN(), "termsafe-admin")
	ident := pgx.Identifier{evilRole}.Sanitize()
	pgtest.Exec(t, admin, "DROP ROLE IF EXISTS "+ident)
	pgtest.Exec(t, admin, "CREATE ROLE "+ident+" LOGIN PASSWORD '"+evilPW+"' IN ROLE pg_read_all_stats, pg_signal_backend")
	t.Cleanup(func() {
		// Its sessions are closed by then (cleanups run last first).
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident)
	})
	return evilDSN(t, evilPW, db)
}

func evilDSN(t testing.TB, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(evilRole, password), Host: "127.0.0.1:" + strconv.Itoa(needLab(t).Primary.Port),
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// runSized runs leasectl in-process like runCLIWith, with stdout width
// columns wide (0: not fitted) and no terminal unless tty.
func runSized(t *testing.T, env map[string]string, tty bool, width int, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut, InTTY: tty, OutTTY: tty, ErrTTY: tty, Width: width},
		Getenv: func(k string) string { return env[k] },
	}
	code := Run(context.Background(), app, args)
	return cliResult{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

func TestTermSafeEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"poller-7f9c":              "poller-7f9c",
		"réconciliateur ✓ 名前":      "réconciliateur ✓ 名前",
		`C:\app \x1b`:              `C:\app \x1b`, // backslashes stay as they are
		evilRole:                   evilRoleShown,
		evilDB:                     evilDBShown,
		"a\nb":                     `a\nb`,
		"\x00\x08\x0b\x0c\x1f":     `\x00\b\v\f\x1f`,
		"\u2028\u2029\ufeff\u00ad": `\u2028\u2029\ufeff\u00ad`,
		"bad \x9b[2J utf-8 \xff":   `bad \x9b[2J utf-8 \xff`,
		"\u2066isolate\u2069":      `\u2066isolate\u2069`,
		"ok \ufffd replacement":    "ok \ufffd replacement",
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"one\x1b[2J\ntwo\r":            "one\\x1b[2J\ntwo\\r",
		"keys.yaml\n::error::injected": "keys.yaml\\n::error::injected",
		"a\n  \t::add-mask::x\nb\n:c:": "a\\n  \\t::add-mask::x\nb\n:c:",
		"é\n::warning::x":              "é\\n::warning::x",
	} {
		if got := termSafeLines(in); got != want {
			t.Errorf("termSafeLines(%q) = %q, want %q: line feeds kept, but none that starts a workflow command", in, got, want)
		}
	}
}

// TestTableEscapesBeforeItPaints: a cell's control characters are escaped,
// and only the table's own styles are escape codes.
func TestTableEscapesBeforeItPaints(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, true)
	var out bytes.Buffer
	rows := [][]string{{"poller", "HELD", evilRole}, {"\x1b[8mhidden", "waiting", "x"}}
	opt := tableOptions{Paint: map[string]func(string) string{"STATE": statePainter(st)}}
	if err := writeTable(&out, []string{"ROLE", "STATE", "USER"}, rows, opt); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "table", out.String())
	for _, want := range []string{evilRoleShown, `\x1b[8mhidden`, st.OK.Render("HELD"), st.Warn.Render("waiting")} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%q", want, out.String())
		}
	}
}

func TestWrapText(t *testing.T) {
	text := "the server sees a TCP client, and a partitioned or dead leader can keep its lock for ≈2h11m (tcp_keepalives_idle=2h0m0s, interval=1m15s, count=9, tcp_user_timeout=0s)"
	for _, width := range []int{20, 33, 55, 80} {
		lines := wrapText(text, width)
		if strings.ReplaceAll(strings.Join(lines, ""), " ", "") != strings.ReplaceAll(text, " ", "") {
			t.Errorf("width %d: words lost or changed: %q", width, lines)
		}
		for _, l := range lines {
			if textWidth(l) > width {
				t.Errorf("width %d: line of %d columns: %q", width, textWidth(l), l)
			}
		}
	}
	if got := wrapText("abcdefghij", 4); strings.Join(got, "|") != "abcd|efgh|ij" {
		t.Errorf("a word longer than the width is cut: %q", got)
	}
}

// TestWidthFromTerminalOrColumns: $COLUMNS sets the width on a terminal;
// output that is not a terminal is never fitted, whatever $COLUMNS says.
func TestWidthFromTerminalOrColumns(t *testing.T) {
	for _, tc := range []struct {
		tty     bool
		width   int
		columns string
		want    int
	}{
		{true, 132, "", 132},
		{true, 132, "100", 100},
		{true, 0, "", defaultTermWidth},
		{true, 132, "wide", 132},
		{false, 0, "100", 0},
		{false, 0, "", 0},
	} {
		app := &App{IO: &IOStreams{OutTTY: tc.tty, Width: tc.width}, Getenv: func(k string) string {
			if k == "COLUMNS" {
				return tc.columns
			}
			return ""
		}}
		if got := app.Width(); got != tc.want {
			t.Errorf("tty %v, terminal width %d, COLUMNS %q: width %d, want %d", tc.tty, tc.width, tc.columns, got, tc.want)
		}
	}
}

// TestNamesCannotControlTheTerminal: a role and a database whose names hold
// control sequences, a session of that role holding a key, and every text
// output that shows them: who (narrow, wide, piped, on a terminal with
// colour), failover (table, prompt and messages), verify, probe, and the
// errors that quote them on stderr. Nothing raw reaches the terminal, and
// the names are shown escaped.
func TestNamesCannotControlTheTerminal(t *testing.T) {
	withoutTermRecord(t) // plain holders and stand-bys, as before the term record
	pgtest.Database(t, needLab(t), evilDB)
	dsn := evilLogin(t, "postgres")
	keysPath := writeFile(t, "keys.yaml", fmt.Sprintf("roles:\n  poller: %d\n", evilPollerKey))
	leaderConn := pgtest.Conn(t, dsn, "app\x1b]2;x\a\u202e")
	hold(t, leaderConn, evilPollerKey)
	leaderPID := pidOf(t, leaderConn)

	type run struct {
		name  string
		tty   bool
		width int
		stdin string
		args  []string
		code  int
		shows []string // on stdout and stderr, together
	}
	direct := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath}
	asEvil := []string{"--dsn", dsn, "--keys", keysPath}
	runs := []run{
		{"who, piped", false, 0, "", append(direct, "who"), ExitOK, []string{evilRoleShown, leaderPID}},
		{"who -o wide, 80 columns", false, 80, "", append(direct, "who", "-o", "wide"), ExitOK, []string{evilRoleShown, leaderPID}},
		{"who, 80 columns", false, 80, "", append(direct, "who"), ExitOK, []string{leaderPID}},
		{"who on a terminal", true, 100, "", append(direct, "who", "-o", "wide"), ExitOK, []string{evilRoleShown}},
		{"who as the role", false, 0, "", append(asEvil, "who"), ExitOK, []string{"as " + evilRoleShown}},
		{"who in the database", false, 0, "", append([]string{"--dsn", evilDSN(t, evilPW, evilDB), "--keys", keysPath}, "who"), ExitOK,
			[]string{"database " + evilDBShown + " · as " + evilRoleShown}},
		{"verify", false, 80, "", append(asEvil, "verify"), ExitOK, []string{"as " + evilRoleShown, "pid " + leaderPID}},
		{"probe", false, 0, "", append(asEvil, "probe"), ExitOK, []string{"as " + evilRoleShown}},
		{"probe on a terminal", true, 200, "", append(asEvil, "probe"), ExitOK, []string{"as " + evilRoleShown}},
		{"probe on a narrow terminal", true, 60, "", append(asEvil, "probe"), ExitOK, []string{`evil\x1b]0;owned\a`}}, // the name is cut to fit
		{"wrong password", false, 0, "", append([]string{"--dsn", evilDSN(t, "wrong", "postgres"), "--keys", keysPath}, "who"), ExitUnavailable,
			[]string{evilRoleShown}},
		{"no such database", false, 0, "", append([]string{"--dsn", evilDSN(t, evilPW, evilDB+"-gone"), "--keys", keysPath}, "who"), ExitUnavailable,
			[]string{evilDBShown + "-gone"}},
		{"failover, not confirmed", true, 80, "n\n", append(direct, "failover", "poller"), ExitCheckFailed, []string{"Ask pid " + leaderPID, "[y/N]"}},
	}
	for _, r := range runs {
		res := runSized(t, nil, r.tty, r.width, r.stdin, r.args...)
		all := res.Stdout + res.Stderr
		if res.Code != r.code {
			t.Errorf("%s: exit %d, want %d\n%s", r.name, res.Code, r.code, all)
		}
		noRawControls(t, r.name, all)
		for _, s := range r.shows {
			if !strings.Contains(all, s) {
				t.Errorf("%s: output does not show %q:\n%s", r.name, s, all)
			}
		}
	}

	// failover: a stand-by, a session of the same role, takes over; the
	// table and every message are escaped. Twice: then the stand-by is
	// the holder, and a new one takes over from it.
	holderPID := leaderPID
	for _, width := range []int{0, 80} {
		standByConn := pgtest.Conn(t, dsn, "standby\x1b[2J\u202e")
		standByPID := pidOf(t, standByConn)
		pgtest.StandBy(t, standByConn, evilPollerKey, 20*time.Millisecond)
		res := runSized(t, nil, false, width, "", append(direct, "failover", "poller", "--yes", "--force", "--wait", "30s")...)
		if res.Code != ExitOK {
			t.Fatalf("failover, width %d: exit %d\n%s%s", width, res.Code, res.Stdout, res.Stderr)
		}
		noRawControls(t, "failover", res.Stdout+res.Stderr)
		if width == 0 {
			row(t, res.Stdout, "poller", strconv.Itoa(evilPollerKey), "HELD", holderPID, evilRoleShown)
		}
		for _, want := range []string{"terminated pid " + holderPID, "pid " + standByPID + " took over poller"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("failover, width %d, does not say %q:\n%s", width, want, res.Stdout)
			}
		}
		holderPID = standByPID
	}
}

// TestAnnotationsCannotBeInjected: in a CI log a line that starts with "::"
// is a workflow command. In the github-actions format a line feed in a file
// name or a message is encoded, and control characters are escaped: every
// line is one annotation of the file. In the text format no line of an
// error starts with "::" either.
func TestAnnotationsCannotBeInjected(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "keys\n::error::injected\x1b[2J.yaml")
	bad := writeFile(t, "keys.yaml", "roles:\n  \"evil\\n::error::injected\\e[2J\": 1\n")
	for _, args := range [][]string{
		{"--keys", missing, "keys", "lint", "--format", "github-actions"},
		{"--keys", bad, "keys", "lint", "--format", "github-actions"},
		{"--keys", missing, "keys", "lint"},
		{"--keys", bad, "keys", "lint"},
	} {
		res := runCLI(t, nil, args...)
		if res.Code != ExitUsage {
			t.Errorf("%q: exit %d, want 2\n%s%s", args, res.Code, res.Stdout, res.Stderr)
		}
		all := res.Stdout + res.Stderr
		noRawControls(t, fmt.Sprintf("%q", args), all)
		for _, l := range strings.Split(all, "\n") {
			if (slices.Contains(args, "github-actions") && strings.HasPrefix(l, "::") && !strings.HasPrefix(l, "::error file=")) ||
				strings.HasPrefix(strings.TrimSpace(l), "::error::injected") {
				t.Errorf("%q: an injected workflow command:\n%s", args, all)
			}
		}
	}
}

// Keys of TestOutputFitsTheWidth, used by no other test.
const (
	widthPollerKey    = 1840900011
	widthSchedulerKey = 1840900012
)

// linesWithin fails when a line of out is wider than width columns.
func linesWithin(t *testing.T, what, out string, width int) {
	t.Helper()
	for _, l := range strings.Split(sgrOnly.ReplaceAllString(out, ""), "\n") {
		if w := textWidth(l); w > width {
			t.Errorf("%s: a line of %d columns, over %d:\n%s\n---\n%s", what, w, width, l, out)
		}
	}
}

// header returns the line of out that starts with ROLE or CHECK, split into
// its column names (two blanks or more apart).
func tableHeader(t *testing.T, out string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ROLE ") || strings.HasPrefix(l, "CHECK ") {
			return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		}
	}
	t.Fatalf("no table header in:\n%s", out)
	return nil
}

// TestOutputFitsTheWidth: on a terminal (a width), who's default columns,
// failover, verify and probe fit in 80 columns for typical names, details
// wrapping under their check; -o wide has every column; piped output (no
// width) has every column and is never wrapped.
func TestOutputFitsTheWidth(t *testing.T) {
	withoutTermRecord(t) // plain holders and stand-bys, as before the term record
	keysPath := writeFile(t, "keys.yaml", fmt.Sprintf("roles:\n  poller: %d\n  scheduler: %d\n  reconciler: 1840900013\n", widthPollerKey, widthSchedulerKey))
	leaderConn := pgtest.Conn(t, needLab(t).DirectDSN(), "poller-7f9c")
	hold(t, leaderConn, widthPollerKey)
	waiter := pgtest.Conn(t, needLab(t).DirectDSN(), "poller-b21e")
	blocked := pgtest.Wait(t, waiter, widthPollerKey)
	t.Cleanup(func() {
		_, _ = locks.Unlock(context.Background(), leaderConn, widthPollerKey)
		<-blocked
	})
	sched := pgtest.Conn(t, needLab(t).DirectDSN(), "leasectl run scheduler@vm1")
	hold(t, sched, widthSchedulerKey)
	// An application name as long as the server keeps (63 bytes): narrow
	// who leaves PID and LAST ACTIVITY out for it and wraps it under
	// itself, never cut (it names the replica); -o wide and piped output
	// show it on one line.
	const longApp = "reconciler-batch-worker-eu-west-1-production-blue-7f9c5d8b6-x2k"
	recon := pgtest.Conn(t, needLab(t).DirectDSN(), longApp)
	hold(t, recon, 1840900013)
	global := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath}

	var narrow cliResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		narrow = runSized(t, nil, false, 80, "", append(global, "who")...)
		if _, ok := findRow(narrow.Stdout, "poller", "waiting"); ok || time.Now().After(deadline) {
			break
		}
	}
	if narrow.Code != ExitOK {
		t.Fatalf("who: exit %d\n%s%s", narrow.Code, narrow.Stdout, narrow.Stderr)
	}
	linesWithin(t, "who", narrow.Stdout, 80)
	if h, want := tableHeader(t, narrow.Stdout), []string{"ROLE", "STATE", "APPLICATION"}; !slices.Equal(h, want) {
		t.Errorf("who on a terminal: columns %q, want %q", h, want)
	}
	row(t, narrow.Stdout, "poller", "HELD,", "1", "waiting", "poller-7f9c")
	row(t, narrow.Stdout, "scheduler", "HELD", "leasectl", "run", "scheduler@vm1")
	if r, ok := findRow(narrow.Stdout, "reconciler", "HELD"); !ok || !strings.Contains(r, longApp[:40]) || strings.Contains(r, "…") ||
		!strings.Contains(regexp.MustCompile(`\n +`).ReplaceAllString(narrow.Stdout, ""), longApp) {
		t.Errorf("narrow who: the long application name is cut, or does not wrap under itself: %q\n%s", r, narrow.Stdout)
	}
	// Typical names fit with every column.
	short := runSized(t, nil, false, 80, "", append(global, "who", "poller", "scheduler")...)
	linesWithin(t, "who poller scheduler", short.Stdout, 80)
	if h := tableHeader(t, short.Stdout); !slices.Equal(h, sessionNarrowColumns) {
		t.Errorf("who poller scheduler on a terminal: columns %q, want %q\n%s", h, sessionNarrowColumns, short.Stdout)
	}
	row(t, short.Stdout, "poller", "HELD,", "1", "waiting", pidOf(t, leaderConn), "poller-7f9c", "idle")
	row(t, short.Stdout, "scheduler", "HELD", pidOf(t, sched), "leasectl", "run", "scheduler@vm1")

	for _, tc := range []struct {
		name  string
		width int
		args  []string
	}{
		{"who -o wide", 80, []string{"who", "-o", "wide"}},
		{"who, piped", 0, []string{"who"}},
		{"who -o wide, piped", 0, []string{"who", "-o", "wide"}},
	} {
		res := runSized(t, nil, false, tc.width, "", append(global, tc.args...)...)
		if h := tableHeader(t, res.Stdout); !slices.Equal(h, sessionColumns) {
			t.Errorf("%s: columns %q, want every column %q", tc.name, h, sessionColumns)
		}
		row(t, res.Stdout, "poller", strconv.Itoa(widthPollerKey), "HELD,", "1", "waiting", pidOf(t, leaderConn), needLab(t).User, "poller-7f9c", "idle")
		row(t, res.Stdout, "reconciler", "HELD", pidOf(t, recon), longApp)
	}
	if piped, wide := runSized(t, nil, false, 0, "", append(global, "who")...), runSized(t, nil, false, 0, "", append(global, "who", "-o", "wide")...); tableHeader(t, piped.Stdout)[0] != "ROLE" ||
		strings.Count(piped.Stdout, "\n") != strings.Count(wide.Stdout, "\n") {
		t.Errorf("piped who and who -o wide differ in shape:\n%s\n---\n%s", piped.Stdout, wide.Stdout)
	}

	// verify and failover at 80 columns.
	ver := runSized(t, nil, false, 80, "", append(global, "verify", "poller", "scheduler")...)
	if ver.Code != ExitOK {
		t.Errorf("verify: exit %d\n%s%s", ver.Code, ver.Stdout, ver.Stderr)
	}
	linesWithin(t, "verify", ver.Stdout, 80)
	if h := tableHeader(t, ver.Stdout); !slices.Equal(h, []string{"CHECK", "ROLE", "RESULT", "DETAIL"}) {
		t.Errorf("verify: columns %q", h)
	}
	stand := pgtest.Conn(t, needLab(t).DirectDSN(), "scheduler-standby")
	pgtest.StandBy(t, stand, widthSchedulerKey, 20*time.Millisecond)
	fo := runSized(t, nil, false, 80, "", append(global, "failover", "scheduler", "--yes", "--force", "--wait", "30s")...)
	if fo.Code != ExitOK || !strings.Contains(fo.Stdout, "took over scheduler") {
		t.Errorf("failover: exit %d\n%s%s", fo.Code, fo.Stdout, fo.Stderr)
	}
	linesWithin(t, "failover", fo.Stdout, 80)

	// probe: refused through transaction pooling, with long details. At
	// 80 columns each detail wraps under its check, at column 25; piped,
	// each check is one line.
	wrapped := runSized(t, nil, false, 80, "", "probe", needLab(t).PoolerDSN("transaction"))
	piped := runSized(t, nil, false, 0, "", "probe", needLab(t).PoolerDSN("transaction"))
	if wrapped.Code != ExitCheckFailed || piped.Code != ExitCheckFailed {
		t.Fatalf("probe through tx: exit %d and %d\n%s%s", wrapped.Code, piped.Code, wrapped.Stdout, piped.Stdout)
	}
	linesWithin(t, "probe", wrapped.Stdout, 80)
	continued := 0
	checks, _, _ := strings.Cut(wrapped.Stdout, "\nREFUSED") // the verdict wraps under itself
	for _, l := range strings.Split(checks, "\n") {
		if strings.HasPrefix(l, "    ") {
			continued++
			if !strings.HasPrefix(l, strings.Repeat(" ", 25)) || l[25] == ' ' {
				t.Errorf("probe: a continuation line not under its detail (column 25): %q", l)
			}
		}
	}
	if continued == 0 {
		t.Errorf("probe at 80 columns wrapped nothing:\n%s", wrapped.Stdout)
	}
	var long bool
	for _, l := range strings.Split(piped.Stdout, "\n") {
		if strings.HasPrefix(l, "    ") {
			t.Errorf("piped probe output is wrapped: %q", l)
		}
		long = long || textWidth(l) > 80
	}
	if !long {
		t.Errorf("piped probe output has no line over 80 columns: is it wrapped?\n%s", piped.Stdout)
	}
	if a, b := strings.Fields(wrapped.Stdout), strings.Fields(piped.Stdout); len(a) != len(b) {
		t.Errorf("wrapping changed the words of the probe's output:\n%s\n---\n%s", wrapped.Stdout, piped.Stdout)
	}
}

// TestNarrowTerminalDropsColumns: at 60 columns, with a waiter, who's
// table fits by leaving out PID and LAST ACTIVITY, and keeps the
// application name, which names the replica, whole (no header or cell is
// broken mid-word); at 100 columns it keeps every column.
func TestNarrowTerminalDropsColumns(t *testing.T) {
	withoutTermRecord(t)
	const key = 1840900031
	keysPath := writeFile(t, "keys.yaml", fmt.Sprintf("roles:\n  poller: %d\n  scheduler: 1840900032\n", key))
	hold(t, pgtest.Conn(t, needLab(t).DirectDSN(), "leasectl run poller@vm1"), key)
	queue(t, "leasectl run poller@vm2", key)
	global := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who"}
	var res cliResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		res = runSized(t, nil, false, 60, "", global...)
		if _, ok := findRow(res.Stdout, "poller", "waiting"); ok || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != ExitOK {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	linesWithin(t, "who at 60 columns", res.Stdout, 60)
	if h := tableHeader(t, res.Stdout); !slices.Equal(h, []string{"ROLE", "STATE", "APPLICATION"}) {
		t.Errorf("columns at 60: %q\n%s", h, res.Stdout)
	}
	if !regexp.MustCompile(`(?m)^poller +waiting +leasectl run poller@vm2$`).MatchString(res.Stdout) {
		t.Errorf("no one-line row of the waiter at 60 columns:\n%s", res.Stdout)
	}
	wide := runSized(t, nil, false, 100, "", global...)
	if h := tableHeader(t, wide.Stdout); !slices.Equal(h, sessionNarrowColumns) {
		t.Errorf("columns at 100: %q\n%s", h, wide.Stdout)
	}
	linesWithin(t, "who at 100 columns", wide.Stdout, 100)
}

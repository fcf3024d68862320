package cmd

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// What a newcomer's first hour ran into, each as the CLI shows it.

// TestEmptyDSNIsAUsageError: every DSN flag of every command (--dsn,
// --pooler-dsn, --lease-dsn, and any --*-dsn to come), and probe's DSN
// argument, given an empty value (an unset environment variable) is a usage
// error that says so, before anything connects: taken as "not given", the
// pooler check was skipped and --dsn "" connected to libpq's default.
func TestEmptyDSNIsAUsageError(t *testing.T) {
	// What each command needs besides the flag to get as far as running.
	needs := map[string][]string{
		"leasectl run":        {"--role", "poller", "--", "true"},
		"leasectl failover":   {"poller"},
		"leasectl history":    {"poller"},
		"leasectl lab revive": {"node1"},
	}
	env := map[string]string{"LEASECTL_DSN": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "LEASECTL_KEYS": whoKeys(t)}
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Name() == "help" || strings.HasPrefix(c.Name(), "__") || c.HasParent() && c.Parent().Name() == "completion" {
			return
		}
		c.Flags().AddFlagSet(c.InheritedFlags())
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "dsn" && !strings.HasSuffix(f.Name, "-dsn") {
				return
			}
			seen[f.Name] = true
			path := strings.Fields(c.CommandPath())[1:]
			for _, form := range [][]string{{"--" + f.Name, ""}, {"--" + f.Name + "="}} {
				args := append(append(append([]string{}, path...), form...), needs[c.CommandPath()]...)
				res := runCLI(t, env, args...)
				want := "error: --" + f.Name + " was given an empty value, likely an unset environment variable (--" + f.Name + ` "$VAR"): give a DSN, or leave --` + f.Name + " out"
				if res.Code != ExitUsage || !strings.HasPrefix(res.Stderr, want) || res.Stdout != "" {
					t.Errorf("leasectl %s: exit %d, want 2 and %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.Code, want, res.Stdout, res.Stderr)
				}
			}
		})
	}
	walk(NewRootCmd(&App{IO: &IOStreams{}, Getenv: func(string) string { return "" }}))
	for _, name := range []string{"dsn", "pooler-dsn", "lease-dsn"} {
		if !seen[name] {
			t.Errorf("no command has --%s: the walk is blind", name)
		}
	}

	// The newcomer's line, and where the lab's pooler comes from.
	res := runCLI(t, env, "verify", "--pooler-dsn", "")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, `in the lab, eval "$(leasectl lab env)" sets $LEASECTL_LAB_TX_DSN`) ||
		!strings.HasSuffix(res.Stderr, "Run 'leasectl verify --help' for usage.\n") {
		t.Errorf("verify --pooler-dsn \"\": exit %d\n%s", res.Code, res.Stderr)
	}
	// probe "$UNSET" would have probed $LEASECTL_DSN instead.
	res = runCLI(t, env, "probe", "")
	if res.Code != ExitUsage || !strings.HasPrefix(res.Stderr, "error: the DSN argument was given an empty value, likely an unset environment variable") {
		t.Errorf("probe \"\": exit %d\n%s", res.Code, res.Stderr)
	}
}

// TestReplicasOnOneHostHaveTheirOwnNames: two leasectl run replicas of one
// role on one host were both "leasectl run poller@HOST" in who --replicas;
// each now ends its name in its process id, who --replicas tells them
// apart (its JSON host is the host alone), and failover --replica HOST#PID
// moves the role off that one.
func TestReplicasOnOneHostHaveTheirOwnNames(t *testing.T) {
	f := newRunFixture(t, "poller", 9200201)
	dsn := needLab(t).DirectDSN()
	a := f.startReplica(dsn)
	f.next(leasetest.Start)
	b := f.startReplica(dsn)
	b.log.WaitFor(t, `"state":"standing_by"`, 1, hang)
	host, _ := os.Hostname()
	apid, bpid := strconv.Itoa(a.cmd.Process.Pid), strconv.Itoa(b.cmd.Process.Pid)
	res := runCLI(t, nil, "--dsn", dsn, "--keys", f.keys, "who", "--replicas", "poller")
	if res.Code != 0 {
		t.Fatalf("who --replicas: exit %d\n%s", res.Code, res.Stderr)
	}
	row(t, res.Stdout, "leasectl", "run", "poller@"+host+"#"+apid, "single", "1", "0", "poller")
	row(t, res.Stdout, "leasectl", "run", "poller@"+host+"#"+bpid, "single", "0", "1", "-")

	var doc struct {
		Replicas []replicaJSON `json:"replicas"`
	}
	decodeJSON(t, runCLI(t, nil, "--dsn", dsn, "--keys", f.keys, "-o", "json", "who", "--replicas", "poller").Stdout, &doc)
	if len(doc.Replicas) != 2 || doc.Replicas[0].ApplicationName == doc.Replicas[1].ApplicationName {
		t.Fatalf("who --replicas -o json: %+v; want two replicas, named apart", doc.Replicas)
	}
	for _, r := range doc.Replicas {
		if r.Host == nil || *r.Host != host {
			t.Errorf("replica %q: host %v, want %q", r.ApplicationName, r.Host, host)
		}
	}

	// The leader alone, by HOST#PID: the role moves to the other replica.
	fo := runCLI(t, nil, "--dsn", dsn, "--keys", f.keys, "failover", "--replica", host+"#"+apid, "--yes")
	if fo.Code != 0 || !strings.Contains(fo.Stdout, "moved 1 of 1 role") {
		t.Fatalf("failover --replica %s#%s: exit %d\n%s%s", host, apid, fo.Code, fo.Stdout, fo.Stderr)
	}
	if ev := f.next(leasetest.Start); ev.PPID != b.cmd.Process.Pid {
		t.Errorf("pid %d leads after the drain of %s, not %s", ev.PPID, apid, bpid)
	}
}

// TestDrainedReplicaIsShownAsDrained: a run --procfile replica drained by
// failover --replica stays connected and takes no role. Its log says so,
// never that it stands by again; who --replicas lists it as a drained
// group that leads nothing (in JSON, "drained": true), by the drained mark
// its lease session holds; and a second failover --replica finds it
// drained already.
func TestDrainedReplicaIsShownAsDrained(t *testing.T) {
	f := newGroupFixture(t, 9300200, "poller", "scheduler")
	dsn := needLab(t).DirectDSN()
	group := func(name string) *replica {
		return f.startLeasectl(dsn+"&application_name="+url.PathEscape(name), "run", "--procfile", f.procfile, "--retry-interval", "100ms", "-o", "json")
	}
	vm1 := group("leasectl run app@vm1")
	vm1.log.WaitFor(t, `"state":"leading"`, 2, hang) // vm1 leads both
	vm2 := group("leasectl run app@vm2")
	vm2.log.WaitFor(t, `"msg":"standing by"`, 1, hang)
	cli := func(args ...string) cliResult {
		return runCLI(t, nil, append([]string{"--dsn", dsn, "--keys", f.keys}, args...)...)
	}
	if res := cli("failover", "--replica", "vm1", "--yes"); res.Code != 0 || !strings.Contains(res.Stdout, "moved 2 of 2 roles") {
		t.Fatalf("failover --replica vm1: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	vm1.log.WaitFor(t, `"msg":"stepped down: drained; this replica takes no role until it restarts"`, 2, hang)
	log := vm1.log.String()
	drained := strings.Index(log, `"msg":"drained (leasectl failover --replica)`)
	if drained < 0 || strings.Contains(log[drained:], "standing by again") || strings.Contains(log[drained:], `"msg":"standing by"`) {
		t.Errorf("vm1's log after the drain claims it stands by again, or does not say it was drained:\n%s", log)
	}

	res := cli("who", "--replicas")
	row(t, res.Stdout, "leasectl", "run", "app@vm1", "group", "0", "0", "drained")
	if _, ok := findRow(res.Stdout, "leasectl", "run", "app@vm2", "group", "2", "0", "poller,", "scheduler"); !ok {
		t.Errorf("vm2 does not lead both roles:\n%s", res.Stdout)
	}
	var doc struct {
		Replicas []replicaJSON `json:"replicas"`
	}
	js := cli("-o", "json", "who", "--replicas")
	checkJSONConvention(t, js.Stdout, true, "who --replicas")
	decodeJSON(t, js.Stdout, &doc)
	if len(doc.Replicas) != 2 || !doc.Replicas[0].Drained || doc.Replicas[0].Kind != "group" || doc.Replicas[0].LeadCount != 0 ||
		doc.Replicas[0].WaitCount != 0 || doc.Replicas[1].Drained {
		t.Errorf("who --replicas -o json: %+v; want vm1 drained, leading and waiting for nothing, and vm2 not", doc.Replicas)
	}

	again := cli("failover", "--replica", "vm1", "--yes")
	if again.Code != ExitCheckFailed || !strings.Contains(again.Stderr, "drained already") {
		t.Errorf("failover --replica vm1 again: exit %d, want 1 saying it is drained already\n%s%s", again.Code, again.Stdout, again.Stderr)
	}
}

// TestHelpFitsTheTerminal: --help was written wrapped at about 78 columns
// and printed as written, so a 60-column terminal broke words; now every
// command's help (its description, lists, flags and subcommands; not the
// usage line nor the examples, which are command lines) fits the terminal's
// width ($COLUMNS), uses a wide one, and is 80 columns when stdout is not a
// terminal.
func TestHelpFitsTheTerminal(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || strings.HasPrefix(c.Name(), "__") {
			return
		}
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCmd(&App{IO: &IOStreams{}, Getenv: func(string) string { return "" }}))
	for _, tc := range []struct {
		tty   bool
		width int
	}{{true, 60}, {true, 120}, {false, 80}} {
		env := map[string]string{"COLUMNS": strconv.Itoa(tc.width)}
		widest := 0
		for _, path := range paths {
			args := append(append([]string{}, path...), "--help")
			res := runCLIWith(t, t.Context(), env, tc.tty, "", args...)
			if res.Code != 0 || !strings.Contains(res.Stdout, "Usage:") {
				t.Errorf("leasectl %s: exit %d\n%s%s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
				continue
			}
			section := ""
			for _, line := range strings.Split(res.Stdout, "\n") {
				switch {
				case line == "":
					section = ""
				case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
					section = line
				}
				if section == "Usage:" || section == "Examples:" {
					continue
				}
				if w := textWidth(line); w > tc.width {
					t.Errorf("leasectl %s, %d columns (terminal: %v): a line of %d:\n%s", strings.Join(args, " "), tc.width, tc.tty, w, line)
				} else {
					widest = max(widest, w)
				}
			}
		}
		if widest <= tc.width-10 {
			t.Errorf("at %d columns (terminal: %v) the widest line of help is %d: not fitted to the width", tc.width, tc.tty, widest)
		}
	}
}

// TestFlagsCompleteNoFileNames: history --since <TAB> offered file names,
// cobra's default for a flag with no completion. Every flag of every
// command that takes a value completes file names only if it takes a path
// (--keys, --procfile, --base-file; --dir, directories); the others, none.
func TestFlagsCompleteNoFileNames(t *testing.T) {
	env := map[string]string{"LEASECTL_KEYS": whoKeys(t)}
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Hidden || strings.HasPrefix(c.Name(), "__") || c.Name() == "help" {
			return
		}
		c.Flags().AddFlagSet(c.InheritedFlags())
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() == "bool" || f.Name == "help" {
				return
			}
			checked++
			args := append(append([]string{"__complete"}, strings.Fields(c.CommandPath())[1:]...), "--"+f.Name, "")
			res := runCLI(t, env, args...)
			lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
			directive, err := strconv.Atoi(strings.TrimPrefix(lines[len(lines)-1], ":"))
			if res.Code != 0 || err != nil {
				t.Errorf("leasectl %s: exit %d, no directive\n%s%s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
				return
			}
			noFiles := cobra.ShellCompDirective(directive)&cobra.ShellCompDirectiveNoFileComp != 0
			if wantFiles := fileFlags[f.Name]; noFiles == wantFiles {
				t.Errorf("leasectl %s: directive %d: file names offered %v, want %v", strings.Join(args, " "), directive, !noFiles, wantFiles)
			}
		})
	}
	walk(NewRootCmd(&App{IO: &IOStreams{}, Getenv: func(string) string { return "" }}))
	if checked < 40 {
		t.Errorf("only %d flags checked: is the walk blind?", checked)
	}
	// The newcomer's TAB.
	if res := runCLI(t, env, "__complete", "history", "--since", ""); !strings.HasSuffix(strings.TrimSpace(res.Stdout), ":4") {
		t.Errorf("history --since <TAB>: %q, want no completions and no file names (:4)", res.Stdout)
	}
}

// TestHistorySuggestsOnlyWhatItTakes: history nosuch suggested "a numeric
// key: k or k1,k2", and history refuses k1,k2; it suggests a lease's key,
// an integer, which it takes.
func TestHistorySuggestsOnlyWhatItTakes(t *testing.T) {
	env := map[string]string{"LEASECTL_KEYS": whoKeys(t), "LEASECTL_DSN": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	res := runCLI(t, env, "history", "nosuch")
	if res.Code != ExitUsage || strings.Contains(res.Stderr, "k1,k2") || !strings.Contains(res.Stderr, `unknown role "nosuch"`) ||
		!strings.Contains(res.Stderr, "(or give a lease's key: an integer)") {
		t.Errorf("history nosuch: exit %d\n%s", res.Code, res.Stderr)
	}
	if res := runCLI(t, env, "history", "1840100009"); res.Code == ExitUsage {
		t.Errorf("history 1840100009, a key as suggested: a usage error\n%s", res.Stderr)
	}
	// who takes the two-int4 form, and still suggests it.
	if res := runCLI(t, env, "who", "nosuch"); res.Code != ExitUsage || !strings.Contains(res.Stderr, "k or k1,k2") {
		t.Errorf("who nosuch: exit %d\n%s", res.Code, res.Stderr)
	}
}

// TestFailoverTakeoverComesNoLaterThanItsTerm: failover printed "took over
// within 26ms" (client clock), then "began term 2 within 25ms" (server
// clock): the term that follows the takeover seemed to come first. The new
// holder holds the key before it begins its term, so the takeover is
// bounded by the term's begin too, on the server's clock; text and JSON
// never show it later than the term. Graceful and forced, each way.
func TestFailoverTakeoverComesNoLaterThanItsTerm(t *testing.T) {
	const key = 1840500121
	keysPath := termKeys(t, key)
	a, b := startTermLease(t, "poller", key), startTermLease(t, "poller", key)
	leader, standBy := a, b
	select {
	case <-a.starts:
	case <-b.starts:
		leader, standBy = b, a
	case <-time.After(hang):
		t.Fatal("no lease leads")
	}
	took := regexp.MustCompile(`took over poller within (\S+) of the (?:request|signal) \((server|client) clock\)`)
	began := regexp.MustCompile(`began term \d+ of poller within (\S+) of the (?:request|signal) \(server clock\)`)
	for i, args := range [][]string{{"--yes"}, {"--yes", "-o", "json"}, {"--yes", "--force"}, {"--yes", "--force", "-o", "json"}} {
		standBy.waitState(t, lease.StandingBy)
		res := runCLI(t, nil, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "failover", "poller"}, args...)...)
		standBy.nextStart(t)
		leader, standBy = standBy, leader
		if res.Code != ExitOK {
			t.Fatalf("failover %v: exit %d\n%s%s", args, res.Code, res.Stdout, res.Stderr)
		}
		var takeover, term float64
		if i%2 == 1 {
			var doc failoverCmdJSON
			decodeJSON(t, res.Stdout, &doc)
			if doc.TakeoverMS == nil || doc.TermBeganAfterMS == nil {
				t.Fatalf("failover %v: no takeover_ms or term_began_after_ms:\n%s", args, res.Stdout)
			}
			takeover, term = *doc.TakeoverMS, *doc.TermBeganAfterMS
		} else {
			tm, bm := took.FindStringSubmatch(res.Stdout), began.FindStringSubmatch(res.Stdout)
			if tm == nil || bm == nil {
				t.Fatalf("failover %v: no takeover or term line:\n%s", args, res.Stdout)
			}
			td, err1 := time.ParseDuration(tm[1])
			bd, err2 := time.ParseDuration(bm[1])
			if err1 != nil || err2 != nil {
				t.Fatalf("failover %v: %v, %v\n%s", args, err1, err2, res.Stdout)
			}
			takeover, term = float64(td)/1e6, float64(bd)/1e6
		}
		if takeover > term {
			t.Errorf("failover %v: took over %.3fms after, but began its term %.3fms after:\n%s", args, takeover, term, res.Stdout)
		}
	}
}

// TestLabUpNamesBothDirectories: lab up's progress showed "initdb
// /tmp/leasectl-lab-…/primary" and then "lab is up in ~/.cache/…": two
// directories, unexplained. It names both: the state (--dir), and the
// servers' files, where initdb ran.
func TestLabUpNamesBothDirectories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	up := runCLIWith(t, ctx, nil, false, "", "lab", "up", "--dir", dir)
	defer runCLI(t, nil, "lab", "down", "--dir", dir)
	if up.Code != 0 {
		t.Fatalf("lab up: exit %d\n%s%s", up.Code, up.Stdout, up.Stderr)
	}
	l, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	initdb := regexp.MustCompile(`(?m)^initdb (\S+)$`).FindStringSubmatch(up.Stderr)
	if initdb == nil || !strings.HasPrefix(initdb[1], l.RunDir+string(os.PathSeparator)) {
		t.Fatalf("lab up's progress has no initdb line in %s:\n%s", l.RunDir, up.Stderr)
	}
	for _, want := range []string{"state (--dir):   " + dir + "\n", "servers' files:  " + l.RunDir + " "} {
		if !strings.Contains(up.Stdout, want) {
			t.Errorf("lab up does not say %q:\n%s", want, up.Stdout)
		}
	}
}

// TestUnknownFlagSuggestsTheFlag: cobra suggests commands, not flags; a
// flag typo now gets "did you mean --x?", from the command's own flags and
// those it inherits (never a hidden one), by edit distance or a prefix, as
// cobra suggests commands.
func TestUnknownFlagSuggestsTheFlag(t *testing.T) {
	env := map[string]string{"LEASECTL_KEYS": whoKeys(t), "LEASECTL_DSN": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"who", "--stael"}, "unknown flag: --stael; did you mean --stale?"},
		{[]string{"who", "--Replicas"}, "unknown flag: --Replicas; did you mean --replicas?"},
		{[]string{"history", "poller", "--sinc", "1h"}, "unknown flag: --sinc; did you mean --since?"},
		{[]string{"verify", "--pooler-ds", "x"}, "unknown flag: --pooler-ds; did you mean --pooler-dsn?"},
		{[]string{"run", "--procfil", "Procfile"}, "unknown flag: --procfil; did you mean --procfile?"},
		{[]string{"--timout", "3s", "who"}, "unknown flag: --timout; did you mean --timeout?"},
		{[]string{"failover", "--repl", "vm1"}, "unknown flag: --repl; did you mean --replica?"},
		{[]string{"lab", "env", "--shel", "fish"}, "unknown flag: --shel; did you mean --shell?"},
		{[]string{"who", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"probe", "--heartbeet", "5s"}, "unknown flag: --heartbeet"}, // --heartbeat is hidden (deprecated)
	} {
		res := runCLI(t, env, tc.args...)
		lines := strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n")
		if res.Code != ExitUsage || len(lines) != 2 || lines[0] != "error: "+tc.says || !strings.HasPrefix(lines[1], "Run 'leasectl ") {
			t.Errorf("leasectl %s: exit %d, want 2 and %q\n%s", strings.Join(tc.args, " "), res.Code, tc.says, res.Stderr)
		}
	}
}

// TestWhoAt60ColumnsKeepsTheReplica: at 60 columns who (and who --watch)
// left APPLICATION, the replica, out and kept PID; the replica's name is
// now the last column to give way, after PID, LAST ACTIVITY and TERM.
func TestWhoAt60ColumnsKeepsTheReplica(t *testing.T) {
	keysPath := whoKeys(t)
	leader := pgtest.Conn(t, needLab(t).DirectDSN(), "leasectl run sch@vm1#4242")
	hold(t, leader, schedulerKey)
	env := map[string]string{"COLUMNS": "60", "NO_COLOR": "1"}
	args := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who", "scheduler"}
	check := func(what, out string) {
		t.Helper()
		var header string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "ROLE ") {
				header = l
			}
			if textWidth(l) > 60 {
				t.Errorf("%s: a line of %d columns:\n%s", what, textWidth(l), l)
			}
		}
		if !strings.Contains(header, "APPLICATION") || strings.Contains(header, "PID") {
			t.Errorf("%s at 60 columns: header %q, want APPLICATION and no PID:\n%s", what, header, out)
		}
		if _, ok := findRow(out, "scheduler", "HELD", "leasectl", "run", "sch@vm1#4242"); !ok {
			t.Errorf("%s at 60 columns: no row naming the replica:\n%s", what, out)
		}
	}
	res := runCLIWith(t, t.Context(), env, true, "", args...)
	if res.Code != 0 {
		t.Fatalf("who: exit %d\n%s", res.Code, res.Stderr)
	}
	check("who", res.Stdout)

	// --watch, its first frame.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &frameWriter{n: 1, cancel: cancel}
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(""), Out: out, ErrOut: &bytes.Buffer{}, InTTY: true, OutTTY: true, ErrTTY: true},
		Getenv: func(k string) string { return env[k] },
	}
	Run(ctx, app, append(args, "--watch=100ms"))
	check("who --watch", out.buf.String())
}

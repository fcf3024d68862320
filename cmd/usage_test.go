package cmd

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestUsageErrorsAreOneLineAndAHint: every way of calling a command wrong is
// one "error:" line that says what is wrong, then one line that points to
// that command's help, and exit 2; never the usage text, nothing on stdout.
// Each is found while the command line is parsed and checked, before the
// command's run function (a stub here) runs: none needs a database.
func TestUsageErrorsAreOneLineAndAHint(t *testing.T) {
	keysFile := whoKeys(t)
	for _, tc := range []struct {
		args []string
		cmd  string // the command whose help the hint names
		says string // in the error line
		warn string // a deprecation warning before it, if any
	}{
		// bad flag values
		{[]string{"who", "--stale", "banana"}, "leasectl who", `invalid argument "banana" for "--stale": want a duration`, ""},
		{[]string{"who", "--stale", "0s"}, "leasectl who", "invalid --stale 0s", ""},
		{[]string{"--timeout", "soon", "probe"}, "leasectl probe", `invalid argument "soon" for "--timeout"`, ""},
		{[]string{"probe", "--contenders", "many"}, "leasectl probe", `invalid argument "many" for "--contenders": want a whole number`, ""},
		{[]string{"probe", "--probe-key", "1,2"}, "leasectl probe", "the probe takes a bigint key", ""},
		{[]string{"failover", "--key", "poller"}, "leasectl failover", `"poller" is not a key`, ""},
		{[]string{"failover", "--key", "017"}, "leasectl failover", `"017" is not a key`, ""},
		{[]string{"failover", "poller", "--wait", "0s"}, "leasectl failover", "invalid --wait 0s", ""},
		{[]string{"verify", "--wait", "0s"}, "leasectl verify", "invalid --wait 0s", ""},
		{[]string{"run", "--key", "1,2", "--", "true"}, "leasectl run", "a lease holds a bigint key", ""},
		{[]string{"run", "--key", "0x8000000000000000", "--", "true"}, "leasectl run", "outside the range of a 64-bit key", ""},
		{[]string{"run", "--role", "poller", "--grace", "0s", "--", "true"}, "leasectl run", "invalid --grace 0s", ""},
		{[]string{"lab", "up", "--pooler", "x=nonsense"}, "leasectl lab up", `invalid --pooler "x=nonsense"`, ""},
		{[]string{"lab", "up", "--ha", "--standby"}, "leasectl lab up", "--ha starts two nodes", ""},
		{[]string{"-o", "yaml", "who"}, "leasectl who", `invalid -o/--output "yaml": use text, wide or json`, ""},
		{[]string{"keys", "lint", "-o", "sarif"}, "leasectl keys lint", `invalid -o/--output "sarif": use text, json or github-actions`, ""},
		{[]string{"who", "-o", "github-actions"}, "leasectl who", `invalid -o/--output "github-actions": use text, wide or json`, ""},
		{[]string{"completion", "bash", "-o", "json"}, "leasectl completion bash", "has only text output", ""},
		{[]string{"version", "-o", "xml"}, "leasectl version", `invalid -o/--output "xml"`, ""},
		{[]string{"verify", "-o", "wide"}, "leasectl verify", `invalid -o/--output "wide": use text or json (wide is for leasectl who and leasectl history only)`, ""},
		// unknown flags
		{[]string{"--bogus"}, "leasectl", "unknown flag: --bogus", ""},
		{[]string{"who", "--bogus"}, "leasectl who", "unknown flag: --bogus", ""},
		{[]string{"keys", "diff", "--bogus"}, "leasectl keys diff", "unknown flag: --bogus", ""},
		{[]string{"lab", "up", "--bogus"}, "leasectl lab up", "unknown flag: --bogus", ""},
		{[]string{"verify", "-x"}, "leasectl verify", "unknown shorthand flag: 'x' in -x", ""},
		{[]string{"who", "-1"}, "leasectl who", "put keys after --: leasectl who -- -1", ""},
		// unknown subcommands
		{[]string{"bogus"}, "leasectl", `unknown command "bogus" for "leasectl"`, ""},
		{[]string{"prob"}, "leasectl", `unknown command "prob" for "leasectl"; did you mean "probe"?`, ""},
		{[]string{"whoo"}, "leasectl", `unknown command "whoo" for "leasectl"; did you mean "who"?`, ""},
		{[]string{"failovr"}, "leasectl", `unknown command "failovr" for "leasectl"; did you mean "failover"?`, ""},
		{[]string{"verfy"}, "leasectl", `unknown command "verfy" for "leasectl"; did you mean "verify"?`, ""},
		{[]string{"keys", "lnt"}, "leasectl keys", `unknown command "lnt" for "leasectl keys"; did you mean "lint"?`, ""},
		{[]string{"keys", "bogus"}, "leasectl keys", `unknown command "bogus" for "leasectl keys"`, ""},
		{[]string{"lab", "bogus"}, "leasectl lab", `unknown command "bogus" for "leasectl lab"`, ""},
		{[]string{"completion", "tcsh"}, "leasectl completion", `unknown shell "tcsh"`, ""},
		{[]string{"completion", "bash", "extra"}, "leasectl completion bash", "takes no arguments", ""},
		{[]string{"help", "bogus"}, "leasectl help", `unknown help topic "bogus"`, ""},
		// missing and extra arguments
		{[]string{"run", "--role", "poller"}, "leasectl run", "needs a command to run after --", ""},
		{[]string{"run", "--", "true"}, "leasectl run", "exactly one of --role", ""},
		{[]string{"failover"}, "leasectl failover", "name the ROLE to fail over, or give --key N", ""},
		{[]string{"completion"}, "leasectl completion", "needs a shell", ""},
		{[]string{"lab", "revive"}, "leasectl lab revive", "needs one NODE", ""},
		{[]string{"probe", "a", "b"}, "leasectl probe", "takes at most 1 argument, got 2", ""},
		{[]string{"keys", "lint", "a.yaml", "b.yaml"}, "leasectl keys lint", "takes at most 1 argument, got 2", ""},
		{[]string{"version", "extra"}, "leasectl version", "takes no arguments", ""},
		{[]string{"lab", "status", "extra"}, "leasectl lab status", "takes no arguments", ""},
		// conflicting values: a deprecated name and its replacement
		{[]string{"keys", "lint", "-o", "json", "--format", "text"}, "leasectl keys lint", "-o/--output json and --format text conflict", "--format is deprecated"},
		{[]string{"keys", "diff", "--format", "json", "-o", "text"}, "leasectl keys diff", "-o/--output text and --format json conflict", "--format is deprecated"},
		{[]string{"run", "-o", "json", "--log-format", "text", "--role", "poller", "--", "true"}, "leasectl run", "-o/--output json and --log-format text conflict", "--log-format is deprecated"},
		{[]string{"probe", "--heartbeat", "3s", "--heartbeat-interval", "4s"}, "leasectl probe", "--heartbeat-interval 4s and --heartbeat 3s conflict", "--heartbeat is deprecated"},
		{[]string{"verify", "--within", "3s", "--wait", "4s"}, "leasectl verify", "--wait 4s and --within 3s conflict", "--within is deprecated"},
		// a deprecated name passes its value on
		{[]string{"verify", "--within", "0s"}, "leasectl verify", "invalid --wait 0s", "--within is deprecated"},
		{[]string{"run", "--log-format", "xml", "--role", "poller", "--", "true"}, "leasectl run", `invalid -o/--output "xml"`, "--log-format is deprecated"},
		// --watch takes its interval only after "="
		{[]string{"who", "--watch", "5"}, "leasectl who", "--watch 5 is ambiguous: write --watch=5s to redraw every 5 seconds, or put the key first to watch key 5 (leasectl who 5 --watch)", ""},
		{[]string{"who", "-w", "5"}, "leasectl who", "-w 5 is ambiguous", ""},
		{[]string{"who", "--watch", "5s", "poller"}, "leasectl who", `--watch takes its interval after "=": write --watch=5s`, ""},
		{[]string{"who", "-w5s"}, "leasectl who", `-w5s: write the interval after "=": -w=5s`, ""},
		{[]string{"who", "--watch=5"}, "leasectl who", `invalid argument "5" for "--watch": want a duration`, ""},
		{[]string{"who", "--watch=1ms"}, "leasectl who", "invalid --watch 1ms", ""},
		{[]string{"who", "--check", "--watch"}, "leasectl who", "--check and --watch do not combine", ""},
		// history and fence init
		{[]string{"history"}, "leasectl history", `"leasectl history" needs one ROLE of keys.yaml, or a KEY`, ""},
		{[]string{"history", "poller", "scheduler"}, "leasectl history", `"leasectl history" needs one ROLE of keys.yaml, or a KEY`, ""},
		{[]string{"history", "poller", "--limit", "-1"}, "leasectl history", "invalid --limit -1: give a number of terms, or 0 for all", ""},
		{[]string{"history", "poller", "--limit", "all"}, "leasectl history", `invalid argument "all" for "--limit": want a whole number`, ""},
		{[]string{"history", "poller", "--since", "yesterday"}, "leasectl history", `invalid argument "yesterday" for "--since": want a duration such as 24h or 90m, or an RFC 3339 time`, ""},
		{[]string{"history", "poller", "--since", "2026-12-01"}, "leasectl history", `invalid argument "2026-12-01" for "--since": want a duration`, ""},
		{[]string{"history", "poller", "--since", "-24h"}, "leasectl history", "the duration must be positive: the terms of the last 24h", ""},
		{[]string{"history", "poller", "--since", "0s"}, "leasectl history", "the duration must be positive", ""},
		{[]string{"history", "3,4"}, "leasectl history", "3,4 is the two-int4 form: a lease holds a bigint key", ""},
		{[]string{"history", "-1"}, "leasectl history", "put it after --: leasectl history -- -1", ""},
		{[]string{"history", "poller", "-o", "github-actions"}, "leasectl history", `invalid -o/--output "github-actions": use text, wide or json`, ""},
		{[]string{"fence", "bogus"}, "leasectl fence", `unknown command "bogus" for "leasectl fence"`, ""},
		{[]string{"fence", "init", "extra"}, "leasectl fence init", "takes no arguments", ""},
		{[]string{"fence", "init", "--print-sql", "-o", "json"}, "leasectl fence init", "--print-sql prints SQL, which has no JSON form", ""},
		{[]string{"fence", "init", "-o", "wide"}, "leasectl fence init", `invalid -o/--output "wide": use text or json`, ""},
		{[]string{"fence", "init", "--bogus"}, "leasectl fence init", "unknown flag: --bogus", ""},
	} {
		args := append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "--keys", keysFile}, tc.args...)
		var ran []string
		res := runStubbed(t, nil, stubAll(&ran), args...)
		name := strings.Join(tc.args, " ")
		if len(ran) > 0 {
			t.Errorf("leasectl %s: %s ran: a usage error must stop it before it runs", name, ran[0])
		}
		if res.Code != ExitUsage {
			t.Errorf("leasectl %s: exit %d, want 2\nstderr:\n%s", name, res.Code, res.Stderr)
		}
		if res.Stdout != "" {
			t.Errorf("leasectl %s: stdout is not empty:\n%s", name, res.Stdout)
		}
		lines := strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n")
		if tc.warn != "" {
			if len(lines) == 0 || !strings.HasPrefix(lines[0], "warning: ") || !strings.Contains(lines[0], tc.warn) {
				t.Errorf("leasectl %s: no deprecation warning %q first:\n%s", name, tc.warn, res.Stderr)
				continue
			}
			lines = lines[1:]
		}
		want := "Run '" + tc.cmd + " --help' for usage."
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "error: ") || !strings.Contains(lines[0], tc.says) || lines[1] != want {
			t.Errorf("leasectl %s: want one error line saying %q and %q, got:\n%s", name, tc.says, want, res.Stderr)
		}
	}
}

// TestEveryCommandChecksItsArguments: a command without Args accepts any
// argument in silence (cobra's default), and an unknown subcommand of it
// would not be a usage error.
func TestEveryCommandChecksItsArguments(t *testing.T) {
	root := NewRootCmd(&App{IO: &IOStreams{}, Getenv: func(string) string { return "" }})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Args == nil && !strings.HasPrefix(c.Name(), "__") {
			t.Errorf("%q has no Args validator", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestBareParentCommandsPrintHelp: leasectl, keys, lab and fence alone print their
// help and exit 0, as gh and kubectl do.
func TestBareParentCommandsPrintHelp(t *testing.T) {
	for _, args := range [][]string{{}, {"keys"}, {"lab"}, {"fence"}} {
		res := runCLI(t, nil, args...)
		if res.Code != ExitOK || !strings.Contains(res.Stdout, "Usage:") || !strings.Contains(res.Stdout, "Use \"leasectl ") || res.Stderr != "" {
			t.Errorf("leasectl %s: exit %d, want 0 and the help\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
		}
	}
}

// TestDeprecatedNamesAreHidden: old flag names work (see the table above)
// but help and completion show only the new ones.
func TestDeprecatedNamesAreHidden(t *testing.T) {
	for _, tc := range []struct {
		cmd      []string
		old, new string
	}{
		{[]string{"probe"}, "heartbeat", "heartbeat-interval"},
		{[]string{"verify"}, "within", "wait"},
		{[]string{"run"}, "log-format", "output"},
		{[]string{"keys", "lint"}, "format", "output"},
		{[]string{"keys", "diff"}, "format", "output"},
	} {
		help := runCLI(t, nil, append(tc.cmd, "--help")...)
		if regexp.MustCompile(`--`+tc.old+`\b[^-]`).MatchString(help.Stdout) || !strings.Contains(help.Stdout, "--"+tc.new) {
			t.Errorf("leasectl %s --help: shows --%s, or not --%s:\n%s", strings.Join(tc.cmd, " "), tc.old, tc.new, help.Stdout)
		}
		comp := runCLI(t, nil, append(append([]string{"__complete"}, tc.cmd...), "--")...)
		if strings.Contains(comp.Stdout, "--"+tc.old+"\n") || strings.Contains(comp.Stdout, "--"+tc.old+"\t") {
			t.Errorf("completion of leasectl %s offers --%s:\n%s", strings.Join(tc.cmd, " "), tc.old, comp.Stdout)
		}
	}
}

// TestDeprecatedFormatStillWorks: keys lint --format json is -o json, with
// a warning on stderr only, so that stdout stays JSON.
func TestDeprecatedFormatStillWorks(t *testing.T) {
	res := runCLI(t, nil, "keys", "lint", keysCompatible, "--format", "json")
	if res.Code != ExitOK || !json.Valid([]byte(res.Stdout)) {
		t.Fatalf("exit %d, stdout not JSON:\n%s", res.Code, res.Stdout)
	}
	if res.Stderr != "warning: --format is deprecated and will be removed in a later release: use -o/--output\n" {
		t.Errorf("stderr: %q", res.Stderr)
	}
}

// TestKeyFlagForms: --key and --probe-key read keys as KEY arguments do, with
// one parser: decimal, 0x hex, and k1,k2 where the two-int4 form means
// something.
func TestKeyFlagForms(t *testing.T) {
	for _, tc := range []struct {
		in    string
		pairs bool
		want  string // the key as printed; "" for an error
	}{
		{"1840000001", false, "1840000001"},
		{"-42", false, "-42"},
		{"+42", false, "42"},
		{"0x6d6b000000000001", false, "7884395572642185217"},
		{"0x7fffffffffffffff", false, "9223372036854775807"},
		{"0x8000000000000000", false, ""},
		{"9223372036854775808", false, ""},
		{"017", false, ""},
		{"0o17", false, ""},
		{"1_000", false, ""},
		{"0X1F", false, ""},
		{"poller", false, ""},
		{"3,4", false, ""},
		{"3,4", true, "3,4"},
		{"0x3,-4", true, "3,-4"},
		{"2147483648,1", true, ""},
	} {
		k := keyFlag{pairs: tc.pairs, noPairWhy: "no pairs here"}
		err := k.Set(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q (pairs %v): accepted as %s", tc.in, tc.pairs, k.String())
		case tc.want != "" && (err != nil || k.String() != tc.want):
			t.Errorf("%q (pairs %v): got %q, %v; want %s", tc.in, tc.pairs, k.String(), err, tc.want)
		}
	}
}

// TestMissingKeysFileSaysWhatToDo: without a keys file, who names the ways
// to give one and the ways to do without; failover and run name --key; a
// file named by --keys or LEASECTL_KEYS is the path to check. Exit 2, no
// hint to the help: the command line itself is fine.
func TestMissingKeysFileSaysWhatToDo(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		env  map[string]string
		args []string
		says []string
	}{
		{nil, []string{"who"}, []string{"keys file keys.yaml not found", "--keys FILE", "LEASECTL_KEYS", "leasectl who 1840000001", "leasectl who --all"}},
		{nil, []string{"who", "--check"}, []string{"keys file keys.yaml not found", "--all"}},
		{nil, []string{"failover", "poller", "--yes"}, []string{"keys file keys.yaml not found", "--keys FILE", "--key N"}},
		{nil, []string{"run", "--role", "poller", "--", "true"}, []string{"keys file keys.yaml not found", "--key N"}},
		{nil, []string{"verify"}, []string{"keys file keys.yaml not found", "--keys FILE", "LEASECTL_KEYS"}},
		{nil, []string{"--keys", "deploy/keys.yaml", "who"}, []string{"keys file deploy/keys.yaml not found: check the path given to --keys"}},
		{map[string]string{"LEASECTL_KEYS": "deploy/keys.yaml"}, []string{"who"}, []string{"keys file deploy/keys.yaml not found: check the path in $LEASECTL_KEYS"}},
		{nil, []string{"keys", "lint", "deploy/keys.yaml"}, []string{"keys file deploy/keys.yaml not found: check the path"}},
	} {
		args := append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none"}, tc.args...)
		res := runCLI(t, tc.env, args...)
		name := strings.Join(tc.args, " ")
		if res.Code != ExitUsage || strings.Contains(res.Stderr, "for usage.") || strings.Count(res.Stderr, "\n") != 1 {
			t.Errorf("leasectl %s: exit %d, want 2 and one error line:\n%s", name, res.Code, res.Stderr)
		}
		for _, s := range tc.says {
			if !strings.Contains(res.Stderr, s) {
				t.Errorf("leasectl %s: does not say %q:\n%s", name, s, res.Stderr)
			}
		}
	}
}

package cmd

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/keyslint"
	"github.com/leasectl/leasectl/test/gittest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const (
	keysBase       = "testdata/keys/base.yaml"
	keysBreaking   = "testdata/keys/breaking.yaml"
	keysCompatible = "testdata/keys/compatible.yaml"
	keysInvalid    = "testdata/keys/invalid.yaml"
)

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (if the change is intended, run go test ./cmd -run %s -update):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

func wantExit(t *testing.T, res cliResult, code int) {
	t.Helper()
	if res.Code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", res.Code, code, res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stderr, "goroutine ") || strings.Contains(res.Stderr, "panic") {
		t.Fatalf("stack trace on stderr: %s", res.Stderr)
	}
}

func TestKeysLint(t *testing.T) {
	res := runCLI(t, nil, "keys", "lint", keysCompatible)
	wantExit(t, res, ExitOK)
	if !strings.Contains(res.Stdout, "no problems (4 roles, 2 retired keys)") {
		t.Errorf("stdout: %s", res.Stdout)
	}

	// The default file is the --keys file, else $LEASECTL_KEYS.
	wantExit(t, runCLI(t, nil, "--keys", keysCompatible, "keys", "lint"), ExitOK)
	wantExit(t, runCLI(t, map[string]string{"LEASECTL_KEYS": keysInvalid}, "keys", "lint"), ExitUsage)

	res = runCLI(t, nil, "keys", "lint", keysInvalid)
	wantExit(t, res, ExitUsage)
	for _, line := range []string{
		keysInvalid + ":3: INVALID_NAME", keysInvalid + ":4: INVALID_KEY", keysInvalid + ":5: DUPLICATE_FIELD",
		keysInvalid + ":6: DUPLICATE_KEY", keysInvalid + ":7: PROBE_KEY", keysInvalid + ":9: INVALID_KEY",
		keysInvalid + ":10: UNKNOWN_FIELD",
	} {
		if !strings.Contains(res.Stdout, line) {
			t.Errorf("problem %q not listed:\n%s", line, res.Stdout)
		}
	}
	if !strings.Contains(res.Stderr, "7 problems") || strings.Contains(res.Stderr, "for usage.") {
		t.Errorf("stderr: %s", res.Stderr)
	}

	res = runCLI(t, nil, "keys", "lint", "testdata/keys/nope.yaml")
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, "not found") {
		t.Errorf("a missing file: %s", res.Stderr)
	}
}

func TestKeysDiffExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // on stdout, or stderr for exit 2
	}{
		{"breaking", []string{keysBreaking, "--base-file", keysBase}, ExitCheckFailed, "3 errors, 3 notes"},
		{"compatible with notes", []string{keysCompatible, "--base-file", keysBase}, ExitOK, "is compatible with testdata/keys/base.yaml: 2 notes"},
		{"unchanged", []string{keysBase, "--base-file", keysBase}, ExitOK, "no role or key changed"},
		{"the --keys file by default", []string{"--keys", keysBreaking, "--base-file", keysBase}, ExitCheckFailed, "KEY_CHANGED"},
		{"invalid head", []string{keysInvalid, "--base-file", keysBase}, ExitUsage, "testdata/keys/invalid.yaml:3:"},
		{"invalid base", []string{keysBase, "--base-file", keysInvalid}, ExitUsage, "testdata/keys/invalid.yaml:4:"},
		{"missing base file", []string{keysBase, "--base-file", "testdata/keys/nope.yaml"}, ExitUsage, "not found"},
		{"missing head", []string{"testdata/keys/nope.yaml", "--base-file", keysBase}, ExitUsage, "not found"},
		{"both bases", []string{keysBase, "--base-file", keysBase, "--base", "v1"}, ExitUsage, "exclude each other"},
		{"bad format", []string{keysBase, "--base-file", keysBase, "-o", "sarif"}, ExitUsage, `invalid -o/--output "sarif": use text, json or github-actions`},
		{"two files", []string{keysBase, keysBreaking}, ExitUsage, "at most 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"keys", "diff"}, tc.args...)
			if tc.args[0] == "--keys" {
				args = append([]string{"--keys", tc.args[1], "keys", "diff"}, tc.args[2:]...)
			}
			res := runCLI(t, nil, args...)
			wantExit(t, res, tc.code)
			out := res.Stdout
			if tc.code == ExitUsage {
				out = res.Stderr
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("want %q in:\n%s", tc.want, out)
			}
		})
	}
}

// TestKeysOutputFormats checks each format of both commands against a
// golden file. The github-actions format runs in a throwaway repository,
// since annotations carry paths relative to the repository root.
func TestKeysOutputFormats(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
		code   int
	}{
		{"lint.txt", []string{"keys", "lint", keysInvalid}, ExitUsage},
		{"lint.json", []string{"keys", "lint", keysInvalid, "-o", "json"}, ExitUsage},
		{"lint-valid.json", []string{"-o", "json", "keys", "lint", keysCompatible}, ExitOK},
		{"diff.txt", []string{"keys", "diff", keysBreaking, "--base-file", keysBase}, ExitCheckFailed},
		{"diff.json", []string{"keys", "diff", keysBreaking, "--base-file", keysBase, "-o", "json"}, ExitCheckFailed},
		{"diff-compatible.json", []string{"-o", "json", "keys", "diff", keysCompatible, "--base-file", keysBase}, ExitOK},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			res := runCLI(t, nil, tc.args...)
			wantExit(t, res, tc.code)
			if strings.HasSuffix(tc.golden, ".json") {
				goldenJSON(t, tc.golden, res.Stdout)
				checkJSONLayout(t, res.Stdout, false, strings.Join(tc.args[:2], " "))
			} else {
				golden(t, tc.golden, res.Stdout)
			}
		})
	}

	r := gittest.New(t)
	copyFile(t, keysBase, r.Path("deploy/keys.yaml"))
	r.Commit("keys")
	r.Tag("v1.0.0")
	copyFile(t, keysBreaking, r.Path("deploy/keys.yaml"))
	copyFile(t, keysInvalid, r.Path("deploy/invalid.yaml"))
	r.Commit("change keys")
	t.Run("diff.github-actions", func(t *testing.T) {
		res := runCLI(t, nil, "keys", "diff", r.Path("deploy/keys.yaml"), "-o", "github-actions")
		wantExit(t, res, ExitCheckFailed)
		golden(t, "diff.github-actions", res.Stdout)
	})
	t.Run("lint.github-actions", func(t *testing.T) {
		res := runCLI(t, nil, "keys", "lint", r.Path("deploy/invalid.yaml"), "-o", "github-actions")
		wantExit(t, res, ExitUsage)
		golden(t, "lint.github-actions", res.Stdout)
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKeysDiffFromGit runs keys diff end to end against a repository with a
// tagged release, the way a CI job does.
func TestKeysDiffFromGit(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n  poller: 1840000001\n  scheduler: 1840000002\n")
	r.Commit("keys v1")
	r.Tag("v1.0.0")
	r.Write("keys.yaml", "roles:\n  poller: 1840000009\n  scheduler: 1840000002\n")
	r.Commit("change poller's key")
	file := r.Path("keys.yaml")

	res := runCLI(t, nil, "keys", "diff", file)
	wantExit(t, res, ExitCheckFailed)
	if !strings.Contains(res.Stdout, file+":2: error KEY_CHANGED") || !strings.Contains(res.Stdout, "v1.0.0:keys.yaml: 1 error") {
		t.Errorf("without --base, against the latest tag:\n%s", res.Stdout)
	}

	res = runCLI(t, nil, "--keys", file, "keys", "diff", "--base", "v1.0.0", "-o", "json")
	wantExit(t, res, ExitCheckFailed)
	var out struct {
		Base     struct{ Source, Ref, Commit, Path string }
		OK       bool
		Findings []struct{ Rule, Role string }
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Base.Ref != "v1.0.0" || out.Base.Commit != r.Git("rev-parse", "v1.0.0") || out.Base.Path != "keys.yaml" || out.Base.Source != "git" ||
		out.OK || len(out.Findings) != 1 || out.Findings[0].Rule != keyslint.RuleKeyChanged {
		t.Errorf("json: %+v", out)
	}

	wantExit(t, runCLI(t, nil, "keys", "diff", file, "--base", "HEAD"), ExitOK)

	res = runCLI(t, nil, "keys", "diff", file, "--base", "v7.0.0")
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, `git ref "v7.0.0" not found`) || strings.Contains(res.Stderr, "for usage.") {
		t.Errorf("a bad ref: %s", res.Stderr)
	}
	// --allow-missing-base never excuses a mistyped ref.
	wantExit(t, runCLI(t, nil, "keys", "diff", file, "--base", "v7.0.0", "--allow-missing-base"), ExitUsage)

	// A file that is new since the tag.
	r.Write("deploy/keys.yaml", "roles:\n  poller: 1840000001\n")
	r.Commit("a second service")
	newFile := r.Path("deploy/keys.yaml")
	res = runCLI(t, nil, "keys", "diff", newFile)
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, "deploy/keys.yaml does not exist at v1.0.0") {
		t.Errorf("a file absent at the ref: %s", res.Stderr)
	}
	res = runCLI(t, nil, "keys", "diff", newFile, "--allow-missing-base")
	wantExit(t, res, ExitOK)
	if !strings.Contains(res.Stdout, "passing because of --allow-missing-base") {
		t.Errorf("stdout: %s", res.Stdout)
	}

	// A repository without tags: the first release.
	first := gittest.New(t)
	first.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	first.Commit("first")
	res = runCLI(t, nil, "keys", "diff", first.Path("keys.yaml"))
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, "no tag is reachable from HEAD") || !strings.Contains(res.Stderr, "--allow-missing-base") {
		t.Errorf("no tags: %s", res.Stderr)
	}
	res = runCLI(t, nil, "keys", "diff", first.Path("keys.yaml"), "--allow-missing-base", "-o", "json")
	wantExit(t, res, ExitOK)
	wantJSONValue(t, res.Stdout, "base", nil)
	mb, _ := jsonValue(t, res.Stdout, "missing_base")
	if s, _ := mb.(string); !strings.HasPrefix(s, "no tag is reachable") {
		t.Errorf("json without a base: %s", res.Stdout)
	}

	// Outside any repository, the way out is --base-file.
	outside := filepath.Join(t.TempDir(), "keys.yaml")
	copyFile(t, keysBase, outside)
	res = runCLI(t, nil, "keys", "diff", outside)
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, "not inside a git repository") || !strings.Contains(res.Stderr, "--base-file") {
		t.Errorf("outside a repository: %s", res.Stderr)
	}
}

// TestKeysDiffReleaseBuild: on a tagged HEAD (a release build) the base is
// the release before it, not HEAD itself.
func TestKeysDiffReleaseBuild(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	r.Commit("v1")
	r.Tag("v1.0.0")
	r.Write("keys.yaml", "roles:\n  poller: 1840000002\n")
	r.Commit("v2")
	r.Tag("v2.0.0")
	res := runCLI(t, nil, "keys", "diff", r.Path("keys.yaml"))
	wantExit(t, res, ExitCheckFailed)
	if !strings.Contains(res.Stdout, "v1.0.0:keys.yaml") {
		t.Errorf("stdout: %s", res.Stdout)
	}
}

func TestKeysColorOnlyOnATerminal(t *testing.T) {
	ansi := regexp.MustCompile("\x1b\\[")
	args := []string{"keys", "diff", keysBreaking, "--base-file", keysBase}
	if res := runCLIWith(t, t.Context(), nil, true, "", args...); !ansi.MatchString(res.Stdout) {
		t.Errorf("no colour on a terminal:\n%s", res.Stdout)
	}
	for _, env := range []map[string]string{nil, {"NO_COLOR": "1"}} {
		tty := env != nil
		if res := runCLIWith(t, t.Context(), env, tty, "", args...); ansi.MatchString(res.Stdout) {
			t.Errorf("colour with tty=%v env=%v:\n%q", tty, env, res.Stdout)
		}
	}
}

func TestGitHubAnnotationEscaping(t *testing.T) {
	var b strings.Builder
	writeAnnotation(&b, keyslint.SeverityInfo, "a,b:c.yaml", 0, "ROLE_ADDED", "100% new\nline")
	if got, want := b.String(), "::notice file=a%2Cb%3Ac.yaml::ROLE_ADDED: 100%25 new%0Aline\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestKeysGuideListsEveryRule keeps the rules tables of the keys guide
// (docs/guide/keys.md) complete.
func TestKeysGuideListsEveryRule(t *testing.T) {
	data, err := os.ReadFile("../docs/guide/keys.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(data)
	for _, r := range append(append([]keyslint.RuleDoc{}, keyslint.LintRules()...), keyslint.DiffRules()...) {
		if !strings.Contains(guide, "`"+r.Name+"`") {
			t.Errorf("docs/guide/keys.md does not describe %s", r.Name)
		}
	}
	if !strings.Contains(guide, "fetch-depth: 0") || !strings.Contains(guide, "keys diff -o github-actions") {
		t.Error("docs/guide/keys.md lacks the GitHub Actions job")
	}
}

func TestKeysHelpListsTheRules(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		rules []keyslint.RuleDoc
	}{
		{[]string{"keys", "lint", "--help"}, keyslint.LintRules()},
		{[]string{"keys", "diff", "--help"}, keyslint.DiffRules()},
	} {
		res := runCLI(t, nil, tc.args...)
		wantExit(t, res, ExitOK)
		for _, r := range tc.rules {
			if !strings.Contains(res.Stdout, r.Name) {
				t.Errorf("%v does not explain %s", tc.args, r.Name)
			}
		}
	}
	res := runCLI(t, nil, "keys")
	wantExit(t, res, ExitOK)
	if !strings.Contains(res.Stdout, "lint") || !strings.Contains(res.Stdout, "diff") {
		t.Errorf("keys: %s", res.Stdout)
	}
}

func TestKeysUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"keys", "bogus"},
		{"keys", "lint", "a.yaml", "b.yaml"},
		{"keys", "lint", "-o", "xml"},
		{"keys", "diff", "--bogus"},
	} {
		res := runCLI(t, nil, args...)
		wantExit(t, res, ExitUsage)
		if !strings.HasSuffix(res.Stderr, "--help' for usage.\n") || strings.Contains(res.Stderr, "Usage:") {
			t.Errorf("%v: no hint to the help, or the whole usage: %s", args, res.Stderr)
		}
	}
}

// TestKeysDiffRefusesAShallowClone is the CI case of actions/checkout's
// default depth of 1: keys diff used to find no tag and pass with
// --allow-missing-base over a changed key. Now it refuses with exit 2 and
// the fix, whatever the flags, and passes judgement once history is there.
func TestKeysDiffRefusesAShallowClone(t *testing.T) {
	origin := gittest.New(t)
	origin.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	origin.Commit("keys v1")
	origin.Tag("v1.0.0")
	origin.Write("keys.yaml", "roles:\n  poller: 1840000009\n")
	origin.Commit("change poller's key")

	c := gittest.Clone(t, origin, "--depth", "1")
	file := c.Path("keys.yaml")
	for _, flags := range [][]string{nil, {"--allow-missing-base"}, {"--allow-missing-base", "-o", "json"}} {
		res := runCLI(t, nil, append([]string{"keys", "diff", file}, flags...)...)
		wantExit(t, res, ExitUsage)
		if !strings.Contains(res.Stderr, "shallow clone") || !strings.Contains(res.Stderr, "fetch-depth: 0") ||
			!strings.Contains(res.Stderr, "git fetch --unshallow --tags") || strings.Contains(res.Stdout, "✓") {
			t.Errorf("%v in a depth-1 clone:\nstdout: %s\nstderr: %s", flags, res.Stdout, res.Stderr)
		}
	}
	// The tag fetched into the shallow clone: still no way to know it is
	// the latest, but named with --base it is a real base.
	c.Git("fetch", "-q", "--depth", "1", "origin", "tag", "v1.0.0")
	wantExit(t, runCLI(t, nil, "keys", "diff", file, "--allow-missing-base"), ExitUsage)
	res := runCLI(t, nil, "keys", "diff", file, "--base", "v1.0.0")
	wantExit(t, res, ExitCheckFailed)
	if !strings.Contains(res.Stdout, "KEY_CHANGED") {
		t.Errorf("--base v1.0.0 fetched into the clone: %s", res.Stdout)
	}
	// The whole history: the change is caught without --base.
	c.Git("fetch", "-q", "--unshallow", "--tags")
	res = runCLI(t, nil, "keys", "diff", file, "--allow-missing-base")
	wantExit(t, res, ExitCheckFailed)
	if !strings.Contains(res.Stdout, "v1.0.0:keys.yaml: 1 error") {
		t.Errorf("after --unshallow: %s", res.Stdout)
	}
}

// workflowCommand is one GitHub Actions annotation command, with its
// properties escaped the way the runner reads them.
var workflowCommand = regexp.MustCompile(`^::(error|warning|notice)( (file|line|title)=[^,:\n]+(,(file|line|title)=[^,:\n]+)*)?::[^\n]+$`)

// TestKeysGitHubActionsErrorsAreAnnotations: with -o github-actions
// every failure of keys lint and keys diff, setup failures included, is an
// annotation on stdout (the pull request never shows a plain "error:"
// line), with the documented exit code.
func TestKeysGitHubActionsErrorsAreAnnotations(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	r.Write("deploy/bad.yaml", "roles:\n  poller: 1840000001\n")
	r.Commit("keys v1")
	r.Tag("v1.0.0")
	r.Write("deploy/bad.yaml", "roles: [\n")
	r.Commit("broken")
	r.Tag("v2.0.0")
	r.Commit("after v2")
	shallow := gittest.Clone(t, r, "--depth", "1")
	noTags := gittest.New(t)
	noTags.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	noTags.Commit("first")
	outside := filepath.Join(t.TempDir(), "keys.yaml")
	copyFile(t, keysBase, outside)

	gh := "-o=github-actions"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // a line of stdout starts with it
	}{
		{"lint: missing file", []string{"keys", "lint", r.Path("nope.yaml"), gh}, ExitUsage,
			"::error file=nope.yaml,title=leasectl keys lint::keys file " + r.Path("nope.yaml") + " not found"},
		{"diff: missing file", []string{"keys", "diff", r.Path("nope.yaml"), gh}, ExitUsage,
			"::error file=nope.yaml,title=leasectl keys diff::keys file " + r.Path("nope.yaml") + " not found"},
		{"the --keys file", []string{"--keys", r.Path("nope.yaml"), "keys", "diff", "-o", "github-actions"}, ExitUsage,
			"::error file=nope.yaml,title=leasectl keys diff::keys file"},
		{"lint: bad YAML", []string{"keys", "lint", r.Path("deploy/bad.yaml"), gh}, ExitUsage,
			"::error file=deploy/bad.yaml,line=1::YAML_SYNTAX: "},
		{"diff: bad YAML", []string{"keys", "diff", r.Path("deploy/bad.yaml"), gh}, ExitUsage,
			"::error file=deploy/bad.yaml,line=1::YAML_SYNTAX: "},
		{"diff: a base from git that does not parse", []string{"keys", "diff", r.Path("deploy/bad.yaml"), "--base", "v2.0.0", gh}, ExitUsage,
			"::error file=deploy/bad.yaml,line=1::YAML_SYNTAX: "},
		{"diff: ref not found", []string{"keys", "diff", r.Path("keys.yaml"), "--base", "v7.0.0", gh}, ExitUsage,
			`::error file=keys.yaml,title=leasectl keys diff::git ref "v7.0.0" not found`},
		{"diff: shallow clone", []string{"keys", "diff", shallow.Path("keys.yaml"), "--allow-missing-base", gh}, ExitUsage,
			"::error file=keys.yaml,title=leasectl keys diff::this repository is a shallow clone"},
		{"diff: no tag", []string{"keys", "diff", noTags.Path("keys.yaml"), gh}, ExitUsage,
			"::error file=keys.yaml,title=leasectl keys diff::no tag is reachable from HEAD"},
		{"diff: outside a repository", []string{"keys", "diff", outside, gh}, ExitUsage,
			"::error file=" + ghProperty(outside) + ",title=leasectl keys diff::" + outside + " is not inside a git repository"},
		{"diff: usage", []string{"keys", "diff", r.Path("keys.yaml"), "--base", "v1.0.0", "--base-file", keysBase, gh}, ExitUsage,
			"::error title=leasectl keys diff::--base and --base-file exclude each other"},
		{"diff: an unknown flag before -o", []string{"keys", "diff", "--bogus", "-o", "github-actions"}, ExitUsage,
			"::error title=leasectl keys diff::unknown flag: --bogus"},
		{"diff: an unknown flag before --output=", []string{"keys", "diff", "--bogus", "--output=github-actions"}, ExitUsage,
			"::error title=leasectl keys diff::unknown flag: --bogus"},
		{"diff: an unknown flag before the deprecated --format", []string{"keys", "diff", "--bogus", "--format", "github-actions"}, ExitUsage,
			"::error title=leasectl keys diff::unknown flag: --bogus"},
		{"diff: the deprecated --format", []string{"keys", "diff", noTags.Path("keys.yaml"), "--format", "github-actions"}, ExitUsage,
			"::error file=keys.yaml,title=leasectl keys diff::no tag is reachable from HEAD"},
		{"lint: too many arguments", []string{"keys", "lint", "a.yaml", "b.yaml", gh}, ExitUsage,
			`::error title=leasectl keys lint::"leasectl keys lint" takes at most 1 argument, got 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, nil, tc.args...)
			wantExit(t, res, tc.code)
			if !strings.Contains("\n"+res.Stdout, "\n"+tc.want) {
				t.Errorf("no annotation starting %q on stdout:\n%s", tc.want, res.Stdout)
			}
			for _, line := range strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n") {
				if !workflowCommand.MatchString(line) {
					t.Errorf("not a workflow command: %q", line)
				}
			}
			if strings.Contains(res.Stderr, "error:") {
				t.Errorf("a plain error line, which the pull request never shows:\n%s", res.Stderr)
			}
		})
	}

	// The base from git fails to parse: the problem is not at a line of
	// the pull request's file, so it goes on the file as a whole.
	r.Write("deploy/bad.yaml", "roles:\n  poller: 1840000001\n")
	r.Commit("fixed")
	res := runCLI(t, nil, "keys", "diff", r.Path("deploy/bad.yaml"), "--base", "v2.0.0", gh)
	wantExit(t, res, ExitUsage)
	if !strings.HasPrefix(res.Stdout, "::error file=deploy/bad.yaml,title=leasectl keys diff::the base v2.0.0:deploy/bad.yaml:1 is not a valid keys file: YAML_SYNTAX: ") {
		t.Errorf("an invalid base from git:\n%s", res.Stdout)
	}

	// A pass that compared nothing is a warning on the pull request.
	res = runCLI(t, nil, "keys", "diff", noTags.Path("keys.yaml"), "--allow-missing-base", gh)
	wantExit(t, res, ExitOK)
	if !strings.HasPrefix(res.Stdout, "::warning file=keys.yaml,title=leasectl keys diff::keys.yaml: nothing to compare with, passing because of --allow-missing-base") {
		t.Errorf("--allow-missing-base:\n%s", res.Stdout)
	}

	// Other formats keep the plain error line.
	res = runCLI(t, nil, "keys", "diff", shallow.Path("keys.yaml"))
	wantExit(t, res, ExitUsage)
	if !strings.HasPrefix(res.Stderr, "error: this repository is a shallow clone") || res.Stdout != "" {
		t.Errorf("text format:\nstdout: %s\nstderr: %s", res.Stdout, res.Stderr)
	}
}

// TestKeysLintReadsStdin: `keys lint -` checks what comes on standard
// input, naming it <stdin> in problems.
func TestKeysLintReadsStdin(t *testing.T) {
	ok := runCLIWith(t, context.Background(), nil, false, "roles:\n  poller: 1840000001\n", "keys", "lint", "-")
	if ok.Code != ExitOK {
		t.Errorf("valid input: exit %d, stderr:\n%s", ok.Code, ok.Stderr)
	}
	bad := runCLIWith(t, context.Background(), nil, false, "roles:\n  poller: 1840000001\n  sched: 1840000001\n", "keys", "lint", "-")
	if bad.Code != ExitUsage || !strings.Contains(bad.Stdout+bad.Stderr, "<stdin>:3") {
		t.Errorf("shared key: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 2 naming <stdin>:3", bad.Code, bad.Stdout, bad.Stderr)
	}
}

// TestUnknownRoleSuggestsTheNearest: a misspelt role gets a suggestion.
func TestUnknownRoleSuggestsTheNearest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("roles:\n  poller: 1840000001\n  scheduler: 1840000002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, map[string]string{"LEASECTL_DSN": "postgres://u@127.0.0.1:1/db", "LEASECTL_KEYS": path}, "run", "--role", "schedular", "--", "true")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, `did you mean "scheduler"?`) {
		t.Errorf("exit %d, stderr:\n%s", res.Code, res.Stderr)
	}
}

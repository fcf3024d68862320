package keyslint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/keysfile"
)

// diffCases lists, for each pair of fixtures testdata/diff/<name>/{base,head}.yaml,
// the findings Diff must return as "RULE:line:role", in order. The
// directories named after a rule show that rule; those under edge/ show how
// the rules combine.
var diffCases = map[string][]string{
	"KEY_CHANGED":   {"KEY_CHANGED:2:poller"},
	"ROLE_REMOVED":  {"ROLE_REMOVED:2:reconciler"},
	"KEY_REUSED":    {"KEY_REUSED:3:cleaner"},
	"DUPLICATE_KEY": {"DUPLICATE_KEY:4:reconciler", "KEY_REUSED:4:reconciler"},
	"ROLE_ADDED":    {"ROLE_ADDED:3:scheduler"},
	"ROLE_RETIRED":  {"ROLE_RETIRED:4:sweeper"},
	"ROLE_RENAMED":  {"ROLE_RENAMED:2:queue-poller"},

	"edge/identical":               nil,
	"edge/same-key-other-spelling": nil,
	"edge/swap":                    {"KEY_CHANGED:2:poller", "KEY_REUSED:2:poller", "KEY_CHANGED:3:scheduler", "KEY_REUSED:3:scheduler"},
	"edge/retired-with-other-key":  {"ROLE_REMOVED:4:sweeper"},
	"edge/revived":                 {"ROLE_ADDED:3:sweeper"},
	// The old name kept under retired: with its key: the new name uses a
	// retired key, and a key the base gave another role.
	"edge/rename-and-retire-old": {"DUPLICATE_KEY:2:queue-poller", "KEY_REUSED:2:queue-poller", "ROLE_RETIRED:4:poller"},
	// Two new names for one old role: not a rename, and the key is shared.
	"edge/split-in-two": {"ROLE_REMOVED:1:poller", "KEY_REUSED:2:poller-a", "DUPLICATE_KEY:3:poller-b", "KEY_REUSED:3:poller-b"},
	"edge/first-roles":  {"ROLE_ADDED:2:poller"},
}

var severities = map[string]Severity{}

func init() {
	for _, r := range DiffRules() {
		severities[r.Name] = r.Severity
	}
}

func loadPair(t *testing.T, dir string) (base, head *keysfile.File) {
	t.Helper()
	base, err := LoadBase(filepath.Join(dir, "base.yaml"))
	if err != nil {
		t.Fatalf("base: %v", err)
	}
	head, err = LoadHead(filepath.Join(dir, "head.yaml"))
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	return base, head
}

func TestDiffRules(t *testing.T) {
	dirs, err := filepath.Glob("testdata/diff/*/base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edge, _ := filepath.Glob("testdata/diff/edge/*/base.yaml")
	dirs = append(dirs, edge...)
	forEachFixture(t, dirs, "testdata/diff", diffCases, func(t *testing.T, path string, want []string) {
		dir := filepath.Dir(path)
		base, head := loadPair(t, dir)
		findings := Diff(base, head)
		var got []string
		for _, f := range findings {
			got = append(got, fmt.Sprintf("%s:%d:%s", f.Rule, f.Line, f.Role))
			if f.Severity != severities[f.Rule] {
				t.Errorf("%s has severity %q, DiffRules says %q", f.Rule, f.Severity, severities[f.Rule])
			}
			if f.Path != head.Path || f.Message == "" {
				t.Errorf("finding without a place or a message: %+v", f)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("findings:\n got %v\nwant %v\n%s", got, want, messages(findings))
		}
		// A file compared with itself never breaks anything.
		for _, f := range Diff(head, head) {
			if f.Rule != RuleDuplicateKey {
				t.Errorf("head against itself: %+v", f)
			}
		}
	})
}

func messages(findings []Finding) string {
	var b strings.Builder
	for _, f := range findings {
		fmt.Fprintf(&b, "  %s:%d %s %s: %s\n", f.Path, f.Line, f.Severity, f.Rule, f.Message)
	}
	return b.String()
}

// TestEveryDiffRuleHasFixtures keeps DiffRules and the buf-style fixture
// directories in step.
func TestEveryDiffRuleHasFixtures(t *testing.T) {
	for _, r := range DiffRules() {
		for _, side := range []string{"base.yaml", "head.yaml"} {
			if _, err := os.Stat(filepath.Join("testdata", "diff", r.Name, side)); err != nil {
				t.Errorf("rule %s: %v", r.Name, err)
			}
		}
		want, ok := diffCases[r.Name]
		if !ok || len(want) == 0 || !strings.HasPrefix(want[0], r.Name+":") {
			t.Errorf("rule %s: its fixture must show it first, got %v", r.Name, want)
		}
	}
}

func TestDiffMessagesExplain(t *testing.T) {
	for name, want := range map[string]string{
		"KEY_CHANGED":  "put back 1840000001",
		"ROLE_REMOVED": "move it under retired: with the same key (reconciler: 1840000003)",
		"KEY_REUSED":   `belonged to retired role "sweeper"`,
		"ROLE_RENAMED": `both names contend for the one lock`,
		"ROLE_RETIRED": "stays reserved",
	} {
		base, head := loadPair(t, filepath.Join("testdata", "diff", name))
		if got := messages(Diff(base, head)); !strings.Contains(got, want) {
			t.Errorf("%s: want %q in:\n%s", name, want, got)
		}
	}
}

// TestLoadHeadRefusesOtherLintProblems: keys diff reports shared keys as
// findings, but a head that fails any other rule is invalid input.
func TestLoadHeadRefusesOtherLintProblems(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	probe := write("probe.yaml", "roles:\n  poller: 0x6c65617300000001\n")
	shared := write("shared.yaml", "roles:\n  poller: 1840000001\n  scheduler: 1840000001\n")
	both := write("both.yaml", "roles:\n  a: 0x6c65617300000001\n  b: 0x6c65617300000001\n")
	if _, err := LoadHead(probe); err == nil {
		t.Error("LoadHead accepted the probe's key")
	}
	if _, err := LoadHead(shared); err != nil {
		t.Errorf("LoadHead refused a shared key: %v", err)
	}
	var inv *keysfile.InvalidError
	if _, err := LoadHead(both); !errors.As(err, &inv) || len(inv.Problems) != 2 || inv.Problems[0].Rule != keysfile.RuleProbeKey || inv.Problems[1].Rule != keysfile.RuleProbeKey {
		t.Errorf("LoadHead must report the probe's key twice and the shared key not at all: %v", err)
	}
	if _, err := LoadBase(probe); err != nil {
		t.Errorf("LoadBase must check the form only (the base is history): %v", err)
	}
	if _, err := LoadBase(write("bad.yaml", "roles:\n  Poller: 1\n")); !errors.As(err, &inv) || inv.Problems[0].Rule != keysfile.RuleInvalidName {
		t.Errorf("LoadBase accepted a bad name: %v", err)
	}
	if _, err := LoadBase(filepath.Join(dir, "missing.yaml")); !errors.As(err, new(*keysfile.NotFoundError)) {
		t.Errorf("LoadBase of a missing file: %T %v", err, err)
	}
}

// forEachFixture runs test on each fixture path, named by its path below
// root, with its expectation from cases; a fixture without a case, or a
// case without a fixture, is an error.
func forEachFixture(t *testing.T, paths []string, root string, cases map[string][]string, test func(t *testing.T, path string, want []string)) {
	t.Helper()
	if len(paths) != len(cases) {
		t.Errorf("%d fixtures under %s, %d cases: a case has no fixture", len(paths), root, len(cases))
	}
	for _, path := range paths {
		name, _ := filepath.Rel(root, path)
		name = strings.TrimSuffix(filepath.ToSlash(name), "/base.yaml")
		want, ok := cases[name]
		if !ok {
			t.Errorf("fixture %s has no case", name)
			continue
		}
		t.Run(name, func(t *testing.T) { test(t, path, want) })
	}
}

// TestLintRulesAreTheParsersRules keeps the documented lint rules in step
// with the rules the parser (internal/keysfile) applies, in order.
func TestLintRulesAreTheParsersRules(t *testing.T) {
	var names []string
	for _, r := range LintRules() {
		names = append(names, r.Name)
		if r.Severity != SeverityError || r.Doc == "" {
			t.Errorf("lint rule %+v: every lint rule is an error, with a description", r)
		}
	}
	if !slices.Equal(names, keysfile.Rules()) {
		t.Errorf("LintRules %v, the parser's rules %v", names, keysfile.Rules())
	}
}

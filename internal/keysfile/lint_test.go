package keysfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// lintCases lists, for every fixture under testdata/lint, the problems Parse
// must report as "RULE:line", in order. Fixtures under valid/ have none.
var lintCases = map[string][]string{
	"valid/full.yaml":        nil,
	"valid/empty-roles.yaml": nil,
	"valid/flow.yaml":        nil,

	"YAML_SYNTAX/indent.yaml":        {"YAML_SYNTAX:2"},
	"YAML_SYNTAX/empty.yaml":         {"YAML_SYNTAX:0"},
	"YAML_SYNTAX/comments-only.yaml": {"YAML_SYNTAX:0"},
	"YAML_SYNTAX/two-documents.yaml": {"YAML_SYNTAX:3"},
	"YAML_SYNTAX/unclosed.yaml":      {"YAML_SYNTAX:1"},

	"YAML_ALIAS/alias.yaml": {"YAML_ALIAS:2", "YAML_ALIAS:3"},
	"YAML_ALIAS/merge.yaml": {"UNKNOWN_FIELD:1", "YAML_ALIAS:1", "YAML_ALIAS:4"},
	"YAML_ALIAS/billion-laughs.yaml": {
		"UNKNOWN_FIELD:1", "YAML_ALIAS:1", "UNKNOWN_FIELD:2", "YAML_ALIAS:2", "UNKNOWN_FIELD:3", "YAML_ALIAS:3",
		"UNKNOWN_FIELD:4", "YAML_ALIAS:4", "UNKNOWN_FIELD:5", "YAML_ALIAS:5", "UNKNOWN_FIELD:6", "YAML_ALIAS:6",
		"UNKNOWN_FIELD:7", "YAML_ALIAS:7", "UNKNOWN_FIELD:8", "YAML_ALIAS:8", "UNKNOWN_FIELD:9", "YAML_ALIAS:9",
		"YAML_ALIAS:10",
	},

	"STRUCTURE/list.yaml":       {"STRUCTURE:1"},
	"STRUCTURE/roles-list.yaml": {"STRUCTURE:2"},
	"STRUCTURE/no-roles.yaml":   {"STRUCTURE:1"},
	"STRUCTURE/null.yaml":       {"STRUCTURE:1"},

	"UNKNOWN_FIELD/typo.yaml": {"UNKNOWN_FIELD:3", "UNKNOWN_FIELD:5"},

	"DUPLICATE_FIELD/role.yaml":    {"DUPLICATE_FIELD:4"},
	"DUPLICATE_FIELD/section.yaml": {"DUPLICATE_FIELD:5"},
	"DUPLICATE_FIELD/retired.yaml": {"DUPLICATE_FIELD:5"},

	"INVALID_NAME/names.yaml": {"INVALID_NAME:2", "INVALID_NAME:3", "INVALID_NAME:4", "INVALID_NAME:5",
		"INVALID_NAME:6", "INVALID_NAME:7", "INVALID_NAME:8", "INVALID_NAME:10"},

	// Every line from 2 to 21 is a bad key; 22 and 23 are the int64 limits.
	"INVALID_KEY/keys.yaml": lines("INVALID_KEY", 2, 21),

	"DUPLICATE_KEY/shared.yaml":          {"DUPLICATE_KEY:4"},
	"DUPLICATE_KEY/retired-key.yaml":     {"DUPLICATE_KEY:3"},
	"DUPLICATE_KEY/hex-and-decimal.yaml": {"DUPLICATE_KEY:3"},

	"ACTIVE_AND_RETIRED/both.yaml": {"ACTIVE_AND_RETIRED:3"},

	"PROBE_KEY/decimal.yaml": {"PROBE_KEY:3"},
	"PROBE_KEY/hex.yaml":     {"PROBE_KEY:2"},
	"PROBE_KEY/range.yaml":   {"PROBE_KEY:2", "PROBE_KEY:3"},
}

func lines(rule string, from, to int) []string {
	var out []string
	for l := from; l <= to; l++ {
		out = append(out, fmt.Sprintf("%s:%d", rule, l))
	}
	return out
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("want an *InvalidError, got %T: %v", err, err)
	}
	if len(inv.Problems) == 0 {
		t.Fatalf("an InvalidError without problems: %v", err)
	}
	return inv.Problems
}

func ruleLines(problems []Problem) []string {
	var out []string
	for _, p := range problems {
		out = append(out, fmt.Sprintf("%s:%d", p.Rule, p.Line))
	}
	return out
}

func TestLintFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/lint/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	forEachFixture(t, files, "testdata/lint", lintCases, func(t *testing.T, path string, want []string) {
		f, err := Load(path, Options{})
		got := ruleLines(problemsOf(t, err))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("problems:\n got %v\nwant %v\nerror: %v", got, want, err)
		}
		if len(want) == 0 && f == nil {
			t.Fatal("a valid file returned no File")
		}
		if err != nil && !strings.Contains(err.Error(), path+":") && want[0] != "YAML_SYNTAX:0" {
			t.Errorf("the error does not name file:line: %v", err)
		}
	})
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

// TestEveryRuleIsTested keeps the rules (Rules, which the
// lint rules table of internal/keyslint follows), the fixtures and the
// programmatic tests below in step.
func TestEveryRuleIsTested(t *testing.T) {
	covered := map[string]bool{RuleFile: true} // TestFileProblems
	for _, want := range lintCases {
		for _, w := range want {
			covered[strings.Split(w, ":")[0]] = true
		}
	}
	rules := Rules()
	for _, r := range rules {
		if !covered[r] {
			t.Errorf("rule %s has no fixture", r)
		}
		if _, err := os.Stat(filepath.Join("testdata", "lint", r)); err != nil && r != RuleFile {
			t.Errorf("rule %s has no directory testdata/lint/%s", r, r)
		}
	}
	for rule := range covered {
		if !slices.Contains(rules, rule) {
			t.Errorf("a fixture shows rule %s, which Rules() lacks", rule)
		}
	}
}

func TestValidFileValues(t *testing.T) {
	f, err := Load("testdata/lint/valid/full.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"poller", 1840000001, 3}, {"scheduler", 1840000002, 4}, {"retention-sweep_2", 0x6d6b000000000001, 5},
		{"negative", -42, 6}, {"on", 1840000004, 7}, {"explicit", 1840000005, 8},
	}
	if !reflect.DeepEqual(f.Roles, want) {
		t.Errorf("roles:\n got %+v\nwant %+v", f.Roles, want)
	}
	if wantRetired := []Entry{{"sweeper", 1840000000, 10}, {"old-poller", 1839999999, 11}}; !reflect.DeepEqual(f.Retired, wantRetired) {
		t.Errorf("retired: got %+v", f.Retired)
	}
	if f.RolesLine != 2 {
		t.Errorf("roles: at line %d", f.RolesLine)
	}
	if e, ok := f.Role("negative"); !ok || e.Key != -42 {
		t.Errorf("Role(negative) = %v, %v", e, ok)
	}
	if _, ok := f.Role("sweeper"); ok {
		t.Error("Role finds a retired role")
	}
	if e, ok := f.RetiredRole("sweeper"); !ok || e.Key != 1840000000 {
		t.Errorf("RetiredRole(sweeper) = %v, %v", e, ok)
	}
}

func TestInt64Limits(t *testing.T) {
	f, err := Parse("limits", []byte("roles:\n  max: 9223372036854775807\n  min: -9223372036854775808\n  hexmax: 0x7fffffffffffffff\n"), Options{FormOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1<<63 - 1, -1 << 63, 1<<63 - 1}
	for i, e := range f.Roles {
		if e.Key != want[i] {
			t.Errorf("%s = %d, want %d", e.Name, e.Key, want[i])
		}
	}
}

func TestMessagesSayWhatToDo(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"roles:\n  poller: \"1840000001\"\n", "without quotes"},
		{"roles:\n  poller: 017\n", "plain decimal"},
		{"roles:\n  poller: 1\n  poller: 2\n", "silently keep the last one"},
		{"roles:\n  a: 1\n  b: 1\n", `give "b" a new key`},
		{"roles:\n  on: 1\n", `quote it as "on"`},
		{"roles:\n  a: &x 1\n", "anchors and aliases are not allowed"},
		{"rolse:\n  a: 1\n", "allowed: roles, retired"},
	} {
		_, err := Parse("keys.yaml", []byte(tc.yaml), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error saying %q, got %v", tc.yaml, tc.want, err)
		}
	}
}

func TestFileProblems(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml"), Options{}); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("missing file: want *NotFoundError, got %T %v", err, err)
	}
	p := problemsOf(t, func() error { _, err := Load(dir, Options{}); return err }())
	if p[0].Rule != RuleFile || !strings.Contains(p[0].Message, "cannot read") {
		t.Errorf("a directory: %+v", p)
	}
	big := "roles:\n" + strings.Repeat("# padding\n", MaxFileSize/10+1)
	path := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	p = problemsOf(t, func() error { _, err := Load(path, Options{}); return err }())
	if len(p) != 1 || p[0].Rule != RuleFile || !strings.Contains(p[0].Message, "larger than") {
		t.Errorf("a file over MaxFileSize: %+v", p)
	}
}

func TestProblemsAreCapped(t *testing.T) {
	data := "roles:\n" + strings.Repeat("  a: x\n", 5000)
	p := problemsOf(t, func() error { _, err := Parse("k", []byte(data), Options{}); return err }())
	if len(p) != maxProblems+1 || !strings.Contains(p[maxProblems].Message, "more problems") {
		t.Fatalf("got %d problems, last %+v", len(p), p[len(p)-1])
	}
}

// TestRelationsAreOptional: Parse without the rules about how roles relate
// (as keys diff reads a base) refuses bad form but not shared keys, which
// keys diff reports as findings; with every rule it refuses both.
func TestRelationsAreOptional(t *testing.T) {
	data := []byte("roles:\n  a: 1\n  b: 1\n  c: 0x6c65617300000001\n")
	f, err := Parse("k", data, Options{FormOnly: true})
	if err != nil {
		t.Fatalf("Parse without relations: %v", err)
	}
	if got := ruleLines(Lint(f)); !reflect.DeepEqual(got, []string{"DUPLICATE_KEY:3", "PROBE_KEY:4"}) {
		t.Errorf("lint: %v", got)
	}
	notShared := Options{Skip: []string{RuleDuplicateKey}}
	if got := ruleLines(problemsOf(t, func() error { _, err := Parse("k", data, notShared); return err }())); !reflect.DeepEqual(got, []string{"PROBE_KEY:4"}) {
		t.Errorf("Parse without DUPLICATE_KEY: %v", got)
	}
	if _, err := Parse("k", data, Options{}); err == nil {
		t.Error("Parse with every rule accepted a shared key")
	}
	if _, err := Parse("k", []byte("roles:\n  A: 1\n"), Options{FormOnly: true}); err == nil {
		t.Error("Parse without relations accepted a bad name")
	}
}

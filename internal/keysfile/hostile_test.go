package keysfile

import (
	"os"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/test/memtest"
)

func wantRule(t *testing.T, err error, rule, text string) {
	t.Helper()
	for _, p := range problemsOf(t, err) {
		if p.Rule == rule && strings.Contains(p.Message, text) {
			return
		}
	}
	t.Fatalf("want a %s problem saying %q, got: %v", rule, text, err)
}

// TestBillionLaughs: the classic alias bomb expands to 9^9 strings in a
// decoder that resolves aliases. Here it is refused without being expanded:
// parsing it allocates about what parsing any 400-byte file does.
func TestBillionLaughs(t *testing.T) {
	data, err := os.ReadFile("testdata/lint/YAML_ALIAS/billion-laughs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var parseErr error
	n := memtest.Allocated(func() { _, parseErr = Parse("bomb.yaml", data, Options{}) })
	wantRule(t, parseErr, RuleAlias, "anchors and aliases are not allowed")
	if n > 1<<20 {
		t.Errorf("parsing a %d-byte alias bomb allocated %d bytes: aliases are being expanded", len(data), n)
	}
}

// TestAliasBombAtSizeLimit: a bomb as large as MaxFileSize allows, with
// every alias pointing at one big anchored list, still costs memory in
// proportion to its size only.
func TestAliasBombAtSizeLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &a [" + strings.Repeat("1,", 1000) + "1]\nroles:\n")
	for i := 0; b.Len() < MaxFileSize-64; i++ {
		b.WriteString("  r" + strings.Repeat("x", i%7) + ": *a\n")
	}
	data := []byte(b.String())
	var parseErr error
	n := memtest.Allocated(func() { _, parseErr = Parse("bomb.yaml", data, Options{}) })
	wantRule(t, parseErr, RuleAlias, "alias *a")
	if n > 200*uint64(len(data)) {
		t.Errorf("a %d-byte file allocated %d bytes", len(data), n)
	}
}

// TestDeepNesting: the parser's depth limit turns very deep nesting into a
// syntax error; merely deep nesting is a wrong shape. Neither recurses
// without bound.
func TestDeepNesting(t *testing.T) {
	_, err := Parse("deep.yaml", []byte("roles: "+strings.Repeat("[", 20000)), Options{})
	wantRule(t, err, RuleSyntax, "exceeded max depth")

	_, err = Parse("deep.yaml", []byte("roles:\n  poller: "+strings.Repeat("{a: ", 5000)+"1"+strings.Repeat("}", 5000)+"\n"), Options{})
	wantRule(t, err, RuleInvalidKey, "got a mapping")

	var b strings.Builder
	b.WriteString("roles:\n")
	for i := 1; i < 650; i++ { // as deep as MaxFileSize allows
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	_, err = Parse("deep.yaml", []byte(b.String()), Options{})
	wantRule(t, err, RuleInvalidKey, "got a mapping")
}

// TestNoPanicOnOddInput covers inputs that tripped YAML parsers before.
func TestNoPanicOnOddInput(t *testing.T) {
	for _, in := range []string{
		"\x00", "\xff\xfe", "---\n...\n", "? [a]\n: 1", "roles: !<tag:yaml.org,2002:int> 5", "roles: {? : }",
		"roles:\n  a: !!binary aGVsbG8=", "roles:\n  a: 0x", "roles:\n  a: -", "roles:\n  a: |\n    1\n",
		"%YAML 1.1\n---\nroles: {a: 1}", "roles:\n  \"\\ud800\": 1", strings.Repeat("- ", 5000),
	} {
		if _, err := Parse("odd.yaml", []byte(in), Options{}); err != nil {
			problemsOf(t, err)
		}
	}
}

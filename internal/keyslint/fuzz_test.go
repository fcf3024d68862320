package keyslint

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/keysfile"
)

// render writes f back as YAML, the simplest way: what Parse reads from it
// must be what f holds.
func render(f *keysfile.File) []byte {
	var b bytes.Buffer
	b.WriteString("roles:\n")
	for _, e := range f.Roles {
		fmt.Fprintf(&b, "  %q: %d\n", e.Name, e.Key)
	}
	if len(f.Retired) > 0 {
		b.WriteString("retired:\n")
		for _, e := range f.Retired {
			fmt.Fprintf(&b, "  %q: %d\n", e.Name, e.Key)
		}
	}
	return b.Bytes()
}

// roleName is the form of a role name (keys.yaml's format).
var roleName = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

func pairs(entries []keysfile.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s=%d", e.Name, e.Key))
	}
	return out
}

// FuzzParse feeds the parser (internal/keysfile) arbitrary bytes (seeded from
// testdata/fuzz/FuzzParse, every lint and diff fixture). Whatever the input,
// keysfile.Parse must not panic, must either return a file that passes every
// rule and reads back the same, or an *InvalidError whose problems each
// carry a known rule, a line inside the file and a message; and Diff must
// not panic on what the form-only parse (a base's) returns.
//
//	go test ./internal/keyslint -run '^$' -fuzz FuzzParse -fuzztime 3m
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"roles:\n  poller: 1840000001\n", "roles: {a: 0x7fffffffffffffff, b: -9223372036854775808}",
		"roles:\n  a: 1\n---\n", "roles:\n  a: &x 1\n  b: *x\n", "%YAML 1.1\n---\nroles: {}\n",
	} {
		f.Add([]byte(s))
	}
	known := map[string]bool{}
	for _, r := range keysfile.Rules() {
		known[r] = true
	}
	empty := &keysfile.File{Path: "empty", RolesLine: 1}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := keysfile.Parse("fuzz.yaml", data, keysfile.Options{})
		decoded, decodeErr := keysfile.Parse("fuzz.yaml", data, keysfile.Options{FormOnly: true})
		if err != nil {
			var inv *keysfile.InvalidError
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("error %T without problems: %v", err, err)
			}
			lines := bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r")) + 2 // YAML breaks lines at \r too
			for _, p := range inv.Problems {
				if !known[p.Rule] || p.Line < 0 || p.Line > lines || p.Message == "" {
					t.Fatalf("bad problem %+v (file has %d lines)", p, lines)
				}
			}
			if decodeErr == nil {
				Diff(decoded, decoded)
				Diff(empty, decoded)
				Diff(decoded, empty)
			}
			return
		}
		if decodeErr != nil {
			t.Fatalf("Parse accepted what the form-only parse refused: %v", decodeErr)
		}
		for _, e := range append(append([]keysfile.Entry{}, file.Roles...), file.Retired...) {
			if !roleName.MatchString(e.Name) || e.Line < 1 {
				t.Fatalf("accepted entry %+v", e)
			}
		}
		if p := keysfile.Lint(file); len(p) > 0 {
			t.Fatalf("Parse returned a file that fails lint: %+v", p)
		}
		again, err := keysfile.Parse("again.yaml", render(file), keysfile.Options{})
		if err != nil {
			t.Fatalf("a rendered valid file does not parse: %v\n%s", err, render(file))
		}
		if !reflect.DeepEqual(pairs(again.Roles), pairs(file.Roles)) || !reflect.DeepEqual(pairs(again.Retired), pairs(file.Retired)) {
			t.Fatalf("round trip changed the map:\n%v %v\n%v %v", pairs(file.Roles), pairs(file.Retired), pairs(again.Roles), pairs(again.Retired))
		}
		if findings := Diff(file, again); len(findings) > 0 {
			t.Fatalf("a file differs from its own copy: %+v", findings)
		}
		for _, fd := range Diff(empty, file) {
			if fd.Rule != RuleRoleAdded || !strings.Contains(fd.Message, fd.Role) {
				t.Fatalf("from an empty file, only additions: %+v", fd)
			}
		}
	})
}

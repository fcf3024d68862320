package keys

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/internal/keysfile"
)

// The parser and its rules are tested in internal/keysfile; these tests
// hold this package's types to what it returns.

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	data := "roles:\n  poller: 1840000001\n  negative: -42\n  hex: 0x6d6b000000000001\nretired:\n  sweeper: 1840000000\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		Path:      path,
		Roles:     []Entry{{"poller", 1840000001, 2}, {"negative", -42, 3}, {"hex", 0x6d6b000000000001, 4}},
		Retired:   []Entry{{"sweeper", 1840000000, 6}},
		RolesLine: 1,
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", f, want)
	}
	if e, ok := f.Role("negative"); !ok || e.Key != -42 {
		t.Errorf("Role(negative) = %v, %v", e, ok)
	}
	if _, ok := f.Role("sweeper"); ok {
		t.Error("Role finds a retired role")
	}
	if got := f.NamesByKey(); !reflect.DeepEqual(got, map[int64]string{1840000001: "poller", -42: "negative", 0x6d6b000000000001: "hex"}) {
		t.Errorf("NamesByKey: %v", got)
	}
	if got := (*File)(nil).NamesByKey(); got != nil {
		t.Errorf("NamesByKey of a nil File: %v", got)
	}
	if f, err := Parse("empty.yaml", []byte("roles:\n")); err != nil || f.Roles != nil || f.Retired != nil {
		t.Errorf("a file without roles: %+v, %v", f, err)
	}
}

// TestErrors: Load and Parse refuse what keysfile refuses with every rule
// applied, with this package's error types, the same problems and the same
// messages.
func TestErrors(t *testing.T) {
	data := []byte("roles:\n  a: 1\n  b: 1\n  C: 2\n")
	_, err := Parse("k.yaml", data)
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("want an *InvalidError, got %T: %v", err, err)
	}
	_, want := keysfile.Parse("k.yaml", data, keysfile.Options{})
	var wantInv *keysfile.InvalidError
	if !errors.As(want, &wantInv) {
		t.Fatalf("keysfile: %T %v", want, want)
	}
	if len(inv.Problems) != 2 || inv.Problems[0].Rule != keysfile.RuleDuplicateKey || inv.Problems[1].Rule != keysfile.RuleInvalidName {
		t.Errorf("problems: %+v", inv.Problems)
	}
	for i, p := range inv.Problems {
		if keysfile.Problem(p) != wantInv.Problems[i] {
			t.Errorf("problem %d: %+v, keysfile %+v", i, p, wantInv.Problems[i])
		}
	}
	if err.Error() != want.Error() {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
	if got := inv.Problems[1].Location("k.yaml"); got != "k.yaml:4" {
		t.Errorf("Location: %s", got)
	}
	if got := (Problem{}).Location("k.yaml"); got != "k.yaml" {
		t.Errorf("Location of a problem with the whole file: %s", got)
	}

	missing := filepath.Join(t.TempDir(), "missing.yaml")
	_, err = Load(missing)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Path != missing || err.Error() != "keys file "+missing+" not found" {
		t.Errorf("missing file: %T %v", err, err)
	}
	for _, err := range []error{inv, nf} {
		if !errors.Is(err, errkind.Input) {
			t.Errorf("%T is not errkind.Input", err)
		}
	}
}

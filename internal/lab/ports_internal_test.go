package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestPortRegistry: labs that reserve ports at the same time get different
// ones, each recorded with its lab's RunDir; a record whose lab is gone no
// longer reserves anything, and a lab releases only its own records.
func TestPortRegistry(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "ports") // a registry of this test's own
	defer func(saved string) { portRegistryDir = saved }(portRegistryDir)
	portRegistryDir = reg
	a, b := t.TempDir(), t.TempDir()
	gone := filepath.Join(t.TempDir(), "gone")

	pa, err := reservePorts(a, 20)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := reservePorts(b, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pb {
		if slices.Contains(pa, p) {
			t.Errorf("port %d reserved by both labs: %v and %v", p, pa, pb)
		}
	}
	owner := func(p int) string {
		o, err := os.ReadFile(filepath.Join(reg, strconv.Itoa(p)))
		if err != nil {
			return ""
		}
		return string(o)
	}
	for _, p := range pa {
		if owner(p) != a {
			t.Errorf("port %d is recorded for %q, want %q", p, owner(p), a)
		}
	}
	if info, err := os.Stat(reg); err != nil || info.Mode().Perm() != 0o777 || info.Mode()&os.ModeSticky == 0 {
		t.Errorf("registry %s: %v, %v; want a sticky directory every user can write", reg, info.Mode(), err)
	}

	// A record left by a lab whose RunDir is gone (killed before Stop) is
	// swept up by the next reservation.
	if err := os.WriteFile(filepath.Join(reg, "1"), []byte(gone), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := reservePorts(b, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(reg, "1")); !os.IsNotExist(err) {
		t.Errorf("the record of a gone lab is still there: %v", err)
	}

	releasePorts(a, append(slices.Clone(pa), pb[0]))
	for _, p := range pa {
		if owner(p) != "" {
			t.Errorf("port %d still recorded after its lab released it", p)
		}
	}
	if owner(pb[0]) != b {
		t.Errorf("lab a released lab b's port %d", pb[0])
	}
}

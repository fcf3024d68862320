package apicheck

import (
	"os/exec"
	"strings"
	"testing"
)

// devSupport reports whether path is the project's development support:
// under test/ (tests, benchmarks, fixtures) or tools/ (generators).
func devSupport(path string) bool {
	return strings.HasPrefix(path, module+"/test/") || strings.HasPrefix(path, module+"/tools/")
}

// TestInternalIsWhatShips: every package under internal/ is built into the
// leasectl binary, and nothing of test/ or tools/ is. A package that only
// tests, benchmarks or generates belongs in test/ or tools/, so that
// internal/ shows exactly what ships.
func TestInternalIsWhatShips(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	inBinary := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		inBinary[p] = true
		if devSupport(p) {
			t.Errorf("the binary imports %s, development support: move what ships under internal/", p)
		}
	}
	out, err = exec.Command("go", "list", module+"/internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		n++
		if !inBinary[p] {
			t.Errorf("%s is under internal/ but not in the binary (go list -deps .): move it to test/ (tests, benchmarks, fixtures) or tools/ (generators)", p)
		}
	}
	if n == 0 {
		t.Fatal("go list found no package under internal/")
	}
}

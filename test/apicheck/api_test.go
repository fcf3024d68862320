package apicheck

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leasectl/leasectl"

// public are the packages outside internal/, test/ and tools/ and what
// they are: each is a promise to users, so a new one is a decision, not an
// accident. test/ (tests, benchmarks, fixtures) and tools/ (generators) are
// the project's own development support, with no API promise.
var public = map[string]string{
	module:                      "the leasectl binary (package main)",
	module + "/cmd":             "the CLI's commands, for the binary and its generated docs; no API promise",
	module + "/examples/worker": "an example program",
	module + "/keys":            "keys.yaml for Go services: Load (or Parse) checks a file as keys lint does, Role gives a role's key; exports listed in exports_test.go (lint docs, diff and git are internal/keyslint)",
	module + "/lease":           "the lease, and RunGroup",
	module + "/lease/leasehttp": "a lease's metrics and health checks",
	module + "/lease/leaseapi":  "leasectl serve's local HTTP API over a group's leases, for applications in any language",
	module + "/locks":           "advisory locks as pg_locks shows them, and the failover",
	module + "/probe":           "the session-stability probe",
	module + "/supervisor":      "a program as a lease's work, as leasectl run runs it",
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestPublicPackages fails when a package appears outside internal/, test/
// and tools/ that
// is not one of the public ones, or one of them is gone, and when a
// library package imports the CLI (the wrong way round: commands render,
// packages decide).
func TestPublicPackages(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range list(t) {
		if strings.Contains(p.ImportPath, "/internal/") || strings.HasSuffix(p.ImportPath, "/internal") || devSupport(p.ImportPath) {
			continue
		}
		seen[p.ImportPath] = true
		if _, ok := public[p.ImportPath]; !ok {
			t.Errorf("%s is a new public package: move it under internal/ (if the binary uses it), test/ or tools/, or add it to the public list here with what users may rely on", p.ImportPath)
		}
		if p.ImportPath != module && slices.Contains(p.Imports, module+"/cmd") {
			t.Errorf("%s imports %s/cmd: a library package must not depend on the CLI", p.ImportPath, module)
		}
	}
	for path := range public {
		if !seen[path] {
			t.Errorf("public package %s is gone: remove it from the list", path)
		}
	}
}

// Package runtimes finds the language runtimes that the documentation's
// client programs (fenced writes, serve's API) run with in the tests:
// Debian's python3 with psycopg 3, node with node-postgres from the npm
// registry, ruby with ruby-pg, and go. A missing runtime fails the test
// with the package to install; it never skips.
package runtimes

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NodePgVersion is the node-postgres the Node programs run with.
const NodePgVersion = "8.23.1"

// Need returns the path of the program name, or fails t saying how to
// install it.
func Need(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (%s): %v", name, install, err)
	}
	return path
}

// PsycopgPython returns a Python 3 that has psycopg 3: Debian's
// /usr/bin/python3 with python3-psycopg before whatever python3 PATH finds
// first (a pyenv, say).
func PsycopgPython(t testing.TB) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if path, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, path)
	}
	for _, py := range candidates {
		if exec.Command(py, "-c", "import psycopg").Run() == nil {
			return py
		}
	}
	t.Fatalf("no python3 with psycopg 3 (apt-get install python3-psycopg) among %v", candidates)
	return ""
}

// LinkNodePg makes node-postgres importable from dir: npm installs it once
// into the user's cache directory, shared by every test package, and dir
// gets a node_modules link to it (an ES module's imports ignore NODE_PATH).
func LinkNodePg(t testing.TB, dir string) {
	t.Helper()
	npm := Need(t, "npm", "apt-get install nodejs npm")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(cache, "leasectl-tests", "node-pg-"+NodePgVersion)
	if _, err := os.Stat(filepath.Join(prefix, "node_modules", "pg", "package.json")); err != nil {
		if err := os.MkdirAll(filepath.Dir(prefix), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(prefix), "npm-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, "pg@"+NodePgVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install pg@%s: %v\n%s", NodePgVersion, err, out)
		}
		if err := os.Rename(tmp, prefix); err != nil {
			if _, serr := os.Stat(filepath.Join(prefix, "node_modules", "pg", "package.json")); serr != nil {
				t.Fatal(err) // not another test process that installed it first
			}
		}
	}
	if err := os.Symlink(filepath.Join(prefix, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
}

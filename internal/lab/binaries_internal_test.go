package lab

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTree makes, under root, an executable file at each path (relative to
// root) and returns root.
func fakeTree(t *testing.T, paths ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fakeSearch searches root, with pg_config's answer bindir ("" for no
// pg_config) and only the programs of path on PATH.
func fakeSearch(root, goos, bindir string, path map[string]string) binarySearch {
	return binarySearch{
		root:           root,
		goos:           goos,
		pgConfigBindir: func() string { return bindir },
		lookPath: func(name string) (string, error) {
			if p, ok := path[name]; ok {
				return p, nil
			}
			return "", exec.ErrNotFound
		},
	}
}

// TestPostgreSQLSearchOrder: the directories that may hold PostgreSQL's
// programs come in a fixed order: the newest Debian version only, then
// pg_config --bindir, then Homebrew's postgresql@* kegs, newest version
// first by number (16 before 9.6), Apple silicon's before Intel's, then
// Homebrew's and /usr/local's bin.
func TestPostgreSQLSearchOrder(t *testing.T) {
	var paths []string
	for _, d := range []string{
		"usr/lib/postgresql/9.6/bin", "usr/lib/postgresql/14/bin", "usr/lib/postgresql/15/bin",
		"opt/homebrew/opt/postgresql@9.6/bin", "opt/homebrew/opt/postgresql@14/bin", "opt/homebrew/opt/postgresql@16/bin",
		"usr/local/opt/postgresql@15/bin", "usr/local/opt/postgresql@17/bin",
		"opt/homebrew/bin", "usr/local/bin", "pgconfig/bin",
	} {
		paths = append(paths, d+"/initdb")
	}
	// Not a keg of PostgreSQL: left out.
	paths = append(paths, "opt/homebrew/opt/postgis/bin/initdb")
	root := fakeTree(t, paths...)
	bindir := filepath.Join(root, "pgconfig/bin")
	want := []string{
		root + "/usr/lib/postgresql/15/bin",
		bindir,
		root + "/opt/homebrew/opt/postgresql@16/bin",
		root + "/opt/homebrew/opt/postgresql@14/bin",
		root + "/opt/homebrew/opt/postgresql@9.6/bin",
		root + "/usr/local/opt/postgresql@17/bin",
		root + "/usr/local/opt/postgresql@15/bin",
		root + "/opt/homebrew/bin",
		root + "/usr/local/bin",
	}
	s := fakeSearch(root, "darwin", bindir, nil)
	if got := s.pgDirs(); !slices.Equal(got, want) {
		t.Fatalf("search order:\n got %q\nwant %q", got, want)
	}
	// Each program comes from the first directory that has it: take them
	// away one by one, and the next one is found.
	for _, dir := range want {
		got, err := s.find("initdb", "postgresql", pgSearched, s.pgDirs()...)
		if err != nil || got != filepath.Join(dir, "initdb") {
			t.Fatalf("initdb: got %q, %v; want it from %s", got, err, dir)
		}
		if err := os.Remove(got); err != nil {
			t.Fatal(err)
		}
	}
	// Then PATH.
	s.lookPath = fakeSearch(root, "darwin", bindir, map[string]string{"initdb": "/somewhere/initdb"}).lookPath
	if got, err := s.find("initdb", "postgresql", pgSearched, s.pgDirs()...); err != nil || got != "/somewhere/initdb" {
		t.Fatalf("initdb: got %q, %v; want it from PATH", got, err)
	}

	// Without pg_config, or with no Debian directory, the others keep their order.
	s = fakeSearch(fakeTree(t, "opt/homebrew/opt/postgresql@15/bin/pg_ctl", "usr/local/bin/pg_ctl"), "darwin", "", nil)
	if got, want := s.pgDirs(), []string{s.root + "/opt/homebrew/opt/postgresql@15/bin", s.root + "/opt/homebrew/bin", s.root + "/usr/local/bin"}; !slices.Equal(got, want) {
		t.Errorf("without pg_config and Debian:\n got %q\nwant %q", got, want)
	}
}

// TestFindBinariesInAFakeTree: a Debian system finds every program where
// Debian installs it; a Homebrew one in the newest keg and Homebrew's bin.
// Directories, and files that are not executable, do not count.
func TestFindBinariesInAFakeTree(t *testing.T) {
	pg := []string{"initdb", "pg_ctl", "postgres", "pg_basebackup"}
	var debian, brew []string
	for _, p := range pg {
		debian = append(debian, "usr/lib/postgresql/15/bin/"+p, "usr/lib/postgresql/13/bin/"+p)
		brew = append(brew, "opt/homebrew/opt/postgresql@15/bin/"+p, "opt/homebrew/opt/postgresql@14/bin/"+p)
	}
	debianRoot := fakeTree(t, append(debian, "usr/sbin/pgbouncer", "usr/local/bin/pgbouncer")...)
	brewRoot := fakeTree(t, append(brew, "opt/homebrew/bin/pgbouncer", "usr/local/bin/pgbouncer")...)
	// A directory called pgbouncer and a pgbouncer that is not executable
	// come first, and are passed over.
	if err := os.MkdirAll(filepath.Join(brewRoot, "usr/sbin/pgbouncer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(brewRoot, "usr/local/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(brewRoot, "usr/local/sbin/pgbouncer"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, pgDir, pgbouncer string
	}{
		{"debian", debianRoot, "usr/lib/postgresql/15/bin", "usr/sbin/pgbouncer"},
		{"homebrew", brewRoot, "opt/homebrew/opt/postgresql@15/bin", "opt/homebrew/bin/pgbouncer"},
	} {
		b, err := fakeSearch(tc.root, "linux", "", nil).binaries()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		dir := filepath.Join(tc.root, tc.pgDir)
		want := Binaries{Initdb: dir + "/initdb", PgCtl: dir + "/pg_ctl", Postgres: dir + "/postgres", PgBasebackup: dir + "/pg_basebackup",
			PgBouncer: filepath.Join(tc.root, tc.pgbouncer)}
		if b != want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, b, want)
		}
	}
}

// TestMissingBinaryTellsHowToInstall: the error names the program, where
// it was looked for and the install command of the system: apt-get on
// Linux, Homebrew on macOS.
func TestMissingBinaryTellsHowToInstall(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		goos, pgbouncerOnly string
		want                []string
	}{
		{"linux", "", []string{"initdb not found in /usr/lib/postgresql/*/bin, pg_config --bindir, /opt/homebrew/opt/postgresql@*/bin, /usr/local/opt/postgresql@*/bin, /opt/homebrew/bin, /usr/local/bin or PATH",
			"(install it: sudo apt-get install -y postgresql)"}},
		{"darwin", "", []string{"initdb not found in ", "(install it: brew install postgresql@15 pgbouncer)"}},
		{"linux", "yes", []string{"pgbouncer not found in /usr/sbin, /usr/local/sbin, /opt/homebrew/bin, /usr/local/bin or PATH", "(install it: sudo apt-get install -y pgbouncer)"}},
		{"darwin", "yes", []string{"pgbouncer not found in ", "(install it: brew install postgresql@15 pgbouncer)"}},
	} {
		root := empty
		if tc.pgbouncerOnly != "" {
			var pg []string
			for _, p := range []string{"initdb", "pg_ctl", "postgres", "pg_basebackup"} {
				pg = append(pg, "usr/lib/postgresql/15/bin/"+p)
			}
			root = fakeTree(t, pg...)
		}
		_, err := fakeSearch(root, tc.goos, "", nil).binaries()
		var missing *MissingBinaryError
		if !errors.As(err, &missing) {
			t.Fatalf("%s: got %v, want a *MissingBinaryError", tc.goos, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.goos, err, w)
			}
		}
	}
	for pkg, want := range map[string]string{"pgpool2": "brew install pgpool-ii", "haproxy": "brew install haproxy", "socat": "brew install socat", "etcd-server": "brew install etcd"} {
		if got := installCommand("darwin", pkg); got != want {
			t.Errorf("macOS install of %s: %q, want %q", pkg, got, want)
		}
		if got := installCommand("linux", pkg); got != "sudo apt-get install -y "+pkg {
			t.Errorf("Linux install of %s: %q", pkg, got)
		}
	}
}

// TestPgConfigBindir: pg_config on PATH is asked for its bindir; without
// one, or when it fails, there is none.
func TestPgConfigBindir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if got := pgConfigBindir(); got != "" {
		t.Errorf("no pg_config on PATH: got %q", got)
	}
	script := "#!/bin/sh\n[ \"$1\" = --bindir ] && echo /opt/pg/17/bin && exit 0\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "pg_config"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := pgConfigBindir(); got != "/opt/pg/17/bin" {
		t.Errorf("pg_config --bindir: got %q, want /opt/pg/17/bin", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "pg_config"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := pgConfigBindir(); got != "" {
		t.Errorf("a failing pg_config: got %q", got)
	}
}

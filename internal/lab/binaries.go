package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// MissingBinaryError reports a server binary that is not installed.
type MissingBinaryError struct {
	Name string
	// Package is the Debian package that installs it.
	Package string
	// Searched are the places looked in before PATH, in order, as patterns
	// ("/usr/lib/postgresql/*/bin").
	Searched []string
	// Install is the command that installs it on this system: apt-get on
	// Linux, Homebrew on macOS.
	Install string
}

func (e *MissingBinaryError) Error() string {
	where := "PATH"
	if len(e.Searched) > 0 {
		where = strings.Join(e.Searched, ", ") + " or PATH"
	}
	return fmt.Sprintf("%s not found in %s (install it: %s)", e.Name, where, e.Install)
}

// Binaries are the paths of the programs a lab runs.
type Binaries struct {
	Initdb       string
	PgCtl        string
	Postgres     string
	PgBasebackup string
	PgBouncer    string
	// Patroni, Etcd and HAProxy are found only for a lab with Options.HA;
	// empty otherwise.
	Patroni string `json:",omitempty"`
	Etcd    string `json:",omitempty"`
	HAProxy string `json:",omitempty"`
}

// FindBinaries locates initdb, pg_ctl, postgres and pg_basebackup, and
// pgbouncer. The PostgreSQL programs are looked for, in this order, in the
// newest /usr/lib/postgresql/*/bin (Debian's layout), in the directory that
// `pg_config --bindir` names when pg_config is on PATH, in Homebrew's
// postgresql@* kegs, newest version first (/opt/homebrew/opt on Apple
// silicon, then /usr/local/opt on Intel Macs), in /opt/homebrew/bin and
// /usr/local/bin, and then in PATH; pgbouncer in /usr/sbin,
// /usr/local/sbin, /opt/homebrew/bin, /usr/local/bin and then PATH. Each
// program is taken from the first place that has it.
func FindBinaries() (Binaries, error) { return systemSearch().binaries() }

// binarySearch is where the lab looks for programs. FindBinaries searches
// this system; tests search a fake directory tree.
type binarySearch struct {
	// root is put in front of every directory the lab knows of: "" for
	// this system, a fake tree in tests.
	root string
	// goos picks the install command that a *MissingBinaryError gives.
	goos string
	// pgConfigBindir returns the output of `pg_config --bindir`, or ""
	// when pg_config is not on PATH or fails.
	pgConfigBindir func() string
	// lookPath finds a program in PATH.
	lookPath func(string) (string, error)
}

func systemSearch() binarySearch {
	return binarySearch{goos: runtime.GOOS, pgConfigBindir: pgConfigBindir, lookPath: exec.LookPath}
}

// Where the programs are looked for before PATH, as patterns for error
// messages (see FindBinaries for the order).
var (
	pgSearched = []string{"/usr/lib/postgresql/*/bin", "pg_config --bindir", "/opt/homebrew/opt/postgresql@*/bin",
		"/usr/local/opt/postgresql@*/bin", "/opt/homebrew/bin", "/usr/local/bin"}
	pgBouncerDirs = []string{"/usr/sbin", "/usr/local/sbin", "/opt/homebrew/bin", "/usr/local/bin"}
	// haDirs hold patroni, etcd, and haproxy for an HA lab.
	haDirs = []string{"/usr/bin", "/usr/sbin", "/opt/homebrew/bin", "/usr/local/bin", "/usr/local/sbin"}
)

func (s binarySearch) binaries() (Binaries, error) {
	var b Binaries
	pgDirs := s.pgDirs()
	var err error
	if b.Initdb, err = s.find("initdb", "postgresql", pgSearched, pgDirs...); err != nil {
		return b, err
	}
	if b.PgCtl, err = s.find("pg_ctl", "postgresql", pgSearched, pgDirs...); err != nil {
		return b, err
	}
	if b.Postgres, err = s.find("postgres", "postgresql", pgSearched, pgDirs...); err != nil {
		return b, err
	}
	if b.PgBasebackup, err = s.find("pg_basebackup", "postgresql", pgSearched, pgDirs...); err != nil {
		return b, err
	}
	if b.PgBouncer, err = s.find("pgbouncer", "pgbouncer", pgBouncerDirs, s.rooted(pgBouncerDirs)...); err != nil {
		return b, err
	}
	return b, nil
}

// pgDirs are the directories that may hold PostgreSQL's server programs,
// in the order FindBinaries gives.
func (s binarySearch) pgDirs() []string {
	var dirs []string
	if debian := s.newestFirst("/usr/lib/postgresql/*/bin"); len(debian) > 0 {
		dirs = append(dirs, debian[0])
	}
	if d := s.pgConfigBindir(); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, s.newestFirst("/opt/homebrew/opt/postgresql@*/bin")...)
	dirs = append(dirs, s.newestFirst("/usr/local/opt/postgresql@*/bin")...)
	return append(dirs, s.rooted([]string{"/opt/homebrew/bin", "/usr/local/bin"})...)
}

// newestFirst returns the directories that match pattern (under root),
// whose parent's name ends in a version (15 in /usr/lib/postgresql/15/bin,
// 16 in postgresql@16/bin), the highest version first.
func (s binarySearch) newestFirst(pattern string) []string {
	dirs, _ := filepath.Glob(s.root + pattern)
	sort.SliceStable(dirs, func(i, j int) bool {
		return versionLess(pgVersion(dirs[j]), pgVersion(dirs[i]))
	})
	return dirs
}

func (s binarySearch) rooted(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = s.root + d
	}
	return out
}

// find returns the first executable called name in dirs, or else in PATH;
// when there is none, a *MissingBinaryError naming the Debian package pkg
// that installs it, the places searched and this system's install command.
func (s binarySearch) find(name, pkg string, searched []string, dirs ...string) (string, error) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := s.lookPath(name); err == nil {
		return p, nil
	}
	return "", &MissingBinaryError{Name: name, Package: pkg, Searched: searched, Install: installCommand(s.goos, pkg)}
}

// FindProgram returns the first executable called name in dirs, or else
// in PATH; when there is none, a *MissingBinaryError that names the Debian
// package pkg and this system's command to install it.
func FindProgram(name, pkg string, dirs []string) (string, error) {
	s := systemSearch()
	return s.find(name, pkg, dirs, s.rooted(dirs)...)
}

// findHABinaries adds patroni (Debian package patroni), etcd (etcd-server)
// and haproxy to b.
func findHABinaries(b *Binaries) error {
	s := systemSearch()
	dirs := s.rooted(haDirs)
	var err error
	if b.Patroni, err = s.find("patroni", "patroni", haDirs, dirs...); err != nil {
		return err
	}
	if b.Etcd, err = s.find("etcd", "etcd-server", haDirs, dirs...); err != nil {
		return err
	}
	if b.HAProxy, err = s.find("haproxy", "haproxy", haDirs, dirs...); err != nil {
		return err
	}
	return nil
}

// installCommand is the command that installs the Debian package pkg, or
// its equivalent, on the system goos: apt-get on Linux, Homebrew on macOS.
func installCommand(goos, pkg string) string {
	if goos != "darwin" {
		return "sudo apt-get install -y " + pkg
	}
	switch pkg {
	case "postgresql", "pgbouncer":
		return "brew install postgresql@15 pgbouncer"
	case "pgpool2":
		return "brew install pgpool-ii"
	case "etcd-server":
		return "brew install etcd"
	case "patroni":
		return `pip3 install "patroni[etcd3]" psycopg2-binary`
	}
	return "brew install " + pkg
}

// pgConfigBindir returns what `pg_config --bindir` prints, or "" when
// pg_config is not on PATH or fails.
func pgConfigBindir() string {
	p, err := exec.LookPath("pg_config")
	if err != nil {
		return ""
	}
	out, err := exec.Command(p, "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// pgVersion returns the version at the end of a bin directory's parent:
// [15] for /usr/lib/postgresql/15/bin, [9 6] for postgresql@9.6/bin; nil
// when there is none.
func pgVersion(binDir string) []int {
	v := filepath.Base(filepath.Dir(binDir))
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		v = v[i+1:]
	}
	var out []int
	for _, part := range strings.Split(v, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			break
		}
		out = append(out, n)
	}
	return out
}

// versionLess orders versions number by number; a version without a
// number is the lowest.
func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// MissingBinaryError reports a server binary that is not installed.
type MissingBinaryError struct {
	Name    string
	Package string
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("%s not found in /usr/lib/postgresql/*/bin, /usr/sbin, /usr/bin or PATH (install it: sudo apt-get install -y %s)", e.Name, e.Package)
}

// Binaries are the paths of the programs a lab runs.
type Binaries struct {
	Initdb       string
	PgCtl        string
	Postgres     string
	PgBasebackup string
	PgBouncer    string
	// PgPool, HAProxy and Socat are found only for a lab that asks for
	// pgpool-II, HAProxy instances or relays; empty otherwise.
	PgPool  string `json:",omitempty"`
	HAProxy string `json:",omitempty"`
	Socat   string `json:",omitempty"`
	// Patroni and Etcd are found only for a lab with Options.HA (which
	// needs HAProxy too); empty otherwise.
	Patroni string `json:",omitempty"`
	Etcd    string `json:",omitempty"`
}

// FindBinaries locates initdb, pg_ctl, postgres and pg_basebackup in the
// newest /usr/lib/postgresql/*/bin (Debian's layout) or PATH, and pgbouncer
// in PATH or /usr/sbin.
func FindBinaries() (Binaries, error) {
	var b Binaries
	pgDir := newestPGBinDir()
	var err error
	if b.Initdb, err = findBinary("initdb", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgCtl, err = findBinary("pg_ctl", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.Postgres, err = findBinary("postgres", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgBasebackup, err = findBinary("pg_basebackup", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgBouncer, err = findBinary("pgbouncer", "pgbouncer", "/usr/sbin", "/usr/local/sbin", "/usr/local/bin"); err != nil {
		return b, err
	}
	return b, nil
}

// findBinary returns the first executable called name in dirs, or else in
// PATH; when there is none, a *MissingBinaryError naming the Debian package
// pkg that installs it.
func findBinary(name, pkg string, dirs ...string) (string, error) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", &MissingBinaryError{Name: name, Package: pkg}
}

// findFrontDoorBinaries adds to b the programs of the front doors opts asks
// for, and only those: pgpool (Debian package pgpool2) for PgPool, haproxy
// for HAProxy and socat for Relays, each looked for in /usr/sbin, /usr/bin
// and PATH. A lab without front doors needs none of them.
func findFrontDoorBinaries(b *Binaries, opts Options) error {
	var err error
	if opts.PgPool != nil {
		if b.PgPool, err = findBinary("pgpool", "pgpool2", "/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"); err != nil {
			return err
		}
	}
	if len(opts.HAProxy) > 0 {
		if b.HAProxy, err = findBinary("haproxy", "haproxy", "/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"); err != nil {
			return err
		}
	}
	if len(opts.Relays) > 0 {
		if b.Socat, err = findBinary("socat", "socat", "/usr/bin", "/usr/sbin", "/usr/local/bin"); err != nil {
			return err
		}
	}
	return nil
}

func newestPGBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		return pgMajor(dirs[i]) > pgMajor(dirs[j])
	})
	if len(dirs) == 0 {
		return ""
	}
	return dirs[0]
}

func pgMajor(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}

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
	return fmt.Sprintf("%s not found in /usr/lib/postgresql/*/bin, /usr/sbin or PATH (install it: sudo apt-get install -y %s)", e.Name, e.Package)
}

// Binaries are the paths of the programs a lab runs.
type Binaries struct {
	Initdb       string
	PgCtl        string
	Postgres     string
	PgBasebackup string
	PgBouncer    string
}

// FindBinaries locates initdb, pg_ctl, postgres and pg_basebackup in the
// newest /usr/lib/postgresql/*/bin (Debian's layout) or PATH, and pgbouncer
// in PATH or /usr/sbin.
func FindBinaries() (Binaries, error) {
	var b Binaries
	pgDir := newestPGBinDir()
	find := func(name, pkg string, dirs ...string) (string, error) {
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
	var err error
	if b.Initdb, err = find("initdb", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgCtl, err = find("pg_ctl", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.Postgres, err = find("postgres", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgBasebackup, err = find("pg_basebackup", "postgresql", pgDir); err != nil {
		return b, err
	}
	if b.PgBouncer, err = find("pgbouncer", "pgbouncer", "/usr/sbin", "/usr/local/sbin", "/usr/local/bin"); err != nil {
		return b, err
	}
	return b, nil
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

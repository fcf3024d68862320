package lab

import (
	"errors"
	"os"
	"os/user"
	"strconv"
)

// programPath is the PATH the lab's programs run with.
const programPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// MaxSocketPath is the longest path a unix socket may have on Linux
// (sun_path holds 108 bytes, the last a NUL).
const MaxSocketPath = 107

// Support reports why the lab cannot run on this system, or nil. Linux runs
// it.
func Support() error { return nil }

// serverCredential decides which OS user runs the servers: the caller,
// unless the caller is root, which both servers refuse; then "postgres".
func serverCredential() (*credential, string, error) {
	if os.Geteuid() != 0 {
		return nil, callerName(), nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, "", errors.New("running as root, and PostgreSQL and PgBouncer refuse to run as root: the lab runs them as the OS user \"postgres\", which does not exist (install the postgresql package, which creates it, or run as a normal user)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &credential{uid: uid, gid: gid}, "postgres", nil
}

package lab

import (
	"errors"
	"os"
)

// programPath is the PATH the lab's programs run with: Homebrew's first
// (Apple silicon, then Intel Macs), for the programs that start others by
// name.
const programPath = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// MaxSocketPath is the longest path a unix socket may have on macOS
// (sun_path holds 104 bytes, the last a NUL).
const MaxSocketPath = 103

// Support reports why the lab cannot run on this system, or nil. macOS
// runs it, with Homebrew's PostgreSQL and PgBouncer (see FindBinaries).
func Support() error { return nil }

// serverCredential decides which OS user runs the servers: the caller.
// PostgreSQL and PgBouncer refuse root, and macOS has no "postgres" user
// to switch to as Debian's packages create on Linux (Homebrew's servers
// run as the user who installed them), so root is refused.
func serverCredential() (*credential, string, error) {
	if os.Geteuid() == 0 {
		return nil, "", errors.New("running as root, and PostgreSQL and PgBouncer refuse to run as root (initdb stops at once): on macOS the lab runs them as the user who starts it, so run it as a normal user, without sudo")
	}
	return nil, callerName(), nil
}

package lab

import "fmt"

// programPath is the PATH the lab's programs would run with; on Windows
// the lab runs none.
const programPath = ""

// MaxSocketPath is the longest path a unix socket may have (sun_path holds
// 108 bytes on Windows too, the last a NUL); on Windows the lab makes none.
const MaxSocketPath = 107

// Support refuses: the lab starts PostgreSQL, PgBouncer and its other daemons
// as local processes, which it manages with Unix process groups, signals,
// unix sockets and file ownership, none of which Windows has. Every other
// command works on Windows, against any server.
func Support() error {
	return fmt.Errorf("%w, and this is Windows: run leasectl lab on Linux or macOS (WSL or a Linux container will do); the other commands work here, against any PostgreSQL", ErrUnsupported)
}

// serverCredential is never reached on Windows (Start and Load refuse
// first): the caller.
func serverCredential() (*credential, string, error) { return nil, callerName(), nil }

//go:build unix

package lease

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// dupSocket duplicates conn's socket for a child process to inherit (see
// Session.DupSocket).
func dupSocket(conn *pgx.Conn, name string) (*os.File, error) {
	nc := conn.PgConn().Conn()
	for {
		u, ok := nc.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("lease socket: %T has no file descriptor", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("lease socket: %w", err)
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(f uintptr) { fd, dupErr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 3) }); err != nil {
		return nil, fmt.Errorf("lease socket: %w", err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("lease socket: dup: %w", dupErr)
	}
	// os.NewFile (unlike net.Conn.File) leaves the shared O_NONBLOCK flag
	// alone when os/exec asks for the descriptor: clearing it would make
	// pgx's reads of the lease connection block past their deadlines.
	return os.NewFile(uintptr(fd), name), nil
}

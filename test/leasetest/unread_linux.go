package leasetest

import (
	"net"

	"golang.org/x/sys/unix"
)

// unread returns how many bytes are queued on c, not yet read (SIOCINQ:
// what the peer wrote, less what this side read).
func unread(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}

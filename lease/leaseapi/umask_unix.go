//go:build unix

package leaseapi

import (
	"net"
	"syscall"
)

// listenPrivate creates the unix socket at path with mode 0600 from the
// start (the umask), so that no other user can connect before the chmod.
func listenPrivate(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}

package leaseapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultSocket is the default unix socket of the API for a group named
// name: leasectl-serve-NAME.sock in $XDG_RUNTIME_DIR, else in the
// temporary directory.
func DefaultSocket(name string) string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "leasectl-serve-"+name+".sock")
}

// InUseError says that another process already serves at the address.
type InUseError struct {
	Addr string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("%s is in use: another process (another leasectl serve?) answers there; stop it, or give this one another --listen", e.Addr)
}

// Listen listens at addr: "unix:PATH" (a socket of mode 0600; a stale
// socket file that no process answers on is removed first) or "HOST:PORT"
// (an empty HOST means 127.0.0.1: the API is local unless the caller names
// another address). It returns the listener and the address in the form
// "unix:PATH" or "HOST:PORT" with the port bound. An address in use is an
// *InUseError.
func Listen(addr string) (net.Listener, string, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return listenUnix(path)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("invalid address %q: want unix:PATH or HOST:PORT, e.g. 127.0.0.1:8765", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, "", &InUseError{Addr: addr}
		}
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, l.Addr().String(), nil
}

func listenUnix(path string) (net.Listener, string, error) {
	if path == "" {
		return nil, "", errors.New("invalid address \"unix:\": name the socket's path, e.g. unix:/run/leasectl/serve.sock")
	}
	shown := "unix:" + path
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, "", fmt.Errorf("%s exists and is not a socket: remove it, or give another --listen", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, "", &InUseError{Addr: shown}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, "", fmt.Errorf("%s: cannot tell whether a process answers there (%w); remove the file if none does", path, err)
		}
		// Left by a process that is gone.
		if err := os.Remove(path); err != nil {
			return nil, "", fmt.Errorf("remove the stale socket %s: %w", path, err)
		}
	}
	// The socket is created without group or other access, never widened.
	l, err := listenPrivate(path)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, "", &InUseError{Addr: shown}
		}
		return nil, "", fmt.Errorf("listen on %s: %w", shown, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, "", fmt.Errorf("listen on %s: %w", shown, err)
	}
	return l, shown, nil
}

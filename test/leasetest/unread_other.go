//go:build !linux

package leasetest

import (
	"errors"
	"net"
)

// unread is not implemented here: Listener.Sync fails.
func unread(*net.UnixConn) (int, error) { return 0, errors.ErrUnsupported }

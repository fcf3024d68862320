//go:build !unix

package leaseapi

import "net"

// listenPrivate creates the unix socket at path; Listen then sets its mode.
func listenPrivate(path string) (net.Listener, error) { return net.Listen("unix", path) }

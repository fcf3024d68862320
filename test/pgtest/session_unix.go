//go:build unix

package pgtest

import "syscall"

// sessionAttr starts the watchdog in a session of its own: neither a
// terminal's Ctrl-C nor a signal to the test binary's process group
// reaches it.
func sessionAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

//go:build unix

package lab

import (
	"errors"
	"syscall"
)

// Signal sends sig to the process pid.
func Signal(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// signalGroup sends sig to the process group that pid leads.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// alive reports whether the process pid runs (as any user) and is not a
// zombie.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie is not alive for our purposes.
	z, known := zombie(pid)
	if !known {
		return err == nil
	}
	return !z
}

// groupAttr starts a program as the server user c (nil: the caller) in a
// process group of its own.
func groupAttr(c *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: c.sys(), Setpgid: true}
}

// sessionAttr starts a program as the server user c (nil: the caller) in a
// session of its own: no terminal's hangup reaches it, and a signal to its
// process group reaches its children.
func sessionAttr(c *credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: c.sys(), Setsid: true}
}

// sys is c as exec needs it, with no supplementary groups; nil for nil.
func (c *credential) sys() *syscall.Credential {
	if c == nil {
		return nil
	}
	return &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid), Groups: []uint32{}}
}

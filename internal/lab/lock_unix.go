//go:build unix

package lab

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f, held until f is closed; two opens
// of one file exclude each other, in one process too.
func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }

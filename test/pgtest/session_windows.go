package pgtest

import "syscall"

// On Windows the lab starts nothing (lab.Start refuses), so no watchdog
// runs either.
func sessionAttr() *syscall.SysProcAttr { return nil }

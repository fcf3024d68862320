package lab

import "syscall"

// On Windows the lab starts no process (Start refuses: see Support), so
// there is none to signal, wait for or start in a group of its own.

// Signal sends sig to the process pid; on Windows there is none.
func Signal(int, syscall.Signal) error { return ErrUnsupported }

func signalGroup(int, syscall.Signal) error        { return ErrUnsupported }
func alive(int) bool                               { return false }
func groupAttr(*credential) *syscall.SysProcAttr   { return nil }
func sessionAttr(*credential) *syscall.SysProcAttr { return nil }

package supervisor

import (
	"errors"
	"log/slog"
	"syscall"

	"golang.org/x/sys/unix"
)

// Support reports nil: macOS runs programs under a lease, with two
// limits that Command's doc names: no Pdeathsig and no child subreaper.
func Support() error { return nil }

// childAttr starts the program in its own process group. macOS has no
// Pdeathsig: if this process is SIGKILLed the program keeps running, and
// so do its copies of the lease and fence sockets, so the key stays held
// until it exits: no second leader, but nobody stops it either.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func killPID(pid int, sig syscall.Signal) { _ = syscall.Kill(pid, sig) }

// startTime is not needed on macOS: members does not read environments.
func startTime(int) uint64 { return 0 }

// members returns the live processes of the program's process group and
// its descendants, from the kernel's process table (sysctl kern.proc.all).
// A descendant orphaned by a double fork is reparented to launchd and is
// no longer found: macOS has no child subreaper.
func (t *programTree) members() []proc {
	kps, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil
	}
	procs := make(map[int]proc, len(kps))
	for _, kp := range kps {
		p := proc{pid: int(kp.Proc.P_pid), ppid: int(kp.Eproc.Ppid), pgrp: int(kp.Eproc.Pgid), zombie: kp.Proc.P_stat == 5} // SZOMB
		procs[p.pid] = p
	}
	var out []proc
	for pid, p := range procs {
		if p.zombie {
			continue
		}
		if p.pgrp == t.pid || pid == t.pid || descends(procs, pid, t.pid) {
			out = append(out, p)
		}
	}
	return out
}

// becomeSubreaper reports false: macOS has no child subreaper.
func becomeSubreaper(log *slog.Logger) bool {
	log.Warn("macOS has no child subreaper: a daemon the program starts with a double fork is not stopped with it")
	return false
}

// reapOrphans is never called on macOS (becomeSubreaper is false).
func reapOrphans(int) func() { return func() {} }

// ReapAsInit does nothing here: a PID namespace, whose PID 1 inherits every
// orphan, is Linux's (containers).
func ReapAsInit() (stop func()) { return func() {} }

// obituarySupport refuses: without Pdeathsig a killed leader's program
// runs on, keeping the key held, and nobody may record its end.
func obituarySupport() error {
	return errors.New("no obituary on macOS: a killed leader's program runs on")
}

func obituaryAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// membersOf returns the live members of each of trees.
func membersOf(trees []*programTree) [][]proc {
	out := make([][]proc, len(trees))
	for i, t := range trees {
		out[i] = t.members()
	}
	return out
}

//go:build linux || darwin

package supervisor

import "syscall"

// descends reports whether pid is a descendant of ancestor in procs.
func descends(procs map[int]proc, pid, ancestor int) bool {
	for range 1 << 12 { // a cycle cannot happen, but bound the walk anyway
		p, ok := procs[pid]
		switch {
		case !ok:
			return false
		case p.ppid == ancestor:
			return true
		case p.ppid <= 1:
			return false
		}
		pid = p.ppid
	}
	return false
}

// signal sends sig to the program's process group and to every member of
// the tree outside it: each process gets it once.
func (t *programTree) signal(sig syscall.Signal) {
	_ = syscall.Kill(-t.pid, sig)
	for _, p := range t.members() {
		if p.pgrp != t.pid {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// signalTrees sends sig to every member of each of trees, from one look at
// the system's processes, and returns how many members each had.
func signalTrees(trees []*programTree, sig syscall.Signal) []int {
	members := membersOf(trees)
	left := make([]int, len(trees))
	for i, t := range trees {
		if t.pid <= 0 {
			// The obituary heard of the program before it started, and
			// not of its pid: the program is the first of its members to
			// lead a process group; the group is the tree's from now on.
			for _, p := range members[i] {
				if p.pgrp == p.pid && (t.pid <= 0 || p.start < t.start) {
					t.pid, t.start = p.pid, p.start
				}
			}
			if t.pid <= 0 {
				left[i] = len(members[i])
				for _, p := range members[i] {
					_ = syscall.Kill(p.pid, sig)
				}
				continue // kill(0, sig) would signal this process's own group
			}
		}
		_ = syscall.Kill(-t.pid, sig)
		for _, p := range members[i] {
			if p.pgrp != t.pid {
				_ = syscall.Kill(p.pid, sig)
			}
		}
		left[i] = len(members[i])
	}
	return left
}

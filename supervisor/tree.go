package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"syscall"
	"time"
)

// programIDVar names the environment variable that marks a program and
// everything it starts: descendants that leave its process group or
// session (daemons) inherit it, and so are found and stopped with it.
const programIDVar = "LEASECTL_PROGRAM_ID"

func programID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// programTree is a running program and what it started.
type programTree struct {
	pid int    // the program, which leads its own process group
	id  string // its LEASECTL_PROGRAM_ID
	// descendants: this process is a child subreaper, so every descendant
	// of it belongs to the program.
	descendants bool
	// start is the program's start time in clock ticks after boot.
	start uint64
}

// proc is one process as the system lists it.
type proc struct {
	pid, ppid, pgrp int
	zombie          bool
	start           uint64 // clock ticks after boot
}

// stop stops what is left of the tree once the program itself has exited:
// SIGTERM to every member, SIGKILL to those left at deadline, and it waits
// until none is left. A member that appears meanwhile (a fork) gets the
// same.
func (t *programTree) stop(log *slog.Logger, deadline time.Time, msg string) {
	termed := map[int]bool{}
	killed := false
	logged := false
	for {
		left := t.memberPIDs()
		if len(left) == 0 {
			// A process whose parent is exiting right now is being
			// reparented to this subreaper, and one walk of the children
			// lists can miss it: it was not yet in this process's list
			// when that was read, and no longer in its parent's when that
			// was. Look once more, a moment later, before an empty tree is
			// trusted and the key passes on (a double-forking daemon
			// would otherwise outlive its lease).
			time.Sleep(time.Millisecond)
			if left = t.memberPIDs(); len(left) == 0 {
				return
			}
		}
		if !logged {
			log.Warn(msg, "pid", t.pid, "processes", len(left))
			logged = true
		}
		switch {
		case !time.Now().Before(deadline) && !killed:
			log.Warn("processes of the program's tree are still there at the end of the grace period: SIGKILL", "pid", t.pid, "processes", len(left))
			for _, pid := range left {
				killPID(pid, syscall.SIGKILL)
			}
			killed = true
		case killed && time.Since(deadline) > time.Second:
			log.Error("processes of the program's tree are still there a second after SIGKILL (uninterruptible sleep?)", "pid", t.pid, "processes", left)
			return
		case !killed:
			for _, pid := range left {
				if !termed[pid] {
					killPID(pid, syscall.SIGTERM)
					termed[pid] = true
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memberPIDs returns the pids of the tree's live members.
func (t *programTree) memberPIDs() []int {
	var pids []int
	for _, p := range t.members() {
		pids = append(pids, p.pid)
	}
	return pids
}

// owned holds the pids of the programs Command started and has not yet
// waited for: os/exec waits for them, so no reaper may. A program starts
// with owned.mu held, and a sweep holds it throughout, so a sweep never
// sees a program's pid before it is in owned.
var owned struct {
	mu   sync.Mutex
	pids map[int]bool
	// helpers are the owned children that belong to no program's tree
	// (the obituary), though a subreaper's every descendant otherwise does.
	helpers map[int]bool
}

// isHelper reports whether pid is a helper process of this one.
func isHelper(pid int) bool {
	owned.mu.Lock()
	defer owned.mu.Unlock()
	return owned.helpers[pid]
}

// markHelper records pid as a helper (true) or forgets it (false).
func markHelper(pid int, on bool) {
	owned.mu.Lock()
	defer owned.mu.Unlock()
	if owned.helpers == nil {
		owned.helpers = map[int]bool{}
	}
	if on {
		owned.helpers[pid] = true
	} else {
		delete(owned.helpers, pid)
	}
}

// startOwned runs start (an exec.Cmd's Start) with owned locked and adds
// the pid it started.
func startOwned(start func() error, pid func() int) error {
	owned.mu.Lock()
	defer owned.mu.Unlock()
	if err := start(); err != nil {
		return err
	}
	if owned.pids == nil {
		owned.pids = map[int]bool{}
	}
	owned.pids[pid()] = true
	return nil
}

// disown forgets pid once os/exec has waited for it.
func disown(pid int) {
	owned.mu.Lock()
	defer owned.mu.Unlock()
	delete(owned.pids, pid)
}

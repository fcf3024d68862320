package supervisor

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// exitWatch hears of a program's exit from the kernel: a pidfd (Linux 5.3
// and later), which polls readable once the process has exited. The
// obituary opens one when it learns of a program, while the pid is still
// the program's, so that a pid reused after the program's death is never
// mistaken for it.
type exitWatch struct {
	fd   int  // the pidfd; -1 when none
	gone bool // the program had exited before the watch began
}

// watchExit watches program pid, which started at start (clock ticks
// after boot). Nil when the kernel cannot (no pidfd): the obituary then
// looks at /proc instead.
func watchExit(pid int, start uint64) *exitWatch {
	if pid <= 0 || start == 0 {
		return nil // start unknown: the pid cannot be checked
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return &exitWatch{fd: -1, gone: true}
	case err != nil:
		return nil
	}
	// The pidfd names whatever has the pid now: the program only if its
	// start time is the program's.
	if p, ok := readProc(pid); !ok || p.start != start {
		_ = unix.Close(fd)
		return &exitWatch{fd: -1, gone: true}
	}
	return &exitWatch{fd: fd}
}

// close releases the watch; a nil watch does nothing.
func (w *exitWatch) close() {
	if w != nil && w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
	}
}

// awaitTrees SIGKILLs each of trees (its process group, and its program
// through the watch, which a reused pid cannot misdirect) and waits until
// the kernel says each watched program has exited, or until deadline. The
// rest of the tree, and any program it cannot watch (no pidfd, a pid not
// known yet), the caller's look at /proc settles: it tells a zombie from a
// live process, where kill(-pgid, 0) succeeds until the zombies of the
// group are reaped, which an init that reaps late (one that polls) delays
// by up to a second.
func awaitTrees(trees []*programTree, watches []*exitWatch, deadline time.Time) {
	var fds []unix.PollFd
	for i, t := range trees {
		if t.pid > 0 {
			_ = unix.Kill(-t.pid, unix.SIGKILL)
		}
		if w := watches[i]; w != nil && w.fd >= 0 {
			_ = unix.PidfdSendSignal(w.fd, unix.SIGKILL, nil, 0)
			fds = append(fds, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN})
		}
	}
	for len(fds) > 0 {
		wait := time.Until(deadline)
		if wait <= 0 {
			return
		}
		n, err := unix.Poll(fds, int(min(wait, time.Second).Milliseconds())+1)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			return // /proc decides
		}
		left := fds[:0]
		for _, f := range fds {
			if f.Revents == 0 {
				left = append(left, f)
			}
		}
		fds = left
	}
}

// bootTicks is the time since boot in the clock ticks of /proc/PID/stat's
// start time, rounded down: a program started after it never reads less.
// Start times count from boot by CLOCK_BOOTTIME (Linux 3.17 and later, in
// the reader's time namespace) or CLOCK_MONOTONIC (before), so it takes the
// lower of the two; and it assumes a tick of 1/100 s (USER_HZ wherever Go
// runs), which a faster tick would only make lower.
func bootTicks() uint64 {
	var boot, mono unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil {
		return 0
	}
	return uint64(min(boot.Nano(), mono.Nano()) / int64(10*time.Millisecond))
}

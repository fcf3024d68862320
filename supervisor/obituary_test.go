//go:build linux

package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestObituaryIsNotPartOfTheProgramsTree: a subreaper's program tree is
// every descendant of this process, but the obituary, a child of this
// process too, is not the program's: stopping what is left of a program's
// tree must not stop it, or a later SIGKILL of this process would leave
// nobody to record the end of its term.
func TestObituaryIsNotPartOfTheProgramsTree(t *testing.T) {
	const key = 9100040
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	obit, err := supervisor.StartObituary(self, nil, testLab.DirectDSN(), "test", "text")
	if err != nil {
		t.Fatal(err)
	}
	defer obit.Close()
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	cmd := &supervisor.Command{Path: w, Args: []string{w, "-notify", events.Path, "-exit", "0"}, Grace: time.Second, Subreaper: true, Obituary: obit}
	if err := lease.Run(context.Background(), baseConfig(key), cmd.Work); err != nil {
		t.Fatalf("Run = %v, want the program's exit status 0", err)
	}
	if pid := obit.PID(); syscall.Kill(pid, 0) != nil {
		t.Fatalf("the obituary (pid %d) was stopped with the program's tree", pid)
	}
}

// TestObituaryKillsEveryTermsProgram: one process leads two roles (a group
// run), each program under a term of its own, with one obituary. When the
// process dies without saying goodbye, the obituary SIGKILLs both
// programs' trees (here one with a daemon that left its process group) and
// records the end of both terms as killed. The Obituary's pipe is tapped
// (tapObituary) so that the test knows when both programs' begin notes
// have gone through before it "dies".
func TestObituaryKillsEveryTermsProgram(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	obit, err := supervisor.StartObituary(self, nil, testLab.DirectDSN(), "alpha,beta", "text")
	if err != nil {
		t.Fatal(err)
	}
	defer obit.Close()
	tap := tapObituary(t, obit.PID())
	defer tap.cut() // should the test fail before it does
	obitGone := make(chan struct{})
	go func() {
		defer close(obitGone)
		for syscall.Kill(obit.PID(), 0) == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	lockFile := filepath.Join(t.TempDir(), "beta.lock")

	type lead struct {
		role string
		key  int64
		args []string
		done chan error
	}
	leads := []*lead{
		{role: "alpha", key: 9100051, args: []string{w, "-notify", events.Path}},
		{role: "beta", key: 9100052, args: []string{w, "-notify", events.Path, "-lock", lockFile, "-daemon", "setsid"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, l := range leads {
		l.done = make(chan error, 1)
		cfg := baseConfig(l.key)
		cfg.Role = l.role
		// Not Subreaper: a subreaper's program tree is every descendant of
		// this process, the other role's program too.
		cmd := &supervisor.Command{Path: w, Args: l.args, Grace: time.Second, Obituary: obit}
		go func() {
			l.done <- lease.Run(ctx, cfg, func(ctx context.Context) error {
				err := cmd.Work(ctx)
				// This process is "dead": its lease must not record the
				// end of the term before the obituary does.
				select {
				case <-obitGone:
				case <-time.After(time.Minute):
				}
				return err
			})
		}()
	}
	started := map[string]leasetest.Event{}
	for len(started) < len(leads) {
		ev, ok := events.Next(time.Minute)
		if !ok {
			t.Fatalf("the programs did not start; started: %+v", started)
		}
		if ev.Kind != leasetest.Start || ev.Epoch == "" {
			t.Fatalf("event %+v, want a start under a term", ev)
		}
		started[ev.Role] = ev
	}

	// The programs report their start before Command tells the obituary
	// of them.
	begun := map[any]bool{}
	for len(begun) < len(leads) {
		select {
		case n := <-tap.notes:
			if n["event"] == "begin" {
				begun[n["role"]] = true
			}
		case <-time.After(time.Minute):
			t.Fatalf("the obituary was not told of both programs, only of %v", begun)
		}
	}
	if !begun["alpha"] || !begun["beta"] {
		t.Fatalf("the begin notes name the roles %v, want alpha and beta", begun)
	}
	tap.cut()
	select {
	case <-obitGone:
	case <-time.After(time.Minute):
		t.Fatal("the obituary did not exit after its pipe closed")
	}
	for _, l := range leads {
		var err error
		select {
		case err = <-l.done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: the program still runs 30s after the obituary exited; stopping it", l.role)
			cancel()
			err = <-l.done
		}
		var exit *supervisor.ExitError
		if !errors.As(err, &exit) || exit.Signal != syscall.SIGKILL {
			t.Errorf("%s: Run = %v, want the program killed by SIGKILL", l.role, err)
		}
		if pid := started[l.role].PID; !processGone(pid) {
			t.Errorf("%s: the program (pid %d) still runs", l.role, pid)
		}
	}
	// The daemon, which left the program's process group, held the lock.
	f, err := os.OpenFile(lockFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("beta's daemon still holds its lock: %v", err)
	}

	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	for _, l := range leads {
		hist, err := term.History(context.Background(), conn, l.key, time.Time{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 1 || strconv.FormatInt(hist[0].Epoch, 10) != started[l.role].Epoch || hist[0].EndReason != term.Killed {
			t.Errorf("%s: history %+v, want the term of epoch %s ended %q", l.role, hist, started[l.role].Epoch, term.Killed)
		}
	}
}

// obituaryTap stands between this process and its obituary, passing the
// notes on, until cut: then the obituary sees what it sees when this
// process dies, its pipe closing without a goodbye.
type obituaryTap struct {
	notes chan map[string]any // each note passed on
	mu    sync.Mutex
	pipe  *os.File // the obituary's pipe; nil once cut
}

// tapObituary puts a tap on the pipe to the obituary obit: the pipe's
// write end in this process (found by the inode of the obituary's
// descriptor 3) is replaced by a pipe of the tap's. Notes for which a drop
// function says true are not passed on (a process that died before it sent
// them).
func tapObituary(t *testing.T, obit int, drop ...func(note map[string]any) bool) *obituaryTap {
	t.Helper()
	pipe, err := os.Readlink("/proc/" + strconv.Itoa(obit) + "/fd/3")
	if err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for _, e := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == pipe {
			fd, _ := strconv.Atoi(e.Name())
			ends = append(ends, fd)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("found %d descriptors of the obituary's pipe (%s), want 1", len(ends), pipe)
	}
	orig, err := syscall.Dup(ends[0])
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(orig)
	// A blocking pipe: the Obituary's writes block rather than wait for a
	// poller registration that belongs to the old descriptor.
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(p[1], ends[0], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	syscall.Close(p[1])
	tap := &obituaryTap{notes: make(chan map[string]any, 16), pipe: os.NewFile(uintptr(orig), "obituary")}
	go func() {
		r := os.NewFile(uintptr(p[0]), "tap")
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			tap.mu.Lock()
			if tap.pipe != nil {
				var n map[string]any
				_ = json.Unmarshal(sc.Bytes(), &n)
				if !slices.ContainsFunc(drop, func(d func(map[string]any) bool) bool { return d(n) }) {
					_, _ = tap.pipe.Write(append(sc.Bytes(), '\n'))
				}
				if n != nil {
					tap.notes <- n
				}
			}
			tap.mu.Unlock()
		}
	}()
	return tap
}

// cut closes the obituary's pipe, once.
func (tap *obituaryTap) cut() {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if tap.pipe != nil {
		_ = tap.pipe.Close()
		tap.pipe = nil
	}
}

// processGone reports whether pid has exited (a zombie has), waiting a
// little for it.
func processGone(pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Command runs an external program as the work of a lease, the way
// `leasectl run` does: pass its Work method to [Run].
//
// The program starts only while the lease is held, directly (no shell), in
// its own process group, with LEASECTL_ROLE, LEASECTL_KEY and
// LEASECTL_BACKEND_PID in its environment. It dies with this process
// (Pdeathsig SIGKILL, even when this process is SIGKILLed) and inherits the
// lease connection's socket as descriptor 3 (LEASECTL_LEASE_FD=3), so that
// the server cannot release the key before the program is gone. When work's
// context ends (the lease was lost, or Run is stopping), the group gets
// SIGTERM, and SIGKILL after Grace. When the program exits by itself, what
// is left of its group is stopped the same way, so nothing of it outlives
// the lease.
type Command struct {
	// Path is the program to run; Args are its arguments, Args[0] included.
	Path string
	Args []string
	// Env is the program's environment, before the LEASECTL_* variables.
	Env []string
	// Dir is the working directory; empty means this process's.
	Dir string
	// Stdin, Stdout and Stderr are the program's standard streams; nil
	// means /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Grace is how long the program has after SIGTERM before its group gets
	// SIGKILL. Default 10 s; keep it within the lease's StopTimeout.
	Grace time.Duration
	// Logger receives a line when the program starts, is signalled and
	// exits. Nil discards.
	Logger *slog.Logger
	// OnStart, when set, is called with the program's pid once it runs.
	OnStart func(pid int)

	mu        sync.Mutex
	pgid      int  // process group of the running program; 0 when none runs
	signalled bool // Signal reached the running program
}

// ExitError reports that the program ended with a non-zero status or was
// killed by a signal.
type ExitError struct {
	// Code is the exit status, or 128 + the signal number when a signal
	// killed the program (as shells report it).
	Code int
	// Signal is the signal that killed the program, or 0.
	Signal syscall.Signal
}

func (e *ExitError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("the program was killed by %s (exit code %d)", e.Signal, e.Code)
	}
	return fmt.Sprintf("the program exited with status %d", e.Code)
}

// StartError reports that the program could not be started.
type StartError struct {
	Path string
	Err  error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("start %s: %v (check the command and its permissions)", e.Path, e.Err)
}

// Unwrap returns the error of exec.
func (e *StartError) Unwrap() error { return e.Err }

func (c *Command) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Logger
}

// Signal sends sig to the process group of the running program and reports
// whether one was running. A program signalled this way gets no SIGTERM of
// its own when work's context ends, only SIGKILL after Grace: this is how
// `leasectl run` forwards the SIGINT or SIGTERM it receives.
func (c *Command) Signal(sig syscall.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pgid == 0 {
		return false
	}
	c.signalled = true
	c.logger().Info("forwarding signal to the program", "pid", c.pgid, "signal", sig.String())
	return syscall.Kill(-c.pgid, sig) == nil
}

func (c *Command) setRunning(pgid int) {
	c.mu.Lock()
	c.pgid, c.signalled = pgid, false
	c.mu.Unlock()
}

func (c *Command) wasSignalled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signalled
}

// Work runs the program under the lease of ctx (see [SessionFrom]) until it
// exits, or until ctx ends and it has been stopped. It returns nil for exit
// status 0, an *ExitError otherwise, and a *StartError when the program
// could not start.
func (c *Command) Work(ctx context.Context) error {
	sess, ok := SessionFrom(ctx)
	if !ok {
		return errors.New("lease.Command.Work must be called by lease.Run")
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultStopTimeout
	}
	log := c.logger().With("backend_pid", sess.BackendPID)
	env := append(append([]string(nil), c.Env...),
		"LEASECTL_ROLE="+sess.Role,
		"LEASECTL_KEY="+strconv.FormatInt(sess.Key, 10),
		"LEASECTL_BACKEND_PID="+strconv.FormatUint(uint64(sess.BackendPID), 10))
	cmd := &exec.Cmd{
		Path: c.Path, Args: c.Args, Dir: c.Dir,
		Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		WaitDelay:   time.Second, // grandchildren holding our pipes open must not stall Wait
	}
	if sock, err := sess.DupSocket(); err != nil {
		log.Warn("the program will not inherit the lease socket; if this process is SIGKILLed the key may pass on before the program is gone", "err", err.Error())
	} else {
		defer sock.Close()
		cmd.ExtraFiles = []*os.File{sock}
		env = append(env, "LEASECTL_LEASE_FD=3")
	}
	cmd.Env = env

	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// Pdeathsig fires when the OS thread that started the program exits,
		// not the process: keep this goroutine on its thread until the
		// program has been reaped, so that Go never retires the thread
		// under a running program.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return &StartError{Path: c.Path, Err: err}
	}
	pid := cmd.Process.Pid
	c.setRunning(pid)
	defer c.setRunning(0)
	log.Info("program started", "pid", pid)
	if c.OnStart != nil {
		c.OnStart(pid)
	}

	var err error
	select {
	case err = <-exited:
		log.Info("program exited", "pid", pid, "status", describeExit(err))
		c.stopGroup(log, pid, grace, "the program exited; stopping what is left of its process group")
	case <-ctx.Done():
		if !c.wasSignalled() {
			log.Info("stopping the program: SIGTERM to its process group", "pid", pid, "why", context.Cause(ctx).Error())
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		t := time.NewTimer(grace)
		select {
		case err = <-exited:
		case <-t.C:
			log.Warn("the program did not exit within the grace period: SIGKILL to its process group", "pid", pid, "grace", grace.String())
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			err = <-exited
		}
		t.Stop()
		log.Info("program stopped", "pid", pid, "status", describeExit(err))
		c.stopGroup(log, pid, grace, "stopping what is left of the program's process group")
	}
	return exitResult(err)
}

// stopGroup stops the members of process group pgid that outlived its
// leader: SIGTERM, then SIGKILL after grace. They are not our children, so
// it polls for them.
func (c *Command) stopGroup(log *slog.Logger, pgid int, grace time.Duration, msg string) {
	if !groupAlive(pgid) {
		return
	}
	log.Warn(msg, "pgid", pgid)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if waitGroupGone(pgid, grace) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if !waitGroupGone(pgid, time.Second) {
		log.Error("processes of the program's group are still there after SIGKILL (zombies not reaped by init?)", "pgid", pgid)
	}
}

func waitGroupGone(pgid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func exitResult(err error) error {
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil // status 0; something of its group kept our pipe open
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return &ExitError{Code: ee.ExitCode()}
	}
	if ws.Signaled() {
		return &ExitError{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return &ExitError{Code: ws.ExitStatus()}
}

func describeExit(err error) string {
	var ee *ExitError
	switch r := exitResult(err); {
	case r == nil:
		return "exit status 0"
	case errors.As(r, &ee) && ee.Signal != 0:
		return "killed by " + ee.Signal.String()
	case errors.As(r, &ee):
		return "exit status " + strconv.Itoa(ee.Code)
	default:
		return r.Error()
	}
}

// groupAlive reports whether process group pgid has a member that is not a
// zombie. kill(-pgid, 0) alone counts zombies, which an init that does not
// reap orphans (some containers) leaves behind forever.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

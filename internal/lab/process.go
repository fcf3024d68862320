package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The lab's daemons other than PostgreSQL and PgBouncer (etcd, Patroni and
// HAProxy in an HA lab; an extension's, such as pgpool-II) each run as the
// server OS user, in a session of their own, from a directory of the run
// dir, with their output in a log file there, and are stopped by
// [Lab.Stop]. These are the helpers that start, watch and stop them.

// MakeDir makes the directory name of the run dir, for one daemon, owned
// by the server user.
func (l *Lab) MakeDir(name string) (string, error) {
	dir := filepath.Join(l.RunDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, l.chown(dir)
}

// Spawn starts prog in the background as the server user and returns its
// pid, recorded in pidFile. It runs in a session of its own (no terminal's
// hangup reaches it, and a signal to its process group reaches its
// children), from dir (so that ProcessesUsing finds it and its children
// even once they retitle themselves), with standard output and error
// appended to logFile. It outlives the calling program; Stop ends it.
func (l *Lab) Spawn(dir, prog string, args []string, logFile, pidFile string) (int, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", logFile, err)
	}
	defer f.Close()
	if err := l.chown(logFile); err != nil {
		return 0, err
	}
	c := exec.Command(prog, args...)
	c.Dir = dir
	c.Env = l.env()
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = sessionAttr(l.cred)
	if err := c.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", filepath.Base(prog), err)
	}
	pid := c.Process.Pid
	go func() { _ = c.Wait() }() // reap it should it exit while we run
	if err := l.WriteFile(pidFile, strconv.Itoa(pid)+"\n"); err != nil {
		_ = StopGroup(pid, syscall.SIGKILL, 5*time.Second)
		return 0, fmt.Errorf("write %s: %w", pidFile, err)
	}
	return pid, nil
}

// WaitProcess waits until ready reports true, failing early when ready
// reports an error or pid exits.
func WaitProcess(ctx context.Context, pid int, ready func() (bool, error), limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if ok, err := ready(); ok || err != nil {
			return err
		}
		if !alive(pid) {
			return fmt.Errorf("it exited (pid %d)", pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StopGroup sends sig to the process group that pid leads (pid and the
// children it forked) and waits until pid is gone, sending SIGKILL to the
// group when it lingers past limit. The group is signalled only while its
// leader lives, so that a recycled number is never hit.
func StopGroup(pid int, sig syscall.Signal, limit time.Duration) error {
	signal := func(sig syscall.Signal) {
		if signalGroup(pid, sig) != nil {
			_ = Signal(pid, sig)
		}
	}
	signal(sig)
	deadline := time.Now().Add(limit)
	for alive(pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return fmt.Errorf("pid %d did not exit", pid)
			}
			sig = syscall.SIGKILL
			signal(sig)
			deadline = time.Now().Add(limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// LogProblems returns the first n lines of a log that report an error or
// a failure, for error messages: the last lines are often only retries.
func LogProblems(path string, n int) string {
	var out []string
	for _, line := range strings.Split(readFile(path), "\n") {
		if len(out) < n && (strings.Contains(line, "ERROR") || strings.Contains(line, "FATAL") || strings.Contains(line, "WARNING") || strings.Contains(line, "failed")) {
			out = append(out, "  "+line)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "first problems:\n" + strings.Join(out, "\n") + "\n"
}

// PIDFromFile returns the pid that the file at path holds, when that
// process runs; 0 otherwise.
func PIDFromFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// pgpool ends its pid with a NUL byte, not a newline.
	pid, _ := strconv.Atoi(strings.Trim(string(data), " \t\r\n\x00"))
	if pid <= 0 || !alive(pid) {
		return 0
	}
	return pid
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// Command runs an external program as the work of a lease, the way
// `leasectl run` does: pass its Work method to [lease.Run] or [Run].
//
// The program starts only while the lease is held, directly (no shell), in
// its own process group, with LEASECTL_ROLE, LEASECTL_KEY,
// LEASECTL_BACKEND_PID, LEASECTL_PROGRAM_ID and, with the term record,
// LEASECTL_EPOCH and LEASECTL_FENCE_TOKEN in its environment. It dies
// with this process (Pdeathsig SIGKILL, even when this process is
// SIGKILLed) and inherits the lease session's socket as descriptor 3
// (LEASECTL_LEASE_FD=3) and the stop fence session's as descriptor 4
// (LEASECTL_FENCE_FD=4), so that the server releases neither the key nor
// its fence while the program, or anything that inherited them, lives.
//
// The program's tree is its process group, every process whose environment
// carries its LEASECTL_PROGRAM_ID (descendants that left the group or the
// session: setsid, double forks), and, with Subreaper, every descendant of
// this process. When work's context ends (the lease was lost, or the lease
// is stopping), the tree gets SIGTERM (the signal of a [StopSignal] cause
// instead), and SIGKILL once Grace has passed since the first signal; when
// the program exits by itself, what is left of its tree is stopped the same
// way. Work returns only once the whole tree is
// gone, so nothing of it outlives the lease.
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
	// Grace is how long the program's tree has after the first signal
	// (SIGTERM, or one forwarded with Signal) before it gets SIGKILL: one
	// deadline for the program and what it started. Default 10 s; keep it
	// within the lease's StopTimeout (timing.CommandStop).
	Grace time.Duration
	// Subreaper makes this process a child subreaper (Linux
	// PR_SET_CHILD_SUBREAPER) when the first program starts: descendants
	// orphaned by a double fork become its children instead of init's, so
	// they are found and stopped even when they clear their environment,
	// and it reaps them. Set it only in a process that starts no other
	// programs, as `leasectl run` does.
	Subreaper bool
	// Logger receives a line when the program starts, is signalled and
	// exits. Nil discards.
	Logger *slog.Logger
	// OnStart, when set, is called with the program's pid once it runs.
	OnStart func(pid int)
	// Obituary, when set, learns each program and its term, so that it
	// can record the term's end should this process be killed (see
	// StartObituary).
	Obituary *Obituary

	mu        sync.Mutex
	running   *programTree // the running program; nil when none runs
	signalled time.Time    // when Signal first reached the running program
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

// StopSignal, as the cause of the context of [lease.Run] or [Run]
// (context.WithCancelCause), stops a running program with Signal instead
// of SIGTERM: it is how a process passes on the SIGINT or SIGTERM that
// stops it, as `leasectl run` does.
//
// Cancel the context with it, rather than call [Command.Signal] and then
// cancel: the context ends before the program gets the signal, so the
// program's exit is always seen as a stop, never as the program exiting by
// itself, which a restart policy would restart (and which is logged as
// such).
type StopSignal struct {
	Signal syscall.Signal
	// Err says why, for logs; nil means "stopped by SIGNAL".
	Err error
}

func (e *StopSignal) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v by %s", e.Err, e.Signal)
	}
	return "stopped by " + e.Signal.String()
}

// Unwrap returns Err.
func (e *StopSignal) Unwrap() error { return e.Err }

// Signal sends sig to the running program's tree and reports whether a
// program was running. Grace counts from the first signal; a program
// signalled this way gets no SIGTERM of its own when work's context ends,
// only SIGKILL once Grace has passed. It forwards signals to a program
// that goes on running (a second SIGINT, a SIGHUP); to stop the program
// with a signal, end the lease's context with a [StopSignal] cause.
func (c *Command) Signal(sig syscall.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		return false
	}
	if c.signalled.IsZero() {
		c.signalled = time.Now()
	}
	c.logger().Info("forwarding signal to the program", "pid", c.running.pid, "signal", sig.String())
	c.running.signal(sig)
	return true
}

func (c *Command) setRunning(t *programTree) {
	c.mu.Lock()
	c.running, c.signalled = t, time.Time{}
	c.mu.Unlock()
}

// firstSignal is when Signal first reached the running program, or zero.
func (c *Command) firstSignal() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signalled
}

// Work runs the program under the lease of ctx (see [lease.SessionFrom]) until it
// exits, or until ctx ends and it has been stopped; either way it returns
// only once the program's whole tree is gone. It returns nil for exit
// status 0, an *ExitError otherwise, and a *StartError when the program
// could not start.
func (c *Command) Work(ctx context.Context) error {
	sess, ok := lease.SessionFrom(ctx)
	if !ok {
		return errors.New("supervisor.Command.Work must be called by lease.Run")
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := Support(); err != nil {
		return &StartError{Path: c.Path, Err: err}
	}
	grace := c.Grace
	if grace <= 0 {
		grace = lease.DefaultStopTimeout
	}
	log := c.logger().With("backend_pid", sess.BackendPID)
	id, err := programID()
	if err != nil {
		return &StartError{Path: c.Path, Err: err}
	}
	env := append(append([]string(nil), c.Env...),
		"LEASECTL_ROLE="+sess.Role,
		"LEASECTL_KEY="+strconv.FormatInt(sess.Key, 10),
		"LEASECTL_BACKEND_PID="+strconv.FormatUint(uint64(sess.BackendPID), 10),
		programIDVar+"="+id)
	if sess.Epoch > 0 {
		env = append(env, "LEASECTL_EPOCH="+strconv.FormatInt(sess.Epoch, 10), "LEASECTL_FENCE_TOKEN="+sess.FenceToken())
	}
	cmd := &exec.Cmd{
		Path: c.Path, Args: c.Args, Dir: c.Dir,
		Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr,
		SysProcAttr: childAttr(),
		WaitDelay:   time.Second, // grandchildren holding our pipes open must not stall Wait
	}
	// Descriptor 3 is the lease session's socket, 4 the stop fence
	// session's.
	for _, d := range []struct {
		what string
		dup  func() (*os.File, error)
		env  string
	}{
		{"lease", sess.DupSocket, "LEASECTL_LEASE_FD=3"},
		{"stop fence", sess.DupFenceSocket, "LEASECTL_FENCE_FD=4"},
	} {
		f, err := d.dup()
		if err != nil {
			log.Warn("the program will not inherit the "+d.what+" session's socket; if this process is SIGKILLed, the key may pass on before the program is gone", "err", err.Error())
			if f, err = os.Open(os.DevNull); err != nil {
				return &StartError{Path: c.Path, Err: err}
			}
		} else {
			env = append(env, d.env)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	cmd.Env = env
	descendants := c.Subreaper && becomeSubreaper(log)
	if sess.TermID != "" {
		// Before the program starts: should this process die before it
		// says begin, the obituary still stops the program (by its id)
		// and records the end of the term.
		c.Obituary.term(sess.Role, sess.Key, sess.TermID, sess.Epoch, id)
		// Deferred before the reaper's stop: runs after the tree is gone
		// (or when the program never started).
		defer c.Obituary.end(sess.TermID)
	}

	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// Pdeathsig fires when the OS thread that started the program exits,
		// not the process: keep this goroutine on its thread until the
		// program has been reaped, so that Go never retires the thread
		// under a running program.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := startOwned(cmd.Start, func() int { return cmd.Process.Pid }); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		disown(cmd.Process.Pid)
		exited <- err
	}()
	if err := <-started; err != nil {
		return &StartError{Path: c.Path, Err: err}
	}
	pid := cmd.Process.Pid
	tree := &programTree{pid: pid, id: id, descendants: descendants, start: startTime(pid)}
	c.setRunning(tree)
	defer c.setRunning(nil)
	log.Info("program started", "pid", pid)
	if c.OnStart != nil {
		c.OnStart(pid)
	}
	if sess.TermID != "" {
		c.Obituary.begin(sess.Role, sess.Key, sess.TermID, sess.Epoch, tree)
	}
	if descendants {
		defer reapOrphans(pid)()
	}

	select {
	case err = <-exited:
		log.Info("program exited", "pid", pid, "status", describeExit(err))
		tree.stop(log, time.Now().Add(grace), "the program exited; stopping what is left of its tree")
	case <-ctx.Done():
		var stopSig *StopSignal
		if errors.As(context.Cause(ctx), &stopSig) {
			c.Signal(stopSig.Signal)
		}
		first := c.firstSignal()
		if first.IsZero() {
			first = time.Now()
			log.Info("stopping the program: SIGTERM to its tree", "pid", pid, "why", context.Cause(ctx).Error())
			tree.signal(syscall.SIGTERM)
		}
		// One deadline for the program and its tree, counted from the
		// first signal.
		deadline := first.Add(grace)
		t := time.NewTimer(time.Until(deadline))
		select {
		case err = <-exited:
		case <-t.C:
			log.Warn("the program did not exit within the grace period: SIGKILL to its tree", "pid", pid, "grace", grace)
			tree.signal(syscall.SIGKILL)
			err = <-exited
		}
		t.Stop()
		log.Info("program stopped", "pid", pid, "status", describeExit(err))
		tree.stop(log, deadline, "stopping what is left of the program's tree")
	}
	return exitResult(err)
}

func exitResult(err error) error {
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil // status 0; something of its tree kept our pipe open
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

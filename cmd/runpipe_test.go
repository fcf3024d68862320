//go:build linux

package cmd

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
	"golang.org/x/sys/unix"
)

// readUntil reads lines from r until one contains s, and fails the test
// when none does within limit; it reads nothing after that line.
func readUntil(t *testing.T, r io.Reader, s string, limit time.Duration) {
	t.Helper()
	found := make(chan bool, 1)
	var seen leasetest.Buffer
	go func() {
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			_, _ = seen.Write([]byte(line))
			if strings.Contains(line, s) {
				found <- true
				return
			}
			if err != nil {
				found <- false
				return
			}
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("the pipe closed before %q; read:\n%s", s, seen.String())
		}
	case <-time.After(limit):
		t.Fatalf("no %q within %s; read:\n%s", s, limit, seen.String())
	}
}

// nextWithin returns the next witness event of kind within limit, or
// false; unlike f.next it does not wait for hang.
func (f *runFixture) nextWithin(kind string, limit time.Duration) (leasetest.Event, bool) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		ev, ok := f.events.Next(time.Until(deadline))
		if !ok {
			break
		}
		if ev.Kind == leasetest.Overlap || ev.Kind == leasetest.Failed {
			f.t.Fatalf("witness %d: %s %s: two children ran at once", ev.PID, ev.Kind, ev.Detail)
		}
		if ev.Kind == kind {
			return ev, true
		}
	}
	return leasetest.Event{}, false
}

// TestRunSurvivesABrokenPipe: `leasectl run ... 2>&1 | head -5`. The
// reader of leasectl's stdout and stderr goes away right after the line
// "leading"; leasectl goes on leading (its program keeps running), and the
// log lines it writes later, to a pipe nobody reads, do not kill it: told
// to stop, it stops its program and exits 0.
func TestRunSurvivesABrokenPipe(t *testing.T) {
	f := newRunFixture(t, "poller", 9200071)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.leasectl, append([]string{"run", "--role", "poller", "-o", "json", "--"}, f.witnessArgs()...)...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	readUntil(t, r, `"msg":"leading"`, hang)
	r.Close() // head has printed its lines
	program, ok := f.nextWithin(leasetest.Start, 30*time.Second)
	if !ok {
		select {
		case <-exited:
			t.Fatalf("leasectl run exited (%s) after its stderr's reader went away, before its program started", cmd.ProcessState)
		default:
			t.Fatal("the program did not start")
		}
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-exited:
		t.Fatalf("leasectl run exited (%s) after its stderr's reader went away; it must go on leading", cmd.ProcessState)
	default:
	}
	if !running(program.PID) {
		t.Fatalf("the program (pid %d) stopped after leasectl's stderr's reader went away", program.PID)
	}

	// Its stop is logged: a write to the broken pipe.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(hang):
		t.Fatal("leasectl run did not exit after SIGTERM")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != 0 {
		t.Errorf("leasectl run ended %s, want exit status 0 after stopping its program", cmd.ProcessState)
	}
	if ev, ok := f.nextWithin(leasetest.Term, 10*time.Second); !ok || ev.PID != program.PID {
		t.Errorf("the program got no SIGTERM (event %+v)", ev)
	}
}

// TestRunObituaryEndsATermBegunBeforeItsProgram: leasectl run is killed
// after it recorded its term and before its program started (here it is
// stuck writing the line "leading" to a full pipe). Its obituary never
// heard of the term, yet records its end, so the stand-by leads without
// waiting for the term's deadline (an hour away).
func TestRunObituaryEndsATermBegunBeforeItsProgram(t *testing.T) {
	const key = 9200072
	f := newRunFixture(t, "poller", key)
	dsn := needLab(t).DirectDSN()
	first := f.startReplica(dsn)
	f.next(leasetest.Start)

	// The next leader, its stderr on a pipe of one page that the test
	// stops reading once it stands by, and then fills.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--role", "poller", "--retry-interval", "100ms", "--heartbeat-interval", "1h", "-o", "json", "--"}, f.witnessArgs()...)
	next := exec.Command(f.leasectl, args...)
	next.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+f.keys)
	next.Stderr = w
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = next.Wait(); close(exited) }()
	t.Cleanup(func() { _ = next.Process.Kill(); <-exited })
	readUntil(t, r, `"msg":"standing by"`, hang)
	filled := make(chan error, 1)
	go func() { _, err := w.Write(append(bytes.Repeat([]byte{' '}, size-1), '\n')); filled <- err }()
	select {
	case err := <-filled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe did not take a page: leasectl wrote more after standing by")
	}
	if n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ); err != nil || n != size { // FIONREAD
		t.Fatalf("%d bytes in the pipe (%v), want it full (%d)", n, err, size)
	}

	standby := f.startReplica(dsn, "--heartbeat-interval", "1h")
	standby.log.WaitFor(t, "standing by", 1, hang)
	if code := first.stop(t); code != 0 {
		t.Fatalf("first leader's exit %d", code)
	}
	conn := pgtest.Conn(t, dsn, "")
	var begun term.Term
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cur, _, ok, err := term.Current(context.Background(), conn, key)
		if err != nil {
			t.Fatal(err)
		}
		if ok && cur.Live() && cur.Holder.OSPID == next.Process.Pid {
			begun = cur
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the next leader (pid %d) began no term; current: %+v", next.Process.Pid, cur)
		}
	}
	f.count(leasetest.Start, 0) // drains the events so far
	for _, ev := range f.pending {
		if ev.Kind == leasetest.Start {
			t.Fatalf("a program started (%+v); this test needs the leader stuck before that", ev)
		}
	}

	_ = next.Process.Kill()
	<-exited
	go func() { _, _ = io.Copy(io.Discard, r) }() // the obituary's lines
	ev, ok := f.nextWithin(leasetest.Start, 30*time.Second)
	if !ok {
		t.Fatalf("the stand-by's program did not start within 30s: it waits for the killed leader's term (epoch %d) and its deadline; stand-by's log:\n%s", begun.Epoch, standby.log)
	}
	if ev.PPID != standby.cmd.Process.Pid {
		t.Errorf("program started by %d, want the stand-by %d", ev.PPID, standby.cmd.Process.Pid)
	}
	hist, err := term.History(context.Background(), conn, key, time.Time{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[1].ID != begun.ID || hist[1].EndReason != term.Killed {
		t.Errorf("history %+v, want the killed leader's term %s ended %q", hist, begun.ID, term.Killed)
	}
	if code := standby.stop(t); code != 0 {
		t.Errorf("stand-by exit %d", code)
	}
}

// TestRunLeavesSIGPIPEToTheProgram: leasectl run survives a broken pipe by
// handling SIGPIPE, not by ignoring it, which the program would inherit:
// the program starts with SIGPIPE neither ignored nor blocked.
func TestRunLeavesSIGPIPEToTheProgram(t *testing.T) {
	f := newRunFixture(t, "poller", 9200073)
	cmd := exec.Command(f.leasectl, "run", "--role", "poller", "--", "grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status")
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	var stderr leasetest.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("leasectl run: %v\n%s", err, stderr.String())
	}
	const sigpipe = 1 << (syscall.SIGPIPE - 1)
	found := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, mask, _ := strings.Cut(line, ":")
		bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if bits&sigpipe != 0 {
			t.Errorf("the program starts with SIGPIPE in %s (%s)", name, strings.TrimSpace(mask))
		}
		found++
	}
	if found != 2 {
		t.Fatalf("the program printed %q, want SigBlk and SigIgn", out)
	}
}

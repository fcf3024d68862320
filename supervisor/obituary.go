package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/internal/term"
)

// The obituary. A leader whose process is killed (SIGKILL, the OOM killer)
// cannot record the end of its term, and the next leader must then wait for
// the term's deadline: nothing on the server tells a killed leader, whose
// program died with it, from a frozen one, whose program runs on. The
// obituary is a small process that this one starts and that outlives it:
// it learns each program and term over a pipe, and when the pipe closes
// without a goodbye (this process died), it makes sure the program's tree
// is gone, then records the end of the term (term.Killed), and exits. If
// the obituary dies too (the whole process group or container was killed),
// the deadline applies as before.

// obituaryEnv names the descriptor on which an obituary process reads its
// messages; its presence in the environment makes a process an obituary.
const obituaryEnv = "LEASECTL_OBITUARY_FD"

// IsObituary reports whether this process was started as an obituary
// (StartObituary); it should then run ServeObituary and nothing else.
func IsObituary() bool { return os.Getenv(obituaryEnv) != "" }

// obituaryNote is one message to the obituary.
type obituaryNote struct {
	// Hello: the first message.
	DSN    string `json:"dsn,omitempty"`
	Role   string `json:"role,omitempty"`
	Format string `json:"format,omitempty"`
	// A program started under term TermID of Key (Begin), or it and its
	// tree are gone (End).
	Event     string `json:"event,omitempty"`
	Key       int64  `json:"key,omitempty"`
	TermID    string `json:"term_id,omitempty"`
	Epoch     int64  `json:"epoch,omitempty"`
	PID       int    `json:"pid,omitempty"`
	ProgramID string `json:"program_id,omitempty"`
	Start     uint64 `json:"start,omitempty"`
}

// Obituary is the handle of a running obituary process; a nil *Obituary
// does nothing.
type Obituary struct {
	mu   sync.Mutex
	w    *os.File
	cmd  *exec.Cmd
	done chan struct{}
}

// StartObituary starts path (this program's executable) with args as an
// obituary: its environment gets obituaryEnv, and the program must call
// ServeObituary when IsObituary. connString is the lease's connection
// string (sent over the pipe, never on the command line), role names the
// lease in the obituary's log lines, and format ("text" or "json") is the
// log format on stderr.
func StartObituary(path string, args []string, connString, role, format string) (*Obituary, error) {
	if err := obituarySupport(); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), obituaryEnv+"=3")
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = obituaryAttr()
	if err := startOwned(cmd.Start, func() int { return cmd.Process.Pid }); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the obituary process: %w", err)
	}
	// Not the program's: a subreaper's tree is its every descendant.
	markHelper(cmd.Process.Pid, true)
	o := &Obituary{w: w, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		disown(cmd.Process.Pid)
		markHelper(cmd.Process.Pid, false)
		close(o.done)
	}()
	o.send(obituaryNote{DSN: connString, Role: role, Format: format})
	return o, nil
}

func (o *Obituary) send(n obituaryNote) {
	if o == nil {
		return
	}
	b, _ := json.Marshal(n)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w != nil {
		_, _ = o.w.Write(append(b, '\n'))
	}
}

// PID is the obituary process's pid, or 0.
func (o *Obituary) PID() int {
	if o == nil {
		return 0
	}
	return o.cmd.Process.Pid
}

// begin tells the obituary that program pid (of tree id, started at start)
// runs under term termID of key.
func (o *Obituary) begin(key int64, termID string, epoch int64, t *programTree) {
	o.send(obituaryNote{Event: "begin", Key: key, TermID: termID, Epoch: epoch, PID: t.pid, ProgramID: t.id, Start: t.start})
}

// end tells the obituary that the program of term termID and its whole
// tree are gone.
func (o *Obituary) end(termID string) { o.send(obituaryNote{Event: "end", TermID: termID}) }

// Close says goodbye: this process records its own terms' ends, and the
// obituary exits without doing anything. It waits for the obituary to
// exit.
func (o *Obituary) Close() {
	if o == nil {
		return
	}
	o.send(obituaryNote{Event: "bye"})
	o.mu.Lock()
	_ = o.w.Close()
	o.w = nil
	o.mu.Unlock()
	select {
	case <-o.done:
	case <-time.After(5 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.done
	}
}

// ServeObituary is the obituary process: it reads notes until its pipe
// closes, and then, unless it was told goodbye, stops what is left of the
// last program's tree and records the end of its term. It returns the
// process's exit code.
func ServeObituary() int {
	in := os.NewFile(3, "obituary")
	if in == nil {
		return 2
	}
	var hello obituaryNote
	var cur *obituaryNote // the last term a program ran under
	programGone := true
	bye := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var n obituaryNote
		if json.Unmarshal(sc.Bytes(), &n) != nil {
			continue
		}
		switch n.Event {
		case "":
			hello = n
		case "begin":
			cur, programGone = &n, false
		case "end":
			if cur != nil && cur.TermID == n.TermID {
				programGone = true
			}
		case "bye":
			bye = true
		}
	}
	if bye || cur == nil {
		return 0
	}
	died := time.Now()
	log := obituaryLogger(hello)
	if !programGone {
		t := &programTree{pid: cur.PID, id: cur.ProgramID, start: cur.Start}
		t.signal(syscall.SIGKILL)
		for deadline := time.Now().Add(10 * time.Second); len(t.members()) > 0; {
			if time.Now().After(deadline) {
				log.Error("the killed leader's program is still there 10s after SIGKILL; not recording the end of its term (the next leader waits for its deadline)", "pid", cur.PID)
				return 1
			}
			t.signal(syscall.SIGKILL)
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := recordKilled(hello, cur, died, log); err != nil {
		log.Error("cannot record the end of the killed leader's term; the next leader waits for its deadline", "epoch", cur.Epoch, "err", err.Error())
		return 1
	}
	return 0
}

// recordKilled records the end of term n, retrying for a while: the
// server may be restarting.
func recordKilled(hello obituaryNote, n *obituaryNote, died time.Time, log *slog.Logger) error {
	cfg, err := dbconn.Parse(hello.DSN, 5*time.Second)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = "leasectl obituary " + hello.Role
	var last error
	for delay, until := 50*time.Millisecond, time.Now().Add(2*time.Minute); time.Now().Before(until); delay = min(2*delay, 2*time.Second) {
		last = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := dbconn.Connect(ctx, cfg)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			open, err := term.End(ctx, conn, n.Key, n.TermID, term.Killed, time.Since(died))
			if err == nil && open {
				log.Info("the leader was killed; its program is gone: recorded the end of its term", "epoch", n.Epoch)
			}
			return err
		}()
		if last == nil || errors.Is(last, term.ErrNoSchema) {
			return last
		}
		time.Sleep(delay)
	}
	return last
}

func obituaryLogger(hello obituaryNote) *slog.Logger {
	if hello.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("schema_version", 1, "role", hello.Role, "obituary_pid", os.Getpid())
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", hello.Role, "obituary_pid", os.Getpid())
}

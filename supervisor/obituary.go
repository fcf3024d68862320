package supervisor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
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
	// Hello: the first message. Role is also on Begin: the role of the
	// term's lease (the hello's names them all). Keep names the
	// connection the obituary opens at once and keeps, when not empty.
	Keep   string `json:"keep,omitempty"`
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
func StartObituary(path string, args []string, connString, role, format string, opts ...ObituaryOption) (*Obituary, error) {
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
	hello := obituaryNote{DSN: connString, Role: role, Format: format}
	for _, opt := range opts {
		opt(&hello)
	}
	o.send(hello)
	return o, nil
}

// ObituaryOption changes how an obituary works.
type ObituaryOption func(*obituaryNote)

// KeepConnection makes the obituary connect to the database at once, as
// application, and keep the connection: when this process dies, it
// records the ends of its terms without a connection setup first. A group
// run (many roles, whose next leaders all wait for those ends) uses it; it
// costs one idle server session.
func KeepConnection(application string) ObituaryOption {
	return func(n *obituaryNote) { n.Keep = application }
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
// runs under term termID of key, the lease of role.
func (o *Obituary) begin(role string, key int64, termID string, epoch int64, t *programTree) {
	o.send(obituaryNote{Event: "begin", Role: role, Key: key, TermID: termID, Epoch: epoch, PID: t.pid, ProgramID: t.id, Start: t.start})
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
// programs' trees and records the end of their terms. It returns the
// process's exit code: 1 when a term's end could not be recorded.
//
// It tracks a term per key, the last one a program began under: one
// process may run several leases (a group run, a role each), all with this
// obituary. A term stays tracked after its program is gone ("end"), since
// this process may die before it records the term's end; it is forgotten
// when a newer term of its key begins, which the term record lets begin
// only once the older one has ended (or passed its deadline).
func ServeObituary() int {
	in := os.NewFile(3, "obituary")
	if in == nil {
		return 2
	}
	var hello obituaryNote
	var kept *keptConn
	terms := map[string]*obituaryTerm{} // by TermID
	seq := 0
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
			if hello.Keep != "" {
				kept = keepConnection(hello)
			}
		case "begin":
			for id, t := range terms {
				if t.note.Key == n.Key && id != n.TermID {
					delete(terms, id)
				}
			}
			seq++
			terms[n.TermID] = &obituaryTerm{note: n, seq: seq}
		case "end":
			if t := terms[n.TermID]; t != nil {
				t.programGone = true
			}
		case "bye":
			bye = true
		}
	}
	if bye || len(terms) == 0 {
		if c := kept.take(); c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(ctx)
			cancel()
		}
		return 0
	}
	died := time.Now()
	list := make([]*obituaryTerm, 0, len(terms))
	for _, t := range terms {
		t.log = obituaryLogger(hello, cmp.Or(t.note.Role, hello.Role))
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *obituaryTerm) int { return a.seq - b.seq })

	// SIGKILL to every program's tree at once, then wait for them all,
	// within one bound; one look at the processes per round for all trees.
	var running []*obituaryTerm
	for _, t := range list {
		if !t.programGone {
			t.tree = &programTree{pid: t.note.PID, id: t.note.ProgramID, start: t.note.Start}
			running = append(running, t)
		}
	}
	code := 0
	for deadline := time.Now().Add(10 * time.Second); len(running) > 0; {
		trees := make([]*programTree, len(running))
		for i, t := range running {
			trees[i] = t.tree
		}
		left := signalTrees(trees, syscall.SIGKILL)
		var still []*obituaryTerm
		for i, t := range running {
			if left[i] > 0 {
				still = append(still, t)
			}
		}
		running = still
		if len(running) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, t := range running {
				t.stuck = true
				t.log.Error("the killed leader's program is still there 10s after SIGKILL; not recording the end of its term (the next leader waits for its deadline)", "pid", t.note.PID)
			}
			code = 1
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	var gone []*obituaryTerm
	for _, t := range list {
		if !t.stuck {
			gone = append(gone, t)
		}
	}
	for t, err := range recordKilled(hello, gone, died, kept.take()) {
		t.log.Error("cannot record the end of the killed leader's term; the next leader waits for its deadline", "epoch", t.note.Epoch, "err", err.Error())
		code = 1
	}
	return code
}

// obituaryTerm is a term ServeObituary tracks.
type obituaryTerm struct {
	note        obituaryNote // its "begin"
	seq         int          // the order of the begins
	programGone bool         // its program's tree is gone ("end")
	tree        *programTree // the tree it killed, if any
	stuck       bool         // the tree outlived SIGKILL
	log         *slog.Logger // with the term's role
}

// recordKilled records the end of each of terms, on one connection while
// that works, retrying for a while: the server may be restarting. It
// returns why, for each term whose end it could not record.
func recordKilled(hello obituaryNote, terms []*obituaryTerm, died time.Time, conn *pgx.Conn) map[*obituaryTerm]error {
	failed := map[*obituaryTerm]error{}
	if len(terms) == 0 {
		return failed
	}
	cfg, err := dbconn.Parse(hello.DSN, 5*time.Second)
	if err != nil {
		for _, t := range terms {
			failed[t] = err
		}
		return failed
	}
	cfg.RuntimeParams["application_name"] = "leasectl obituary " + hello.Role
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	pending := terms
	kept := conn != nil
	for delay, until := 50*time.Millisecond, time.Now().Add(2*time.Minute); ; delay = min(2*delay, 2*time.Second) {
		if conn == nil || conn.IsClosed() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			conn, err = dbconn.Connect(ctx, cfg)
			cancel()
			if err != nil {
				conn = nil
				for _, t := range pending {
					failed[t] = err
				}
			}
		}
		if conn != nil {
			// One round trip for all: the next leaders wait for these.
			ends := make([]term.Ending, len(pending))
			for i, t := range pending {
				ends[i] = term.Ending{Key: t.note.Key, ID: t.note.TermID, Reason: term.Killed, Ago: time.Since(died)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			open, err := term.EndAll(ctx, conn, ends)
			cancel()
			switch {
			case err == nil:
				for i, t := range pending {
					delete(failed, t)
					if open[i] {
						t.log.Info("the leader was killed; its program is gone: recorded the end of its term", "epoch", t.note.Epoch)
					}
				}
				pending = nil
			case errors.Is(err, term.ErrNoSchema):
				for _, t := range pending {
					failed[t] = err // retrying will not help
				}
				pending = nil
			default:
				for _, t := range pending {
					failed[t] = err
				}
			}
		}
		if len(pending) == 0 || !time.Now().Before(until) {
			return failed
		}
		if kept {
			// The kept connection failed (the server ended it since its
			// last check): a new one at once.
			kept = false
			if conn != nil {
				_ = conn.Close(context.Background())
				conn = nil
			}
			continue
		}
		time.Sleep(delay)
	}
}

// obituaryLogger logs in hello's format, for role.
func obituaryLogger(hello obituaryNote, role string) *slog.Logger {
	if hello.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("schema_version", 1, "role", role, "obituary_pid", os.Getpid())
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", role, "obituary_pid", os.Getpid())
}

// keptConn is the connection an obituary opens at once (KeepConnection),
// ready when its process dies.
type keptConn struct {
	mu    sync.Mutex
	conn  *pgx.Conn
	taken bool
}

// keepAlive is how often the kept connection is checked, and opened again
// when the server ended it (a restart, a switchover, a termination).
const keepAlive = 5 * time.Second

// keepConnection connects in the background and keeps a connection open
// until take: it checks it every keepAlive and opens a new one when it
// fails. Without one when the process dies, recordKilled connects as
// without KeepConnection.
func keepConnection(hello obituaryNote) *keptConn {
	k := &keptConn{}
	cfg, err := dbconn.Parse(hello.DSN, 5*time.Second)
	if err != nil {
		return k
	}
	cfg.RuntimeParams["application_name"] = hello.Keep
	go func() {
		// The check runs with k.mu held, so that take never hands over a
		// connection in use; a take waits at most for one check.
		for {
			k.mu.Lock()
			if k.taken {
				k.mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if k.conn == nil || k.conn.Ping(ctx) != nil {
				if k.conn != nil {
					_ = k.conn.Close(ctx)
				}
				k.conn, _ = dbconn.Connect(ctx, cfg)
			}
			cancel()
			k.mu.Unlock()
			time.Sleep(keepAlive)
		}
	}()
	return k
}

// take returns the kept connection, if there is one.
func (k *keptConn) take() *pgx.Conn {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.conn
	k.conn, k.taken = nil, true
	return c
}

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
	// Hello: the first message. Role is also on Term and Begin: the role
	// of the term's lease (the hello's names them all). Keep names the
	// connection the obituary opens at once and keeps, when not empty.
	// Host and OSPID are this process as the terms it begins record their
	// holder, and Keys the keys of its leases: the obituary finds a term
	// it was not told of by them.
	Keep   string  `json:"keep,omitempty"`
	DSN    string  `json:"dsn,omitempty"`
	Role   string  `json:"role,omitempty"`
	Format string  `json:"format,omitempty"`
	Host   string  `json:"host,omitempty"`
	OSPID  int     `json:"os_pid,omitempty"`
	Keys   []int64 `json:"keys,omitempty"`
	// A program is about to start under term TermID of Key (Term: Start
	// is a time before it starts), it has started (Begin: PID and its
	// Start), or it and its tree are gone (End).
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
	host, _ := os.Hostname() // as the lease records its terms' holder
	hello := obituaryNote{DSN: connString, Role: role, Format: format, Host: host, OSPID: os.Getpid()}
	for _, opt := range opts {
		opt(&hello)
	}
	o.send(hello)
	return o, nil
}

// ObituaryOption changes how an obituary works.
type ObituaryOption func(*obituaryNote)

// KeepConnection makes the obituary connect to the database at once, as
// application, and keep the connection, readied (term.WarmEnd) for the
// keys of ForKeys and of each term it hears of: when this process dies, it
// records the ends of its terms without a connection setup first, while
// the next leaders wait for them. It costs one idle server session.
func KeepConnection(application string) ObituaryOption {
	return func(n *obituaryNote) { n.Keep = application }
}

// ForKeys names the keys of the leases this process runs. Should it die
// after one of them began a term and before the obituary heard of it (the
// term is recorded before its program starts), the obituary still finds
// the term, by its holder (this host and process), and records its end:
// no program ran under it.
func ForKeys(keys ...int64) ObituaryOption {
	return func(n *obituaryNote) { n.Keys = append(n.Keys, keys...) }
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

// term tells the obituary that the program of tree id is about to start
// under term termID of key, the lease of role: should this process die
// before begin, the obituary looks for the program by its id.
func (o *Obituary) term(role string, key int64, termID string, epoch int64, id string) {
	o.send(obituaryNote{Event: "term", Role: role, Key: key, TermID: termID, Epoch: epoch, ProgramID: id, Start: bootTicks()})
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
// only once the older one has ended (or passed its deadline). A term this
// process began but did not tell of (it died first) had no program, and
// is found by its holder (ForKeys).
func ServeObituary() int {
	// It logs to the stderr of leasectl run, which may be a pipe whose
	// reader has gone (| head): a failed write must not kill it.
	SurviveBrokenPipes()
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
		case "term", "begin":
			t := terms[n.TermID]
			if t == nil {
				for id, o := range terms {
					if o.note.Key == n.Key {
						o.watch.close()
						delete(terms, id)
					}
				}
				seq++
				t = &obituaryTerm{seq: seq}
				terms[n.TermID] = t
				kept.warm(n.Key)
			}
			t.note = n
			if n.Event == "begin" {
				// Now, while the pid is surely the program's.
				t.watch.close()
				t.watch = watchExit(n.PID, n.Start)
			}
		case "end":
			if t := terms[n.TermID]; t != nil {
				t.programGone = true
				t.watch.close()
				t.watch = nil
			}
		case "bye":
			bye = true
		}
	}
	keys := slices.Clone(hello.Keys)
	for _, t := range terms {
		keys = append(keys, t.note.Key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if bye || (len(terms) == 0 && (len(keys) == 0 || hello.OSPID == 0)) {
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

	var running []*obituaryTerm
	for _, t := range list {
		if !t.programGone {
			running = append(running, t)
		}
	}
	code := stopPrograms(running)
	for _, t := range list {
		t.watch.close()
	}

	rec := &recorder{hello: hello, conn: kept.take(), until: time.Now().Add(2 * time.Minute)}
	rec.kept = rec.conn != nil
	defer rec.close()
	var gone []*obituaryTerm
	for _, t := range list {
		if !t.stuck {
			gone = append(gone, t)
		}
	}
	if len(gone) > 0 && rec.endKilled(gone, died) != nil {
		code = 1
	}
	if hello.OSPID != 0 && rec.endUntold(keys, list, died) != nil {
		code = 1
	}
	return code
}

// stopPrograms SIGKILLs the trees of the programs of terms, all at once,
// and waits until they are gone, within one bound. The kernel tells when
// each program has exited (awaitTrees); then one look at every process
// finds what is left: members of its group, or a daemon that left the
// group with the program's id; what it finds is killed and looked for
// again. A tree still there after the bound is stuck: the end of its term
// is not recorded. It returns 1 then, else 0.
func stopPrograms(terms []*obituaryTerm) int {
	if len(terms) == 0 {
		return 0
	}
	deadline := time.Now().Add(10 * time.Second)
	trees := make([]*programTree, len(terms))
	watches := make([]*exitWatch, len(terms))
	for i, t := range terms {
		// Without a pid (this process died between the term's note and
		// the program's start), the tree is whatever carries its id and
		// started after the note.
		t.tree = &programTree{pid: t.note.PID, id: t.note.ProgramID, start: t.note.Start}
		trees[i], watches[i] = t.tree, t.watch
	}
	awaitTrees(trees, watches, deadline)
	running := terms
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		trees = trees[:0]
		for _, t := range running {
			trees = append(trees, t.tree)
		}
		left := signalTrees(trees, syscall.SIGKILL)
		var still []*obituaryTerm
		for i, t := range running {
			if left[i] > 0 {
				still = append(still, t)
			}
		}
		if running = still; len(running) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			for _, t := range running {
				t.stuck = true
				t.log.Error("the killed leader's program is still there 10s after SIGKILL; not recording the end of its term (the next leader waits for its deadline)", "pid", t.tree.pid)
			}
			return 1
		}
		time.Sleep(pause) // SIGKILLed processes take a moment to exit
	}
}

// obituaryTerm is a term ServeObituary tracks.
type obituaryTerm struct {
	note        obituaryNote // its "begin", or "term" before that
	seq         int          // the order of the notes
	programGone bool         // its program's tree is gone ("end")
	watch       *exitWatch   // the program's exit, from "begin"
	tree        *programTree // the tree it killed, if any
	stuck       bool         // the tree outlived SIGKILL
	log         *slog.Logger // with the term's role
}

// recorder records the ends of the killed leader's terms on one connection
// while that works: the kept one first, a new one when it fails, and again
// until until: the server may be restarting.
type recorder struct {
	hello obituaryNote
	conn  *pgx.Conn
	kept  bool // conn is the kept connection, not found broken yet
	until time.Time
	cfg   *pgx.ConnConfig
}

// do runs f on a connection until it succeeds, fails with term.ErrNoSchema
// (retrying will not help) or until has passed, and returns its last
// error.
func (r *recorder) do(f func(ctx context.Context, conn *pgx.Conn) error) error {
	if r.cfg == nil {
		cfg, err := dbconn.Parse(r.hello.DSN, 5*time.Second)
		if err != nil {
			return err
		}
		cfg.RuntimeParams["application_name"] = "leasectl obituary " + r.hello.Role
		r.cfg = cfg
	}
	var err error
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		if r.conn == nil || r.conn.IsClosed() {
			r.close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r.conn, err = dbconn.Connect(ctx, r.cfg)
			cancel()
			if err != nil {
				r.conn = nil
			}
		}
		if r.conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = f(ctx, r.conn)
			cancel()
			if err == nil || errors.Is(err, term.ErrNoSchema) {
				return err
			}
		}
		if !time.Now().Before(r.until) {
			return err
		}
		if r.kept {
			// The kept connection failed (the server ended it since its
			// last check): a new one at once.
			r.kept = false
			r.close()
			continue
		}
		time.Sleep(delay)
	}
}

func (r *recorder) close() {
	if r.conn != nil {
		_ = r.conn.Close(context.Background())
		r.conn = nil
	}
}

// endKilled records the end of each of terms, whose programs are gone, in
// one round trip: the next leaders wait for these.
func (r *recorder) endKilled(terms []*obituaryTerm, died time.Time) error {
	var open []bool
	err := r.do(func(ctx context.Context, conn *pgx.Conn) error {
		ends := make([]term.Ending, len(terms))
		for i, t := range terms {
			ends[i] = term.Ending{Key: t.note.Key, ID: t.note.TermID, Reason: term.Killed, Ago: time.Since(died)}
		}
		var err error
		open, err = term.EndAll(ctx, conn, ends)
		return err
	})
	for i, t := range terms {
		switch {
		case err != nil:
			t.log.Error("cannot record the end of the killed leader's term; the next leader waits for its deadline", "epoch", t.note.Epoch, "err", err.Error())
		case open[i]:
			t.log.Info("the leader was killed; its program is gone: recorded the end of its term", "epoch", t.note.Epoch)
		}
	}
	return err
}

// endUntold records the end of the live terms of keys that this process
// began and did not tell of: it died between a term's record and its
// program's start, so no program ran under them. They are found by their
// holder, this host and process; known are the terms it told of (a stuck
// one among them keeps its key's term alone).
func (r *recorder) endUntold(keys []int64, known []*obituaryTerm, died time.Time) error {
	told := map[string]bool{}
	stuck := map[int64]bool{}
	for _, t := range known {
		told[t.note.TermID] = true
		if t.stuck {
			stuck[t.note.Key] = true
		}
	}
	keys = slices.DeleteFunc(slices.Clone(keys), func(k int64) bool { return stuck[k] })
	if len(keys) == 0 {
		return nil
	}
	var found []term.Term
	var open []bool
	err := r.do(func(ctx context.Context, conn *pgx.Conn) error {
		latest, _, err := term.Latest(ctx, conn, keys)
		if err != nil {
			return err
		}
		found = found[:0]
		for _, t := range latest {
			if t.Live() && !told[t.ID] && t.Holder.Host == r.hello.Host && t.Holder.OSPID == r.hello.OSPID {
				found = append(found, t)
			}
		}
		if len(found) == 0 {
			return nil
		}
		ends := make([]term.Ending, len(found))
		for i, t := range found {
			ends[i] = term.Ending{Key: t.Key, ID: t.ID, Reason: term.Killed, Ago: time.Since(died)}
		}
		open, err = term.EndAll(ctx, conn, ends)
		return err
	})
	switch {
	case errors.Is(err, term.ErrNoSchema):
		return nil // no term record: no term to end
	case err != nil:
		obituaryLogger(r.hello, r.hello.Role).Error("cannot look for a term the killed leader began before its program started; if there is one, the next leader waits for its deadline", "err", err.Error())
		return err
	}
	for i, t := range found {
		if open[i] {
			obituaryLogger(r.hello, t.Role).Info("the leader was killed before its program started: recorded the end of its term", "epoch", t.Epoch)
		}
	}
	return nil
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
	// keys are those to ready the connection for (term.WarmEnd); wake
	// says a new one came.
	keysMu sync.Mutex
	keys   []int64
	wake   chan struct{}
}

// keepAlive is how often the kept connection is checked, and opened again
// when the server ended it (a restart, a switchover, a termination).
const keepAlive = 5 * time.Second

// keepConnection connects in the background and keeps a connection open
// until take: it checks it every keepAlive and opens a new one when it
// fails, and readies each connection it opens for recording the end of a
// term of each key (term.WarmEnd): a new backend's first run of that
// statement costs several milliseconds more, while the next leader waits.
// Without one when the process dies, the obituary connects as without
// KeepConnection.
func keepConnection(hello obituaryNote) *keptConn {
	k := &keptConn{keys: slices.Clone(hello.Keys), wake: make(chan struct{}, 1)}
	cfg, err := dbconn.Parse(hello.DSN, 5*time.Second)
	if err != nil {
		return k
	}
	cfg.RuntimeParams["application_name"] = hello.Keep
	go func() {
		// The check runs with k.mu held, so that take never hands over a
		// connection in use; a take waits at most for one check.
		warm := map[int64]bool{}
		check := true
		for {
			k.mu.Lock()
			if k.taken {
				k.mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if k.conn == nil || (check && k.conn.Ping(ctx) != nil) {
				if k.conn != nil {
					_ = k.conn.Close(ctx)
				}
				k.conn, _ = dbconn.Connect(ctx, cfg)
				clear(warm)
			}
			if k.conn != nil {
				k.keysMu.Lock()
				keys := slices.Clone(k.keys)
				k.keysMu.Unlock()
				for _, key := range keys {
					if warm[key] {
						continue
					}
					// Without the term record there is nothing to ready.
					if err := term.WarmEnd(ctx, k.conn, key); err == nil || errors.Is(err, term.ErrNoSchema) {
						warm[key] = true
					}
				}
			}
			cancel()
			k.mu.Unlock()
			select {
			case <-time.After(keepAlive):
				check = true
			case <-k.wake:
				check = false
			}
		}
	}()
	return k
}

// warm has the kept connection readied for key too; a nil keptConn does
// nothing.
func (k *keptConn) warm(key int64) {
	if k == nil {
		return
	}
	k.keysMu.Lock()
	if !slices.Contains(k.keys, key) {
		k.keys = append(k.keys, key)
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	k.keysMu.Unlock()
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

// Package leasetest supports the tests and benchmarks of lease and
// `leasectl run`: it builds the witness program (./witness), the child they
// run under a lease, collects what witnesses report over a unix socket,
// terminates a lease's session the way `leasectl failover` does, and tells
// whether a key is free.
package leasetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// Event kinds a witness reports.
const (
	Start   = "start"   // it runs (and holds the lock, if asked to take it)
	Term    = "term"    // it received SIGTERM or SIGINT (Detail names it)
	Overlap = "overlap" // another witness held the lock: two children at once
	Failed  = "failed"  // it could not set itself up (Detail says why)
	Exit    = "exit"    // with -stop-delay: it is about to exit after its stop delay
	// With -write: the database refused a fenced write (Detail says how),
	// or a write failed for another reason.
	Refused   = "refused"
	WriteFail = "write-failed"
)

// Event is one report of a witness.
type Event struct {
	Kind       string `json:"kind"`
	Detail     string `json:"detail,omitempty"`
	PID        int    `json:"pid"`
	PPID       int    `json:"ppid"`
	BackendPID string `json:"backend_pid,omitempty"`
	Role       string `json:"role,omitempty"`
	Key        string `json:"key,omitempty"`
	LeaseFD    string `json:"lease_fd,omitempty"`
	FenceFD    string `json:"fence_fd,omitempty"`
	Epoch      string `json:"epoch,omitempty"`
	FenceToken string `json:"fence_token,omitempty"`
	// At is when the listener received the event (its own clock).
	At time.Time `json:"-"`
}

// Build compiles the witness program into dir and returns its path.
func Build(dir string) (string, error) {
	return GoBuild(dir, "witness", "github.com/leasectl/leasectl/test/leasetest/witness")
}

// BuildAll compiles leasectl and the witness program into dir, creating it.
func BuildAll(dir string) (leasectl, witness string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if leasectl, err = GoBuild(dir, "leasectl", "github.com/leasectl/leasectl"); err != nil {
		return "", "", err
	}
	witness, err = Build(dir)
	return leasectl, witness, err
}

// GoBuild compiles the main package pkg into dir/name and returns its path.
func GoBuild(dir, name, pkg string, flags ...string) (string, error) {
	out := filepath.Join(dir, name)
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// Listener collects the events of every witness that reports to its socket.
type Listener struct {
	// Path is the socket to pass to witness -notify.
	Path   string
	Events chan Event
	ln     net.Listener
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[*witnessConn]struct{} // accepted, not yet read to the end
	marks    map[string]chan struct{}  // Sync's markers, until read
	nextMark int
	// delivered counts the events sent on Events.
	delivered atomic.Int64
}

// syncMark is the kind of the line Sync sends through the socket itself;
// it is never delivered.
const syncMark = "listener-sync"

// witnessConn is one witness's connection, and the state of the Syncs
// that wait on its reader.
type witnessConn struct {
	c *net.UnixConn

	mu sync.Mutex
	// asked and answered count the Syncs that asked the reader to catch
	// up, and the last one it answered; over is set once it read to the
	// end (or failed, err), which answers every Sync.
	asked, answered uint64
	over            bool
	err             error
	changed         chan struct{} // closed and replaced when answered or over change
}

// Listen opens a listener socket in dir.
func Listen(dir string) (*Listener, error) {
	path := filepath.Join(dir, "witness.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	l := &Listener{Path: path, Events: make(chan Event, 1024), ln: ln,
		conns: map[*witnessConn]struct{}{}, marks: map[string]chan struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		// Registered before the next accept: once Sync's marker is read,
		// every connection queued before it is in conns.
		wc := &witnessConn{c: c.(*net.UnixConn), changed: make(chan struct{})}
		l.mu.Lock()
		l.conns[wc] = struct{}{}
		l.mu.Unlock()
		go l.read(wc)
	}
}

// read delivers the lines of wc until its witness closes it (or dies).
// When a Sync asks, it first reads everything queued on the socket at that
// moment, so every report the witness wrote before the Sync is delivered.
func (l *Listener) read(wc *witnessConn) {
	var err error
	defer func() {
		wc.c.Close()
		l.mu.Lock()
		delete(l.conns, wc)
		l.mu.Unlock()
		wc.finish(err)
	}()
	var pending []byte
	buf := make([]byte, 64*1024)
	readSome := func() (int, error) {
		n, err := wc.c.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			line, rest, ok := bytes.Cut(pending, []byte("\n"))
			if !ok {
				break
			}
			l.line(line)
			pending = rest
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A Sync woke the read: the loop below looks at what it asks.
			_ = wc.c.SetReadDeadline(time.Time{})
			err = nil
		}
		return n, err
	}
	for {
		// Cleared before looking for a request, which sets the deadline
		// after counting itself: none is missed.
		_ = wc.c.SetReadDeadline(time.Time{})
		if asked := wc.requested(); asked > 0 {
			var queued int
			if queued, err = unread(wc.c); err != nil {
				return
			}
			for queued > 0 && err == nil {
				var n int
				n, err = readSome()
				queued -= n
			}
			if err != nil {
				break
			}
			wc.answer(asked)
			continue
		}
		if _, err = readSome(); err != nil {
			break
		}
	}
	if len(pending) > 0 { // a last line without its newline
		l.line(pending)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
}

// line delivers one line of a witness, or signals Sync's marker.
func (l *Listener) line(b []byte) {
	var ev Event
	if json.Unmarshal(b, &ev) != nil {
		return
	}
	if ev.Kind == syncMark {
		l.mu.Lock()
		if seen, ok := l.marks[ev.Detail]; ok {
			close(seen)
			delete(l.marks, ev.Detail)
		}
		l.mu.Unlock()
		return
	}
	ev.At = time.Now()
	l.Events <- ev
	l.delivered.Add(1)
}

// requested returns the last Sync's number if the reader has not answered
// it yet, else 0.
func (wc *witnessConn) requested() uint64 {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.asked > wc.answered {
		return wc.asked
	}
	return 0
}

func (wc *witnessConn) answer(n uint64) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	wc.answered = n
	close(wc.changed)
	wc.changed = make(chan struct{})
}

func (wc *witnessConn) finish(err error) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	wc.over, wc.err = true, err
	close(wc.changed)
	wc.changed = make(chan struct{})
}

// ask asks the reader to catch up, and returns the request's number.
func (wc *witnessConn) ask() uint64 {
	wc.mu.Lock()
	wc.asked++
	n := wc.asked
	wc.mu.Unlock()
	_ = wc.c.SetReadDeadline(time.Unix(1, 0)) // wakes a Read that waits
	return n
}

// await waits until the reader answered request n or read to the end.
func (wc *witnessConn) await(n uint64, deadline <-chan time.Time) error {
	for {
		wc.mu.Lock()
		answered, over, err, changed := wc.answered >= n, wc.over, wc.err, wc.changed
		wc.mu.Unlock()
		switch {
		case over && err != nil:
			return fmt.Errorf("reading a witness's reports: %w", err)
		case over || answered:
			return nil
		}
		select {
		case <-changed:
		case <-deadline:
			return errors.New("a witness's reports were not read in time")
		}
	}
}

// Sync returns once every event that any witness wrote to the socket
// before the call has been sent on Events, with the number of events sent
// on Events so far (at least those): a consumer that has received that
// many has seen every report written before Sync. A witness that writes
// and exits at once may still be queued in the socket's backlog, unread;
// Sync connects itself, queues behind it, and waits until it is accepted,
// then has every connection read what is queued on it. It fails after
// limit (when the consumer of Events stalls, say).
func (l *Listener) Sync(limit time.Duration) (int64, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	l.mu.Lock()
	l.nextMark++
	id := strconv.Itoa(l.nextMark)
	seen := make(chan struct{})
	l.marks[id] = seen
	l.mu.Unlock()
	c, err := net.DialTimeout("unix", l.Path, limit)
	if err != nil {
		return 0, err
	}
	err = json.NewEncoder(c).Encode(Event{Kind: syncMark, Detail: id})
	c.Close()
	if err != nil {
		return 0, err
	}
	select {
	case <-seen:
	case <-timer.C:
		return 0, fmt.Errorf("the listener did not accept a connection within %s", limit)
	}
	l.mu.Lock()
	conns := make([]*witnessConn, 0, len(l.conns))
	for wc := range l.conns {
		conns = append(conns, wc)
	}
	l.mu.Unlock()
	asked := make([]uint64, len(conns))
	for i, wc := range conns {
		asked[i] = wc.ask()
	}
	for i, wc := range conns {
		if err := wc.await(asked[i], timer.C); err != nil {
			return 0, fmt.Errorf("%w (%d connections, within %s)", err, len(conns), limit)
		}
	}
	return l.delivered.Load(), nil
}

// Next returns the next event, or false when none arrives within limit.
func (l *Listener) Next(limit time.Duration) (Event, bool) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case ev := <-l.Events:
		return ev, true
	case <-t.C:
		return Event{}, false
	}
}

// Close stops accepting witnesses.
func (l *Listener) Close() error {
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// Terminate ends the session that holds key, the way `leasectl failover`
// does (locks.Terminate), after checking that it is backend pid; it waits
// until the backend is gone (up to a minute).
func Terminate(ctx context.Context, conn *pgx.Conn, key int64, pid uint32) error {
	k := locks.BigintKey(key)
	snap, err := locks.Read(ctx, conn, locks.Filter{Keys: []locks.Key{k}})
	if err != nil {
		return err
	}
	holder, ok := snap.Find(k).Holder()
	if !ok || holder.PID != int32(pid) {
		return fmt.Errorf("key %d is not held by backend %d (holder %+v, %v)", key, pid, holder, ok)
	}
	t, err := locks.Terminate(ctx, conn, k, holder, time.Minute)
	if err == nil && !t.Gone {
		err = fmt.Errorf("backend %d did not exit within a minute", pid)
	}
	return err
}

// KeyFree reports whether another session could take key on dsn right now;
// it releases the key again.
func KeyFree(tb testing.TB, dsn string, key int64) bool {
	tb.Helper()
	conn := pgtest.Conn(tb, dsn, "")
	ok, err := locks.TryLock(context.Background(), conn, key)
	if err != nil {
		tb.Fatal(err)
	}
	if ok {
		if _, err := locks.Unlock(context.Background(), conn, key); err != nil {
			tb.Fatal(err)
		}
	}
	return ok
}

// KeyFreed waits until key is free, for at most limit, and reports whether
// it was. A stand-by that exits closes its connection without a cancel
// request, and its backend, still waiting in the lock queue until the
// server notices the closed socket (client_connection_check_interval, 1 s
// for lease sessions), may be granted the key in that moment and then
// release it: "free after every replica exited" needs that second.
func KeyFreed(tb testing.TB, dsn string, key int64, limit time.Duration) bool {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for {
		if KeyFree(tb, dsn, key) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Buffer is a goroutine-safe buffer for a process's output that tests can
// wait on.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor waits until s occurs n times, failing tb when it has not after
// limit (which only catches a hang).
func (b *Buffer) WaitFor(tb testing.TB, s string, n int, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for strings.Count(b.String(), s) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("%q did not appear %d times; output:\n%s", s, n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ObituaryOf returns the pid of the obituary process of the leasectl run
// process pid: its child whose environment carries LEASECTL_OBITUARY_FD.
func ObituaryOf(pid int) (int, bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, []byte("LEASECTL_OBITUARY_FD=")) {
			return child, true
		}
	}
	return 0, false
}

// WitnessBuild builds the witness program once per test binary: a test
// package's TestMain owns the directory, and its tests share the binary.
type WitnessBuild struct {
	once sync.Once
	path string
	err  error
}

// Get builds the witness into dir the first time, and returns its path;
// a failed build fails tb.
func (b *WitnessBuild) Get(tb testing.TB, dir string) string {
	tb.Helper()
	b.once.Do(func() { b.path, b.err = Build(dir) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

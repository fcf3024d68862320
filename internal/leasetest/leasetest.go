// Package leasetest supports the tests and benchmarks of lease and
// `leasectl run`: it builds the witness program (./witness), the child they
// run under a lease, collects what witnesses report over a unix socket,
// terminates a lease's session the way `leasectl failover` does, and tells
// whether a key is free.
package leasetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/locks"
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
	return GoBuild(dir, "witness", "github.com/leasectl/leasectl/internal/leasetest/witness")
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
}

// Listen opens a listener socket in dir.
func Listen(dir string) (*Listener, error) {
	path := filepath.Join(dir, "witness.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	l := &Listener{Path: path, Events: make(chan Event, 1024), ln: ln}
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
		go func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				var ev Event
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					ev.At = time.Now()
					l.Events <- ev
				}
			}
		}()
	}
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

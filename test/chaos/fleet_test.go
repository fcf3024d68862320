//go:build linux

package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/test/leasetest"
)

const (
	role    = "chaos"
	roleKey = int64(9300001)
	// hang bounds every wait for something that must happen: reaching it
	// fails the test, saying what did not happen; it is not a timing
	// assertion.
	hang = 60 * time.Second
)

// kind is how a replica reaches PostgreSQL.
type kind string

const (
	direct      kind = "direct"    // the primary over TCP
	pooled      kind = "pooler"    // PgBouncer in transaction mode: must never lead
	session     kind = "session"   // PgBouncer in session mode: safe
	partitioned kind = "netns"     // from the network namespace, over the veth pair
	multiHost   kind = "multihost" // primary,standby with target_session_attrs=primary
	haPrimary   kind = "haproxy"   // Patroni's HAProxy, the primary port
	haReplica   kind = "replicas"  // Patroni's HAProxy, the replicas port: refused on a replica; it may lead only on the new primary before HAProxy's check catches up (the Patroni scenario checks where)
)

// harness is what every scenario shares: the binaries, the keys file, the
// witness lock and the history of every witness event.
type harness struct {
	leasectl, witness string
	keys, lock        string
	listener          *leasetest.Listener

	mu     sync.Mutex
	events []leasetest.Event
	wake   chan struct{} // closed and replaced when an event arrives

}

var (
	buildOnce               sync.Once
	leasectlBin, witnessBin string
	buildErr                error
)

// newHarness builds leasectl and the witness (once per test binary) and
// starts collecting witness events.
func newHarness(t *testing.T) *harness {
	t.Helper()
	buildOnce.Do(func() {
		// Into the lab's directory: removed with the lab.
		leasectlBin, witnessBin, buildErr = leasetest.BuildAll(filepath.Join(testLab.Dir, "chaos-bin"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dir := t.TempDir()
	h := &harness{leasectl: leasectlBin, witness: witnessBin,
		keys: filepath.Join(dir, "keys.yaml"), lock: filepath.Join(dir, "witness.lock"),
		wake: make(chan struct{})}
	if err := os.WriteFile(h.keys, fmt.Appendf(nil, "roles:\n  %s: %d\n", role, roleKey), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.listener, err = leasetest.Listen(dir); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case ev := <-h.listener.Events:
				h.mu.Lock()
				h.events = append(h.events, ev)
				close(h.wake)
				h.wake = make(chan struct{})
				h.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		h.listener.Close()
		close(done)
	})
	return h
}

// mark is the position in the event history from which later waits look.
func (h *harness) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// await returns the first event at or after position from that matches,
// waiting up to limit for it; it fails t, saying what did not happen, when
// none comes.
func (h *harness) await(t *testing.T, from int, limit time.Duration, what string, match func(leasetest.Event) bool) leasetest.Event {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for _, ev := range h.events[from:] {
			if match(ev) {
				h.mu.Unlock()
				return ev
			}
		}
		from = len(h.events)
		wake := h.wake
		h.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("%s did not happen within %s", what, limit)
		}
	}
}

// caughtUp returns once h.events holds every report that any witness wrote
// before the call, even one that wrote and exited a moment ago, so that a
// count that follows misses none; when that cannot be made sure within
// hang it fails t and returns false.
func (h *harness) caughtUp(t *testing.T) bool {
	t.Helper()
	n, err := h.listener.Sync(hang)
	if err != nil {
		t.Errorf("witness reports may be unread, so overlaps may be missed: %v", err)
		return false
	}
	deadline := time.NewTimer(hang)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		got, wake := len(h.events), h.wake
		h.mu.Unlock()
		if int64(got) >= n {
			return true
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Errorf("witness reports may be unread, so overlaps may be missed: %d of %d events collected within %s", got, n, hang)
			return false
		}
	}
}

// count returns how many events since position from match.
func (h *harness) count(from int, match func(leasetest.Event) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ev := range h.events[from:] {
		if match(ev) {
			n++
		}
	}
	return n
}

func isStart(ev leasetest.Event) bool { return ev.Kind == leasetest.Start }

// isOverlap matches what the witness reports when it finds another witness
// still running (or cannot set up the check at all).
func isOverlap(ev leasetest.Event) bool {
	return ev.Kind == leasetest.Overlap || ev.Kind == leasetest.Failed
}

func isTermOf(pid int) func(leasetest.Event) bool {
	return func(ev leasetest.Event) bool { return ev.Kind == leasetest.Term && ev.PID == pid }
}

// replica is one `leasectl run` process.
type replica struct {
	name   string
	kind   kind
	cmd    *exec.Cmd
	log    *leasetest.Buffer
	exited chan struct{}
}

func (r *replica) pid() int { return r.cmd.Process.Pid }

// mustNotLead: the replica's DSN cannot give a safe lease (a transaction
// pooler, a port that routes to replicas): it must be refused, and
// through a transaction pooler it must never lead. Through HAProxy's
// replicas port it may lead in the moment after a failover when HAProxy
// still sends it to the new primary (see patroniFaults).
func (r *replica) mustNotLead() bool { return r.kind == pooled || r.kind == haReplica }

// logLine is the part of a leasectl JSON log line that the suite reads.
type logLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	// BackendPID is the lease session's backend, on state changes.
	BackendPID int32  `json:"backend_pid"`
	State      string `json:"state"`
	Port       int    `json:"port"`
	Err        string `json:"err"`
}

// lines parses r's log so far.
func (r *replica) lines() []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(r.log.String()))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// state is the last state r logged.
func (r *replica) state() string {
	lines := r.lines()
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].State != "" {
			return lines[i].State
		}
	}
	return ""
}

// fleet is the replicas of one scenario, all with the same flags.
type fleet struct {
	h     *harness
	t     *testing.T
	flags []string
	// witnessFlags are extra flags of every replica's witness.
	witnessFlags []string
	// noLock: the witnesses take no lock, where a scenario runs two
	// programs at once by design (a leasectl frozen past its term's
	// deadline) and checks their writes instead.
	noLock bool
	live   []*replica // running
	all    []*replica // every replica it started
}

// newFleet returns an empty fleet whose replicas run with flags; they are
// stopped when the test ends.
func (h *harness) newFleet(t *testing.T, flags ...string) *fleet {
	f := &fleet{h: h, t: t, flags: flags}
	t.Cleanup(f.stopAll)
	return f
}

// start starts a replica of kind k on dsn; in ns when k is partitioned.
// --restart keeps the fleet at full strength even if a witness exits on
// finding an overlap, so that every overlap is counted.
func (f *fleet) start(k kind, dsn string, ns *Netns) *replica {
	f.t.Helper()
	args := append([]string{"run", "--role", role, "-o", "json", "--restart"}, f.flags...)
	args = append(args, "--", f.h.witness, "-notify", f.h.listener.Path)
	if !f.noLock {
		args = append(args, "-lock", f.h.lock)
	}
	args = append(args, f.witnessFlags...)
	var cmd *exec.Cmd
	if k == partitioned {
		cmd = ns.Command(f.h.leasectl, args...)
	} else {
		cmd = exec.Command(f.h.leasectl, args...)
	}
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+f.h.keys)
	// Should the test binary die without its cleanup (Ctrl-C: pgtest.RunMain then
	// stops only the lab), the replicas die with it, and their programs
	// with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &replica{name: fmt.Sprintf("%s-%d", k, len(f.all)+1), kind: k, cmd: cmd, log: &leasetest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.log
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	f.live = append(f.live, r)
	f.all = append(f.all, r)
	return r
}

// startFive starts four replicas of kind k on dsn and one through the
// transaction pooler at poolerDSN, and returns the first leader's start
// once every replica has found its place.
func (f *fleet) startFive(k kind, dsn, poolerDSN string) leasetest.Event {
	f.t.Helper()
	from := f.h.mark()
	for range 4 {
		f.start(k, dsn, nil)
	}
	f.start(pooled, poolerDSN, nil)
	lead := f.h.await(f.t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))
	return lead
}

// of returns the live replica whose program ev comes from; it fails when
// none is.
func (f *fleet) of(ev leasetest.Event) *replica {
	f.t.Helper()
	for _, r := range f.live {
		if r.pid() == ev.PPID {
			return r
		}
	}
	f.t.Fatalf("witness %d was started by %d, which is no live replica of this scenario", ev.PID, ev.PPID)
	return nil
}

func (f *fleet) remove(r *replica) {
	for i, x := range f.live {
		if x == r {
			f.live = append(f.live[:i], f.live[i+1:]...)
			return
		}
	}
}

// kill SIGKILLs r and waits until it is gone.
func (f *fleet) kill(r *replica) {
	_ = r.cmd.Process.Kill()
	<-r.exited
	f.remove(r)
}

// stop sends r SIGTERM and waits for it to exit, which it must do with
// status 0 (its program, if it runs one, exits 0 on SIGTERM).
func (f *fleet) stop(r *replica) {
	f.t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		if code := r.cmd.ProcessState.ExitCode(); code != 0 {
			f.t.Errorf("%s (pid %d) exited %d after SIGTERM:\n%s", r.name, r.pid(), code, r.log)
		}
	case <-time.After(hang):
		_ = r.cmd.Process.Kill()
		<-r.exited
		f.t.Errorf("%s (pid %d) did not exit within %s of SIGTERM:\n%s", r.name, r.pid(), hang, r.log)
	}
	f.remove(r)
}

// stopAll stops every replica, the leader last so that no one takes over
// from it.
func (f *fleet) stopAll() {
	f.stopWhere(func(*replica) bool { return true })
}

// stopWhere stops the replicas that match, those standing by first.
func (f *fleet) stopWhere(match func(*replica) bool) {
	var leaders []*replica
	for _, r := range append([]*replica(nil), f.live...) {
		if !match(r) {
			continue
		}
		if r.state() == "leading" {
			leaders = append(leaders, r)
			continue
		}
		f.stop(r)
	}
	for _, r := range leaders {
		f.stop(r)
	}
}

// settled waits until every replica has found its place: the one running
// the program leads, the others that may lead stand by in the lock queue,
// and each pooler replica has been refused at least once.
func (f *fleet) settled(leader *replica) {
	f.t.Helper()
	for _, r := range f.live {
		want := "standing_by"
		switch {
		case r == leader:
			want = "leading"
		case r.mustNotLead():
			r.log.WaitFor(f.t, "refusing to lead", 1, hang)
			continue
		}
		f.waitState(r, want)
	}
}

// waitState waits until the last state r logged is want.
func (f *fleet) waitState(r *replica, want string) {
	f.t.Helper()
	deadline := time.Now().Add(hang)
	for r.state() != want {
		select {
		case <-r.exited:
			f.t.Fatalf("%s (pid %d) exited while waiting for it to be %s:\n%s", r.name, r.pid(), want, r.log)
		default:
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s (pid %d) is %q, not %s, after %s:\n%s", r.name, r.pid(), r.state(), want, hang, r.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkPoolers fails unless every replica on a DSN where a lease is unsafe
// was refused, and unless the pooler replicas never led, by their
// witness's events and by their own logs. It returns how many times a
// pooler replica led (an unsafe lead), and how many refusals they all
// logged. A lead of the HAProxy replicas-port replica is not counted: it
// can only happen on the new primary, proven by the lease, and the Patroni
// scenario checks and reports it.
func (f *fleet) checkPoolers() (leads, refusals int) {
	f.t.Helper()
	for _, r := range f.all {
		if !r.mustNotLead() {
			continue
		}
		n := f.h.count(0, func(ev leasetest.Event) bool { return isStart(ev) && ev.PPID == r.pid() })
		logged := 0
		for _, l := range r.lines() {
			if l.State == "leading" {
				logged++
			}
		}
		n = max(n, logged)
		if n > 0 && r.kind == pooled {
			f.t.Errorf("%s, over a DSN where a lease is unsafe (%s), led %d time(s):\n%s", r.name, r.kind, n, r.log)
		}
		if r.kind != pooled {
			n = 0
		}
		refused := strings.Count(r.log.String(), "refusing to lead")
		if refused == 0 {
			f.t.Errorf("%s was never refused: it never tried to lead, so its check proves nothing:\n%s", r.name, r.log)
		}
		leads += n
		refusals += refused
	}
	return leads, refusals
}

// waitLine waits until r logs, after its first skip lines, a line that
// matches, and returns its position.
func (f *fleet) waitLine(r *replica, skip int, what string, match func(logLine) bool) int {
	f.t.Helper()
	deadline := time.Now().Add(hang)
	for {
		lines := r.lines()
		for i := skip; i < len(lines); i++ {
			if match(lines[i]) {
				return i
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s (pid %d) did not log %s within %s:\n%s", r.name, r.pid(), what, hang, r.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// groupFleet is a set of group replicas over the same roles, with a witness of
// who runs each role's work.
type groupFleet struct {
	t     *testing.T
	keys  []int64
	mu    sync.Mutex
	runs  map[int64]string // role key -> replica running its work
	twice []string         // overlaps seen
	moves map[int64]int    // works started per role
	reps  map[string]*replica
}

type replica struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	rec    *recorder
}

func newGroupFleet(t *testing.T, base int64, roles int) *groupFleet {
	f := &groupFleet{t: t, runs: map[int64]string{}, moves: map[int64]int{}, reps: map[string]*replica{}}
	for i := range roles {
		f.keys = append(f.keys, base+int64(i))
	}
	return f
}

func (f *groupFleet) work(name string, key int64) func(context.Context) error {
	return func(ctx context.Context) error {
		f.mu.Lock()
		if other, ok := f.runs[key]; ok {
			f.twice = append(f.twice, fmt.Sprintf("key %d: %s started while %s ran", key, name, other))
		}
		f.runs[key] = name
		f.moves[key]++
		f.mu.Unlock()
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a work that takes a moment to stop
		f.mu.Lock()
		if f.runs[key] == name {
			delete(f.runs, key)
		}
		f.mu.Unlock()
		return nil
	}
}

func (f *groupFleet) start(name string, mutate func(*lease.Group)) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, cancel: cancel, done: make(chan struct{}), rec: newRecorder()}
	g := lease.Group{
		Config: lease.Config{DSN: testLab.DirectDSN(), RetryInterval: 200 * time.Millisecond,
			HeartbeatInterval: time.Second, HeartbeatTimeout: 5 * time.Second,
			ApplicationName: "group test " + name, OnStateChange: r.rec.record},
		Name: name,
	}
	for _, k := range f.keys {
		g.Roles = append(g.Roles, lease.GroupRole{Role: fmt.Sprintf("r%d", k), Key: k, Work: f.work(name, k)})
	}
	if mutate != nil {
		mutate(&g)
	}
	go func() { defer close(r.done); r.err = lease.RunGroup(ctx, g) }()
	f.reps[name] = r
	f.t.Cleanup(func() { cancel(); recv(f.t, r.done, name+"'s RunGroup returning") })
	return r
}

// leaders returns how many roles each replica runs, and how many run.
func (f *groupFleet) leaders() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, name := range f.runs {
		out[name]++
	}
	return out, len(f.runs)
}

// until waits for cond, failing after a generous limit (a hang, not a
// timing assertion).
func (f *groupFleet) until(what string, cond func() bool) {
	f.t.Helper()
	for limit := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(limit) {
			by, n := f.leaders()
			f.t.Fatalf("not %s within a minute: %d roles run, by replica %v", what, n, by)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *groupFleet) noOverlap() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.twice) > 0 {
		f.t.Fatalf("two replicas ran one role's work at once: %v", f.twice)
	}
}

// sessions counts the server sessions of each replica (by application_name).
func sessions(t *testing.T, names ...string) map[string]int {
	t.Helper()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	out := map[string]int{}
	for _, n := range names {
		var c int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", "group test "+n).Scan(&c); err != nil {
			t.Fatal(err)
		}
		out[n] = c
	}
	return out
}

// TestGroupSpreadsRolesOverTwoSessionsPerReplica: three replicas of twelve
// roles lead every role, on two sessions each, no replica more than
// ceil(12/3)+1, and never two works of a role at once.
func TestGroupSpreadsRolesOverTwoSessionsPerReplica(t *testing.T) {
	f := newGroupFleet(t, 9200000, 12)
	f.start("a", nil)
	f.until("all led by the first replica", func() bool { _, n := f.leaders(); return n == 12 })
	f.start("b", nil)
	f.start("c", nil)
	f.until("spread", func() bool {
		by, n := f.leaders()
		return n == 12 && by["a"] <= 5 && by["b"] <= 5 && by["c"] <= 5 && by["b"] > 0 && by["c"] > 0
	})
	f.noOverlap()
	time.Sleep(3 * time.Second) // settled: no more moves
	by, n := f.leaders()
	if n != 12 || by["a"] > 5 || by["b"] > 5 || by["c"] > 5 {
		t.Errorf("after settling: %d roles run, by replica %v", n, by)
	}
	for name, c := range sessions(t, "a", "b", "c") {
		if c != 2 {
			t.Errorf("replica %s has %d server sessions, want 2 (lease and stop fence)", name, c)
		}
	}
	f.noOverlap()
}

// TestGroupTakesOverWhenAReplicaEnds: when the server ends every session
// of a replica, the others take over its roles, without overlap.
func TestGroupTakesOverWhenAReplicaEnds(t *testing.T) {
	f := newGroupFleet(t, 9200100, 9)
	f.start("a", nil)
	f.start("b", nil)
	f.start("c", nil)
	f.until("spread", func() bool {
		by, n := f.leaders()
		return n == 9 && by["a"] > 0 && by["b"] > 0 && by["c"] > 0
	})
	// End both sessions of a, and keep a from coming back.
	f.reps["a"].cancel()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	pgtest.Exec(t, conn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'group test a'")
	recv(t, f.reps["a"].done, "a's RunGroup returning")
	f.until("all led by b and c", func() bool {
		by, n := f.leaders()
		return n == 9 && by["a"] == 0
	})
	f.noOverlap()
}

// TestGroupResignMovesOneRole: a request to step down for one role moves
// that role only.
func TestGroupResignMovesOneRole(t *testing.T) {
	f := newGroupFleet(t, 9200200, 6)
	f.start("a", nil)
	f.until("all led by a", func() bool { _, n := f.leaders(); return n == 6 })
	f.start("b", nil)
	f.until("spread", func() bool { by, n := f.leaders(); return n == 6 && by["b"] >= 2 })
	time.Sleep(3 * time.Second)
	f.mu.Lock()
	target := f.keys[0]
	holder := f.runs[target]
	before := map[int64]int{}
	for k, v := range f.moves {
		before[k] = v
	}
	f.mu.Unlock()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	tgt, err := locks.FindTarget(context.Background(), conn, locks.BigintKey(target), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Failover(context.Background(), conn, locks.FailoverOptions{Wait: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.until("the role moved", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.runs[target] != "" && f.runs[target] != holder
	})
	f.mu.Lock()
	for k, v := range f.moves {
		if k != target && v != before[k] {
			t.Errorf("role %d was started %d times, before the failover %d: the failover disturbed it", k, v, before[k])
		}
	}
	f.mu.Unlock()
	f.noOverlap()
}

func TestGroupConfigErrors(t *testing.T) {
	work := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		g    lease.Group
		want string
	}{
		{"no roles", lease.Group{Config: lease.Config{DSN: testLab.DirectDSN()}}, "at least one role"},
		{"same key", lease.Group{Config: lease.Config{DSN: testLab.DirectDSN()}, Roles: []lease.GroupRole{{Role: "a", Key: 1, Work: work}, {Role: "b", Key: 1, Work: work}}}, "same key"},
		{"role key", lease.Group{Config: lease.Config{DSN: testLab.DirectDSN(), Key: 5}, Roles: []lease.GroupRole{{Role: "a", Key: 1, Work: work}}}, "Roles"},
	} {
		err := lease.RunGroup(context.Background(), tc.g)
		var ce *lease.ConfigError
		if !errors.As(err, &ce) || !contains(err.Error(), tc.want) {
			t.Errorf("%s: RunGroup = %v, want a ConfigError saying %q", tc.name, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/lease"
)

// stopDelay is how long the work of a fleet takes to return once its
// context ends: a program that drains its work.
const stopDelay = 300 * time.Millisecond

// workStart is one start of a fleet member's work.
type workStart struct {
	member  int
	session lease.Session
	at      time.Time
}

// fleet is several leases on one key in this process, whose works report
// when they start and whether another one was still running then.
type fleet struct {
	t      *testing.T
	key    int64
	recs   []*recorder
	runs   []*runResult
	cancel context.CancelFunc
	starts chan workStart

	mu       sync.Mutex
	running  int
	overlaps []string
}

// newFleet starts n leases on key with cfg's settings (Key, DSN and the
// state hook are set here); they stop when the test ends.
func newFleet(t *testing.T, n int, key int64, cfg lease.Config) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, key: key, cancel: cancel, starts: make(chan workStart, 1024)}
	for i := range n {
		rec := newRecorder()
		c := cfg
		c.Key, c.OnStateChange = key, rec.record
		if c.DSN == "" {
			c.DSN = testLab.DirectDSN()
		}
		f.recs = append(f.recs, rec)
		f.runs = append(f.runs, start(ctx, c, f.work(i)))
	}
	t.Cleanup(f.stop)
	return f
}

func (f *fleet) work(member int) func(context.Context) error {
	return func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		f.mu.Lock()
		if f.running > 0 {
			f.overlaps = append(f.overlaps, fmt.Sprintf("member %d started on backend %d while %d other work(s) ran", member, s.BackendPID, f.running))
		}
		f.running++
		f.mu.Unlock()
		f.starts <- workStart{member: member, session: *s, at: time.Now()}
		<-ctx.Done()
		time.Sleep(stopDelay)
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		return nil
	}
}

// nextStart waits for the next start of work (a hang, not a timing
// assertion, fails the test).
func (f *fleet) nextStart(what string) workStart {
	f.t.Helper()
	select {
	case s := <-f.starts:
		return s
	case <-time.After(2 * time.Minute):
		f.t.Fatalf("no work started within 2 minutes %s", what)
		return workStart{}
	}
}

// settle waits until every member other than the leader stands by.
func (f *fleet) settle(leader int) {
	f.t.Helper()
	for i, rec := range f.recs {
		if i == leader {
			continue
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			states := rec.states()
			if len(states) > 0 && states[len(states)-1] == lease.StandingBy {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("member %d is not standing by: %v", i, states)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// checkOverlaps fails the test for every start of work beside another.
func (f *fleet) checkOverlaps() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.overlaps {
		f.t.Error("overlap: " + o)
	}
}

func (f *fleet) stop() {
	f.cancel()
	for _, r := range f.runs {
		r.wait(f.t)
	}
}

// termFaults are the faults that end every session of the leader at once:
// a server restart, and terminations in one statement. Each returns once
// the fault has been injected.
var termFaults = []struct {
	name  string
	apply func(t *testing.T, leader lease.Session)
}{
	{"pg_ctl restart -m fast", func(t *testing.T, _ lease.Session) {
		if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
			t.Fatal(err)
		}
	}},
	{"pg_ctl restart -m immediate", func(t *testing.T, _ lease.Session) {
		if err := testLab.RestartPrimary(context.Background(), "immediate"); err != nil {
			t.Fatal(err)
		}
	}},
	{"pg_terminate_backend by application_name", func(t *testing.T, _ lease.Session) {
		admin := pgtest.Conn(t, testLab.DirectDSN(), "term-test-admin")
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'leasectl lease term-test@%'`)
	}},
	{"the lease and fence backends terminated in one statement", func(t *testing.T, leader lease.Session) {
		admin := pgtest.Conn(t, testLab.DirectDSN(), "term-test-admin")
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($1, $2)`, int32(leader.BackendPID), int32(leader.FenceBackendPID))
	}},
}

// TestEndingEverySessionOfTheLeaderNeverOverlaps: when the server ends the
// leader's lease and fence sessions at once, the stop fence is gone with
// them; the durable term keeps the next leader's work from starting until
// the old leader has recorded that its work stopped. Three leases with the
// default timings, work that takes 300 ms to stop, every fault twice.
func TestEndingEverySessionOfTheLeaderNeverOverlaps(t *testing.T) {
	for i, fault := range termFaults {
		t.Run(fault.name, func(t *testing.T) {
			f := newFleet(t, 3, 9100100+int64(i), lease.Config{Role: "term-test", RetryInterval: time.Second})
			lead := f.nextStart("at first")
			f.settle(lead.member)
			var took []time.Duration
			for round := range 2 {
				t0 := time.Now()
				fault.apply(t, lead.session)
				next := f.nextStart(fmt.Sprintf("after %s (round %d)", fault.name, round+1))
				if next.session.Epoch <= lead.session.Epoch {
					t.Errorf("round %d: the new term's epoch %d is not above the old one's %d", round+1, next.session.Epoch, lead.session.Epoch)
				}
				took = append(took, next.at.Sub(t0))
				lead = next
				f.settle(lead.member)
			}
			t.Logf("from the fault to the next start (work takes %s to stop): %v", stopDelay, took)
			f.checkOverlaps()
		})
	}
}

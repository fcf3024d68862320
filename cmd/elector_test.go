package cmd

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// Workers that elect themselves with the runbook's SQL in their own code
// (pg_try_advisory_lock or pg_advisory_lock on the role's key, any
// language) beside leasectl run, in a database with the term record: they
// lead by holding the key, and who, failover and verify say so.

// shortRun are leasectl run's timings in these tests: a lease's bound
// (heartbeat interval + timeout + grace + 2s to reap) is 3.5s.
var shortRun = []string{"--heartbeat-interval", "500ms", "--heartbeat-timeout", "500ms", "--grace", "500ms"}

const shortRunBound = 3500 * time.Millisecond

// waitQueue waits until key has the holder pid and n sessions queued for it.
func waitQueue(t *testing.T, key int64, holder int32, n int) *locks.Snapshot {
	t.Helper()
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "observer")
	k := locks.BigintKey(key)
	for deadline := time.Now().Add(hang); ; time.Sleep(20 * time.Millisecond) {
		snap, err := locks.Read(context.Background(), conn, locks.Filter{Keys: []locks.Key{k}})
		if err != nil {
			t.Fatal(err)
		}
		l := snap.Find(k)
		if h, ok := l.Holder(); ok && (holder == 0 || h.PID == holder) && len(l.Waiters) == n {
			return snap
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %d: holders %+v, waiters %+v; want pid %d and %d waiting", key, l.Holders, l.Waiters, holder, n)
		}
	}
}

// started reports the program starts the witnesses reported so far.
func (f *runFixture) started() []leasetest.Event {
	f.count(leasetest.Start, 0) // drains what arrived
	var out []leasetest.Event
	for _, ev := range f.pending {
		if ev.Kind == leasetest.Start {
			out = append(out, ev)
		}
	}
	return out
}

// TestRollingDeployBetweenPlainSQLAndLeasectlRun: a role moves from its own
// elector (plain sessions on its key) to leasectl run replicas and back,
// in a database with the term record, and who --check and failover stay
// true throughout. A leasectl stand-by never evicts a plain leader, however
// long it has been idle: it is no lease of leasectl.
func TestRollingDeployBetweenPlainSQLAndLeasectlRun(t *testing.T) {
	const key = 9200031
	withTermRecord(t)
	f := newRunFixture(t, "poller", key)
	dsn := needLab(t).DirectDSN()
	check := func(step string) cliResult {
		t.Helper()
		res := who(t, f.keys, "poller", "--check")
		if res.Code != ExitOK {
			t.Fatalf("%s: who --check exit %d, want 0\n%s%s", step, res.Code, res.Stdout, res.Stderr)
		}
		return res
	}
	failoverPoller := func(step, want string, args ...string) string {
		t.Helper()
		res := runCLI(t, nil, append([]string{"--dsn", dsn, "--keys", f.keys, "failover", "poller", "--yes"}, args...)...)
		if res.Code != ExitOK || !strings.Contains(strings.Join(strings.Fields(res.Stdout), " "), want) {
			t.Fatalf("%s: failover exit %d, want 0 and %q\n%s%s", step, res.Code, want, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}

	// 1. The role's own elector: plain A leads, plain B queues.
	_, aPID := leader(t, dsn, "own-elector-a", key)
	b := pgtest.Conn(t, dsn, "own-elector-b")
	bPID := pgtest.PID(t, b)
	pgtest.Wait(t, b, key)
	waitQueue(t, key, aPID, 1)
	row(t, check("own elector").Stdout, "poller", strconv.Itoa(key), "-", itoa(aPID), "own-elector-a")

	// 2. A leasectl run replica joins and stands by; twice its bound
	// later the plain leader still leads, and who still passes it.
	r1 := f.startReplica(dsn, shortRun...)
	r1.log.WaitFor(t, "standing by", 1, hang)
	time.Sleep(2 * shortRunBound)
	if hs := holders(t, key); !slices.Equal(hs, []uint32{uint32(aPID)}) {
		t.Fatalf("holders %v after twice the bound, want the plain leader %d", hs, aPID)
	}
	if s := f.started(); len(s) > 0 {
		t.Fatalf("a program started while the plain leader held the key: %+v\n%s", s, r1.log)
	}
	check("a leasectl stand-by beside the plain leader")

	// 3. A forced failover: B, first in the queue, takes over, and the
	// failover is over then (B begins no term).
	failoverPoller("plain to plain", fmt.Sprintf("pid %d leads poller by holding its key: it is not a lease of leasectl", bPID), "--force")
	if hs := holders(t, key); !slices.Equal(hs, []uint32{uint32(bPID)}) {
		t.Fatalf("holders %v, want %d", hs, bPID)
	}
	check("plain B leads")

	// 4. The last plain worker goes: the leasectl replica takes over and
	// begins a term; a second replica joins.
	b.Close(context.Background())
	first := f.next(leasetest.Start)
	if first.PPID != r1.cmd.Process.Pid || first.Epoch == "" {
		t.Fatalf("program started by %d in term %q, want the replica %d in a term", first.PPID, first.Epoch, r1.cmd.Process.Pid)
	}
	r2 := f.startReplica(dsn, shortRun...)
	r2.log.WaitFor(t, "standing by", 1, hang)
	row(t, check("leasectl leads").Stdout, "poller", strconv.Itoa(key), "e"+first.Epoch)

	// 5. Between the leasectl replicas, gracefully: the next term.
	epoch, err := strconv.Atoi(first.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	// The next term is epoch+1, or later where the first replica, on a
	// loaded machine, lost its lease and began another term meanwhile.
	out := failoverPoller("leasectl to leasectl", "of poller within")
	m := regexp.MustCompile(`began term (\d+) of poller`).FindStringSubmatch(out)
	next := 0
	if m != nil {
		next, _ = strconv.Atoi(m[1])
	}
	if next <= epoch {
		t.Fatalf("failover: no term after %d began:\n%s", epoch, out)
	}
	for {
		s := f.next(leasetest.Start)
		if s.PPID == r2.cmd.Process.Pid && s.Epoch == strconv.Itoa(next) {
			break
		}
		if s.PPID != r1.cmd.Process.Pid || s.Epoch == strconv.Itoa(next) {
			t.Fatalf("program started by %d in term %s, want the replica %d in term %d", s.PPID, s.Epoch, r2.cmd.Process.Pid, next)
		}
	}
	row(t, check("the second replica leads").Stdout, "poller", strconv.Itoa(key), "e"+strconv.Itoa(next))

	// 6. And back: a plain worker C queues, the first replica is rolled
	// away, and a forced failover of the second hands the key to C.
	c := pgtest.Conn(t, dsn, "own-elector-c")
	cPID := pgtest.PID(t, c)
	pgtest.Wait(t, c, key)
	if code := r1.stop(t); code != 0 {
		t.Errorf("replica 1 exit %d", code)
	}
	waitQueue(t, key, 0, 1)
	failoverPoller("leasectl to plain", fmt.Sprintf("pid %d leads poller by holding its key: it is not a lease of leasectl", cPID), "--force")
	if hs := holders(t, key); !slices.Equal(hs, []uint32{uint32(cPID)}) {
		t.Fatalf("holders %v, want %d", hs, cPID)
	}
	row(t, check("plain C leads").Stdout, "poller", strconv.Itoa(key), "-", itoa(cPID), "own-elector-c")
	f.noOverlap()
}

//go:build unix

package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
)

// TestAFrozenStandByIsFlaggedOnceOverdue: a leasectl run stand-by frozen
// (SIGSTOP) in the server's lock queue is granted the key when the leader
// goes, and begins no term. Right after, who --check passes (a new leader
// is no alert) and shows it WAITING; once it has been idle for longer than
// the bound its lease mark records, who --check fails and names it, and
// verify fails it too.
func TestAFrozenStandByIsFlaggedOnceOverdue(t *testing.T) {
	const key = 9200032
	withTermRecord(t)
	f := newRunFixture(t, "poller", key)
	dsn := needLab(t).DirectDSN()
	// A longer bound than shortRun's, so that the first look below comes
	// well within it: 500ms + 500ms + 5s grace + 2s = 8s.
	slow := []string{"--heartbeat-interval", "500ms", "--heartbeat-timeout", "500ms", "--grace", "5s"}
	leaderRun := f.startReplica(dsn, slow...)
	f.next(leasetest.Start)
	standby := f.startReplica(dsn, slow...)
	standby.log.WaitFor(t, "standing by", 1, hang)
	snap := waitQueue(t, key, 0, 1)
	frozenPID := snap.Find(locks.BigintKey(key)).Waiters[0].PID
	if err := standby.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.cmd.Process.Signal(syscall.SIGCONT) })
	_ = leaderRun.cmd.Process.Kill()
	waitQueue(t, key, frozenPID, 0)

	res := who(t, f.keys, "poller", "--check")
	if res.Code != ExitOK {
		t.Fatalf("right after the grant: who --check exit %d, want 0\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", strconv.Itoa(key), "HELD", "WAITING", itoa(frozenPID))

	want := fmt.Sprintf("who --check: poller's holder pid %d, a lease of leasectl, has held the key idle for", frozenPID)
	for deadline := time.Now().Add(hang); ; time.Sleep(200 * time.Millisecond) {
		res = who(t, f.keys, "poller", "--check")
		if res.Code != ExitOK || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, want) || !strings.Contains(res.Stderr, "longer than its bound (heartbeat interval + timeout + stop time, 8s)") {
		t.Fatalf("once overdue: exit %d, want 1 and %q\n%s%s", res.Code, want, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", strconv.Itoa(key), "HELD", "OVERDUE", itoa(frozenPID))
	v := verifyCmd(t, f.keys, "poller")
	if v.Code != ExitCheckFailed || !strings.Contains(v.Stdout, itoa(frozenPID)+", a lease of leasectl, has held the key idle") {
		t.Errorf("verify: exit %d, want 1 naming pid %d\n%s%s", v.Code, frozenPID, v.Stdout, v.Stderr)
	}
}

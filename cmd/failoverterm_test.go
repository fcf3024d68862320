package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/pgtest"
)

// termKeys writes a keys file with role poller on key.
func termKeys(t *testing.T, key int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "roles:\n  poller: %d\n", key), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFailoverWaitsForTheNewTerm: with two leases of a role, failover
// reports success once the stand-by has begun its term, the one its work
// runs in, and says when it began.
func TestFailoverWaitsForTheNewTerm(t *testing.T) {
	const key = 1840500101
	keysPath := termKeys(t, key)
	a, b := startTermLease(t, "poller", key), startTermLease(t, "poller", key)
	first, other := a, b
	var lead lease.Session
	select {
	case lead = <-a.starts:
	case lead = <-b.starts:
		first, other = b, a
	case <-time.After(hang):
		t.Fatal("no lease leads")
	}
	other.waitState(t, lease.StandingBy)

	res := runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "failover", "poller", "--yes", "-o", "json")
	if res.Code != ExitOK {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	checkJSONDoc(t, res.Stdout, res.Code, "failover")
	var doc failoverCmdJSON
	if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	next := other.nextStart(t)
	if doc.Term == nil || doc.Term.Epoch <= lead.Epoch || doc.Term.Epoch != next.Epoch || doc.Term.TermID != next.TermID ||
		doc.Term.HolderPID != int64(next.BackendPID) || doc.NewHolder == nil || *doc.NewHolder.PID != int32(next.BackendPID) ||
		doc.TermBeganAfterMS == nil || *doc.TermBeganAfterMS <= 0 || doc.NoTermReason != nil {
		t.Errorf("the new work runs in term %d (%s) on backend %d after term %d; JSON:\n%s", next.Epoch, next.TermID, next.BackendPID, lead.Epoch, res.Stdout)
	}

	// Back, in text.
	first.waitState(t, lease.StandingBy)
	res = runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "failover", "poller", "--yes")
	back := first.nextStart(t)
	want := fmt.Sprintf("pid %d began term %d of poller within ", back.BackendPID, back.Epoch)
	if res.Code != ExitOK || !strings.Contains(res.Stdout, want) || !strings.Contains(res.Stdout, "of the request (server clock)") {
		t.Errorf("exit %d, want 0 and %q\n%s%s", res.Code, want, res.Stdout, res.Stderr)
	}
}

// TestFailoverReportsAStandByThatBeginsNoTerm: the previous term was begun
// by a session that never renews it, with timings that put its deadline
// hours away; once that session is terminated the stand-by holds the key
// but waits for that term to end, and failover says so after --wait and
// exits 1.
func TestFailoverReportsAStandByThatBeginsNoTerm(t *testing.T) {
	long := timing.Lease{HeartbeatInterval: time.Hour, HeartbeatTimeout: time.Hour, StopTimeout: time.Hour}
	for _, tc := range []struct {
		key  int64
		json bool
	}{{1840500111, false}, {1840500112, true}} {
		t.Run("json="+strconv.FormatBool(tc.json), func(t *testing.T) {
			keysPath := termKeys(t, tc.key)
			old, st := holdTermFrozen(t, tc.key, "old-leader", long)
			oldPID := pgtest.PID(t, old)
			l := startTermLease(t, "poller", tc.key)
			l.waitState(t, lease.StandingBy)
			args := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "failover", "poller", "--yes", "--force", "--wait", "2s"}
			if tc.json {
				args = append(args, "-o", "json")
			}
			res := runCLI(t, nil, args...)
			why := fmt.Sprintf("holds the key but has not begun a term: it waits for term %d of test-host pid %d (backend %d) to end (deadline ", st.Epoch, os.Getpid(), oldPID)
			if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "no new term began within 2s") || !strings.Contains(res.Stderr, why) {
				t.Fatalf("exit %d, want 1 and %q\n%s%s", res.Code, why, res.Stdout, res.Stderr)
			}
			if alive(t, oldPID) {
				t.Errorf("the old holder %d was not terminated", oldPID)
			}
			if !tc.json {
				if !strings.Contains(res.Stdout, "took over poller but began no term within 2s: pid ") || !strings.Contains(res.Stdout, why) {
					t.Errorf("output:\n%s", res.Stdout)
				}
				return
			}
			checkJSONDoc(t, res.Stdout, res.Code, "failover")
			var doc failoverCmdJSON
			if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
				t.Fatalf("%v\n%s", err, res.Stdout)
			}
			if !doc.TookOver || doc.Term != nil || doc.TermBeganAfterMS != nil || doc.NoTermReason == nil || !strings.Contains(*doc.NoTermReason, why) {
				t.Errorf("JSON:\n%s", res.Stdout)
			}
		})
	}
}

package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// verifyCmd runs `leasectl --dsn DIRECT --keys KEYS verify ARGS...` with no
// terminal.
func verifyCmd(t *testing.T, keysPath string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "verify"}, args...)...)
}

// twoRoles writes a keys file with the poller and scheduler roles only.
func twoRoles(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("roles:\n  poller: %d\n  scheduler: %d\n", foPollerKey, foSchedulerKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyPassesOnAHealthyDeployment(t *testing.T) {
	withTermRecord(t) // plain holders lead by holding the key, the record or not
	_, pollerPID := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	_, schedulerPID := leader(t, needLab(t).DirectDSN(), "scheduler-a", foSchedulerKey)
	pollerStandBy, _ := standBy(t, "poller-b", foPollerKey)
	schedulerStandBy, _ := standBy(t, "scheduler-b", foSchedulerKey)

	res := verifyCmd(t, twoRoles(t), "--failover", "--yes", "--force", "--pooler-dsn", needLab(t).PoolerDSN("transaction"), "--lease-dsn", needLab(t).PoolerDSN("session"), "--idle", "300ms")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "CHECK", "ROLE", "RESULT", "DETAIL")
	row(t, res.Stdout, "one_leader", "poller", "pass", "pid", itoa(pollerPID))
	row(t, res.Stdout, "clean_failover", "poller", "pass", "pid", itoa(pollerStandBy))
	row(t, res.Stdout, "one_leader", "scheduler", "pass", "pid", itoa(schedulerPID))
	row(t, res.Stdout, "clean_failover", "scheduler", "pass", "pid", itoa(schedulerStandBy))
	row(t, res.Stdout, "pooler_rejection", "-", "pass", "the", "probe", "refuses")
	row(t, res.Stdout, "lease_dsn", "-", "pass", "the", "probe", "accepts")
	if !strings.Contains(res.Stdout, "survived 300ms idle") {
		t.Errorf("lease_dsn does not say it kept the session idle:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "verify: 6 passed, 0 failed, 0 skipped") || !strings.Contains(res.Stdout, "may still be stopping") {
		t.Errorf("summary:\n%s", res.Stdout)
	}
	if alive(t, pollerPID) || alive(t, schedulerPID) {
		t.Errorf("an old leader is still there")
	}
}

func TestVerifyFailsWithTwoRolesUnheld(t *testing.T) {
	withTermRecord(t) // plain holders lead by holding the key, the record or not
	_, pid := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	res := verifyCmd(t, foKeys(t))
	if res.Code != ExitCheckFailed {
		t.Fatalf("exit %d, want 1\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "one_leader", "poller", "pass", "pid", itoa(pid))
	row(t, res.Stdout, "one_leader", "scheduler", "fail", "no", "holder:")
	row(t, res.Stdout, "one_leader", "reconciler", "fail", "no", "holder:")
	row(t, res.Stdout, "clean_failover", "poller", "skip", "not", "asked", "for")
	row(t, res.Stdout, "pooler_rejection", "-", "skip")
	row(t, res.Stdout, "lease_dsn", "-", "skip")
	if !strings.Contains(res.Stderr, "2 of 8 checks failed: one_leader scheduler, one_leader reconciler") {
		t.Errorf("stderr %q", res.Stderr)
	}

	// Naming roles narrows the check: poller alone passes.
	if res := verifyCmd(t, foKeys(t), "poller"); res.Code != 0 || strings.Contains(res.Stdout, "scheduler") {
		t.Errorf("verify poller: exit %d\n%s", res.Code, res.Stdout)
	}
	if res := verifyCmd(t, foKeys(t), "nosuch"); res.Code != ExitUsage || !strings.Contains(res.Stderr, `unknown role "nosuch"`) {
		t.Errorf("unknown role: exit %d, %q", res.Code, res.Stderr)
	}

	js := verifyCmd(t, foKeys(t), "-o", "json")
	checkJSONDoc(t, js.Stdout, js.Code, "verify")
	var doc verifyJSON
	if err := json.Unmarshal([]byte(js.Stdout), &doc); err != nil || js.Code != ExitCheckFailed {
		t.Fatalf("exit %d, %v:\n%s", js.Code, err, js.Stdout)
	}
	if doc.OK || doc.Counts["fail"] != 2 || doc.Counts["pass"] != 1 || doc.Counts["skip"] != 5 || len(doc.Results) != 8 {
		t.Errorf("JSON summary: %+v", doc)
	}
	first := doc.Results[0]
	if first.Check != "one_leader" || *first.Role != "poller" || first.Status != "pass" || first.Leader == nil || *first.Leader.PID != pid ||
		first.Failover != nil || first.Probe != nil || *first.Key != fmt.Sprint(foPollerKey) {
		t.Errorf("JSON first result: %+v", first)
	}
	if last := doc.Results[7]; last.Check != "lease_dsn" || last.Role != nil || last.Key != nil || last.Status != "skip" {
		t.Errorf("JSON last result: %+v", last)
	}
}

// TestVerifyFailsWhenThePoolerIsSafe: the session-mode pooler passes the
// probe, so it is not the pooler to reject.
func TestVerifyFailsWhenThePoolerIsSafe(t *testing.T) {
	withTermRecord(t) // plain holders lead by holding the key, the record or not
	leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	res := verifyCmd(t, foKeys(t), "poller", "--pooler-dsn", needLab(t).PoolerDSN("session"))
	if res.Code != ExitCheckFailed {
		t.Fatalf("exit %d, want 1\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "one_leader", "poller", "pass")
	row(t, res.Stdout, "pooler_rejection", "-", "fail", "the", "probe", "accepts")
	if !strings.Contains(res.Stderr, "pooler_rejection") {
		t.Errorf("stderr %q", res.Stderr)
	}
}

func TestVerifyFailoverNeedsConfirmation(t *testing.T) {
	withTermRecord(t) // plain holders lead by holding the key, the record or not
	_, pid := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	res := verifyCmd(t, foKeys(t), "poller", "--failover")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "--yes") || res.Stdout != "" {
		t.Errorf("--failover without --yes and terminal: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	tty := runCLIWith(t, t.Context(), nil, true, "n\n", "--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "verify", "poller", "--failover")
	if tty.Code != ExitCheckFailed || !strings.Contains(tty.Stdout, "moves the lease of poller to a stand-by") {
		t.Errorf("answer n: exit %d\n%s%s", tty.Code, tty.Stdout, tty.Stderr)
	}
	if !alive(t, pid) {
		t.Errorf("the leader was terminated without confirmation")
	}
}

func TestVerifyNeverShowsThePoolerPassword(t *testing.T) {
	withTermRecord(t) // plain holders lead by holding the key, the record or not
	leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	const password = "verify-s3cret-pw"
	dead := fmt.Sprintf("postgres://someone:%s@127.0.0.1:1/postgres?sslmode=disable", password)
	for _, args := range [][]string{{"poller", "--pooler-dsn", dead}, {"poller", "--pooler-dsn", dead, "-o", "json"}, {"--pooler-dsn", "postgres://u:" + password + "@host:notaport/x"}} {
		res := verifyCmd(t, foKeys(t), args...)
		if res.Code == 0 || strings.Contains(res.Stdout+res.Stderr, password) {
			t.Errorf("verify %q: exit %d; password shown or check passed:\n%s%s", args, res.Code, res.Stdout, res.Stderr)
		}
	}
}

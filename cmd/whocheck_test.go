package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/test/pgtest"
)

// TestWhoCheckAndVerifyAgreeOnOneLeader: `who --check` and verify's
// one_leader judge a lease alike. A key held in shared mode
// (pg_advisory_lock_shared), even by a single session, and a key held by a
// prepared transaction have no leader: both fail, naming why; a key held
// exclusively passes both.
func TestWhoCheckAndVerifyAgreeOnOneLeader(t *testing.T) {
	withTermRecord(t) // plain holders, judged by their locks alone
	const (
		leadKey     = 1840100901
		sharedKey   = 1840100902
		preparedKey = 1840100903
	)
	keysPath := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysPath, []byte(fmt.Sprintf("roles:\n  lead: %d\n  shared: %d\n  prepared: %d\n", leadKey, sharedKey, preparedKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	leader := pgtest.Conn(t, needLab(t).DirectDSN(), "the-leader")
	hold(t, leader, leadKey)
	sharer := pgtest.Conn(t, needLab(t).DirectDSN(), "a-sharer")
	pgtest.Exec(t, sharer, "SELECT pg_advisory_lock_shared($1)", int64(sharedKey))
	gid := pgtest.PreparedLock(t, needLab(t), preparedKey)

	if res := who(t, keysPath, "lead", "--check"); res.Code != 0 {
		t.Errorf("who --check lead: exit %d, want 0\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res := who(t, keysPath, "--check")
	if res.Code != ExitCheckFailed ||
		!strings.Contains(res.Stderr, "shared: 1 session holds it in shared mode (pid "+pidOf(t, sharer)+")") ||
		!strings.Contains(res.Stderr, `prepared is held by prepared transaction "`+gid+`"`) ||
		strings.Contains(res.Stderr, "lead:") || strings.Contains(res.Stderr, "lead ") {
		t.Errorf("who --check: exit %d, want 1 naming shared and prepared only\n%s%s", res.Code, res.Stdout, res.Stderr)
	}

	v := verifyCmd(t, keysPath)
	if v.Code != ExitCheckFailed {
		t.Fatalf("verify: exit %d, want 1\n%s%s", v.Code, v.Stdout, v.Stderr)
	}
	row(t, v.Stdout, "one_leader", "lead", "pass", "pid", pidOf(t, leader))
	row(t, v.Stdout, "one_leader", "shared", "fail", "1", "session", "holds", "it", "in", "shared", "mode")
	row(t, v.Stdout, "one_leader", "prepared", "fail", "held", "by", "prepared", "transaction")
}

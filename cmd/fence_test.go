package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/test/pgtest"
)

// fenceInit runs `leasectl --dsn DSN fence init ARGS...`.
func fenceInit(t *testing.T, dsn string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, append([]string{"--dsn", dsn, "fence", "init"}, args...)...)
}

// termStatus is what term.Check says of the database of dsn.
func termStatus(t *testing.T, dsn string) term.Status {
	t.Helper()
	st, err := term.Check(context.Background(), pgtest.Conn(t, dsn, ""))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFenceInitCreatesTheRecordOnce: init creates the term record in the
// DSN's database, and says so; a second init finds it and changes nothing;
// -o json says which of the two it was.
func TestFenceInitCreatesTheRecordOnce(t *testing.T) {
	dsn := pgtest.Database(t, needLab(t), "fence_cmd")
	if st := termStatus(t, dsn); st != term.Missing {
		t.Fatalf("a new database has the term record (status %d)", st)
	}
	first := fenceInit(t, dsn)
	if first.Code != ExitOK || first.Stderr != "" ||
		first.Stdout != "✓ created the term record: schema leasectl (leasectl.term, leasectl.term_history) in database fence_cmd\n" {
		t.Fatalf("first fence init: exit %d\nstdout:\n%s\nstderr:\n%s", first.Code, first.Stdout, first.Stderr)
	}
	if st := termStatus(t, dsn); st != term.Ready {
		t.Fatalf("after fence init the term record is not ready (status %d)", st)
	}
	second := fenceInit(t, dsn)
	if second.Code != ExitOK || second.Stderr != "" ||
		second.Stdout != "✓ the term record already exists: schema leasectl (leasectl.term, leasectl.term_history) in database fence_cmd; nothing to do\n" {
		t.Errorf("second fence init: exit %d\nstdout:\n%s\nstderr:\n%s", second.Code, second.Stdout, second.Stderr)
	}

	for _, created := range []bool{false, true} {
		if created {
			pgtest.Exec(t, pgtest.Conn(t, dsn, ""), "DROP SCHEMA leasectl CASCADE")
		}
		js := fenceInit(t, dsn, "-o", "json")
		if js.Code != ExitOK {
			t.Fatalf("fence init -o json: exit %d: %s", js.Code, js.Stderr)
		}
		checkJSONDoc(t, js.Stdout, js.Code, "fence init")
		var doc fenceInitJSON
		if err := json.Unmarshal([]byte(js.Stdout), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Created != created || doc.Schema != "leasectl" || doc.Database != "fence_cmd" {
			t.Errorf("fence init -o json: %+v, want created %v in schema leasectl of database fence_cmd", doc, created)
		}
	}
}

// TestFenceInitPrintSQL: --print-sql prints the SQL and connects to
// nothing, without a DSN or with one that leads nowhere; the SQL creates
// the record that leases use.
func TestFenceInitPrintSQL(t *testing.T) {
	for _, args := range [][]string{
		{"fence", "init", "--print-sql"},
		{"--dsn", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app", hostilePW, closedPort(t)), "fence", "init", "--print-sql"},
	} {
		res := runCLI(t, nil, args...)
		if res.Code != ExitOK || res.Stdout != term.DDL || res.Stderr != "" {
			t.Errorf("leasectl %s: exit %d, want 0 and term.DDL\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
		}
	}
	dsn := pgtest.Database(t, needLab(t), "fence_cmd_sql")
	pgtest.Exec(t, pgtest.Conn(t, dsn, "migration"), runCLI(t, nil, "fence", "init", "--print-sql").Stdout)
	if st := termStatus(t, dsn); st != term.Ready {
		t.Fatalf("the printed SQL did not make the term record ready (status %d)", st)
	}
	if res := fenceInit(t, dsn); res.Code != ExitOK || !strings.Contains(res.Stdout, "already exists") {
		t.Errorf("fence init after the printed SQL ran: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestFenceInitWithoutPrivilege: a role without CREATE on the database is
// refused (exit 3) with the privilege it lacks and the two ways out; once
// the owner has made the record, the role is told the GRANT it needs; with
// it, init finds the record ready.
func TestFenceInitWithoutPrivilege(t *testing.T) {
	const role = "fence_cmd_nocreate"
	l := needLab(t)
	ownerDSN := pgtest.Database(t, l, "fence_cmd_denied")
	pgtest.Login(t, l, role, "fence-cmd-nocreate-pw")
	roleDSN := l.DSN(l.Primary.Port, role, "fence_cmd_denied")

	for _, args := range [][]string{nil, {"-o", "json"}} {
		res := fenceInit(t, roleDSN, args...)
		if res.Code != ExitUnavailable || res.Stdout != "" || strings.Count(res.Stderr, "\n") != 1 {
			t.Errorf("fence init %v as %s: exit %d, want 3, one error line and no document\nstdout:\n%s\nstderr:\n%s", args, role, res.Code, res.Stdout, res.Stderr)
		}
		for _, s := range []string{`error: role "` + role + `" may not create the term record`, "it lacks CREATE on database fence_cmd_denied",
			"permission denied for database fence_cmd_denied", "run leasectl fence init as the database owner", "leasectl fence init --print-sql"} {
			if !strings.Contains(res.Stderr, s) {
				t.Errorf("fence init %v as %s does not say %q:\n%s", args, role, s, res.Stderr)
			}
		}
	}
	if st := termStatus(t, ownerDSN); st != term.Missing {
		t.Fatalf("a refused fence init left a term record behind (status %d)", st)
	}

	if res := fenceInit(t, ownerDSN); res.Code != ExitOK {
		t.Fatalf("fence init as the owner: exit %d: %s", res.Code, res.Stderr)
	}
	res := fenceInit(t, roleDSN)
	if res.Code != ExitUnavailable || res.Stdout != "" {
		t.Errorf("fence init as %s with the record in place: exit %d, want 3\n%s%s", role, res.Code, res.Stdout, res.Stderr)
	}
	for _, s := range []string{"exists in database fence_cmd_denied", `role "` + role + `" may not read and write it`,
		`as the owner of schema leasectl, run: GRANT USAGE ON SCHEMA leasectl TO "` + role + `"; GRANT SELECT, INSERT, UPDATE, DELETE ON leasectl.term, leasectl.term_history TO "` + role + `";`} {
		if !strings.Contains(res.Stderr, s) {
			t.Errorf("fence init as %s does not say %q:\n%s", role, s, res.Stderr)
		}
	}

	pgtest.Exec(t, pgtest.Conn(t, ownerDSN, ""), term.GrantSQL(role))
	if res := fenceInit(t, roleDSN); res.Code != ExitOK || !strings.Contains(res.Stdout, "already exists") {
		t.Errorf("fence init as %s with the grants: exit %d\n%s%s", role, res.Code, res.Stdout, res.Stderr)
	}
}

// TestFenceInitAndHistoryKeepPasswordsOut: a DSN with a password that leads
// nowhere is exit 3 for both commands, and the password shows nowhere.
func TestFenceInitAndHistoryKeepPasswordsOut(t *testing.T) {
	dsn := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app?sslmode=disable", hostilePW, closedPort(t))
	keysPath := historyKeys(t)
	for _, args := range [][]string{{"fence", "init"}, {"fence", "init", "-o", "json"}, {"history", "poller"}, {"history", "poller", "-o", "json"}} {
		all := append([]string{"--timeout", "1s", "--dsn", dsn, "--keys", keysPath}, args...)
		expect{code: ExitUnavailable, says: []string{"connection refused", "is the server running?"}}.check(t, all, runBounded(t, nil, all...))
	}
}

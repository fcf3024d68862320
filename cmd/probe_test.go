package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// dsnWithPassword puts the lab's password into a DSN on purpose, so tests
// can check it never shows.
func dsnWithPassword(t *testing.T, dsn string) (string, string) {
	t.Helper()
	pw, err := needLab(t).Password()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(dsn, "postgres@", "postgres:"+pw+"@", 1), pw
}

func assertNoSecret(t *testing.T, res cliResult, secret string) {
	t.Helper()
	if strings.Contains(res.Stdout, secret) || strings.Contains(res.Stderr, secret) {
		t.Errorf("the password appears in the output:\n%s\n%s", res.Stdout, res.Stderr)
	}
}

func TestProbeCommandVerdictsAndExitCodes(t *testing.T) {
	cases := []struct {
		name    string
		dsn     string
		code    int
		verdict string
	}{
		{"direct", needLab(t).DirectDSN(), ExitOK, "STABLE"},
		{"session pooler", needLab(t).PoolerDSN("session"), ExitOK, "STABLE"},
		{"transaction pooler", needLab(t).PoolerDSN("transaction"), ExitCheckFailed, "REFUSED"},
		{"statement pooler", needLab(t).PoolerDSN("statement"), ExitCheckFailed, "REFUSED"},
		{"standby", needLab(t).StandbyDSN(), ExitCheckFailed, "REFUSED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn, pw := dsnWithPassword(t, tc.dsn)
			res := runCLI(t, nil, "probe", dsn)
			if res.Code != tc.code || !strings.Contains(res.Stdout, tc.verdict) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nstderr: %s", res.Code, tc.code, res.Stdout, res.Stderr)
			}
			assertNoSecret(t, res, pw)
			if strings.Contains(res.Stdout, "\x1b[") {
				t.Errorf("styled output to a non-terminal:\n%s", res.Stdout)
			}
			if !strings.Contains(res.Stdout, "✓ cleanup") {
				t.Errorf("the probe left something behind:\n%s", res.Stdout)
			}
		})
	}
}

func TestProbeDSNFromEnvironment(t *testing.T) {
	res := runCLI(t, map[string]string{"LEASECTL_DSN": needLab(t).PoolerDSN("transaction"), "DATABASE_URL": needLab(t).DirectDSN()}, "probe")
	if res.Code != ExitCheckFailed {
		t.Errorf("LEASECTL_DSN must win over DATABASE_URL: exit %d\n%s", res.Code, res.Stdout)
	}
	res = runCLI(t, map[string]string{"DATABASE_URL": needLab(t).DirectDSN()}, "probe")
	if res.Code != ExitOK {
		t.Errorf("DATABASE_URL: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

func TestProbeJSONSchema(t *testing.T) {
	res := runCLI(t, nil, "probe", "-o", "json", needLab(t).PoolerDSN("transaction"))
	if res.Code != ExitCheckFailed {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	checkJSONDoc(t, res.Stdout, res.Code, "probe")
	var out struct {
		Verdict string  `json:"verdict"`
		Refusal string  `json:"refusal"`
		Strict  *bool   `json:"strict"`
		Target  string  `json:"target"`
		Key     string  `json:"probe_key"`
		Elapsed float64 `json:"elapsed_ms"`
		Server  *struct {
			Version    string `json:"version"`
			Port       int    `json:"port"`
			InRecovery *bool  `json:"in_recovery"`
			BackendPID uint32 `json:"backend_pid"`
		} `json:"server"`
		Checks []struct {
			Name, Status, Detail string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.Stdout)
	}
	if out.Verdict != "REFUSED" || out.Refusal != "safety" || out.Strict == nil || out.Target == "" || !isDecimalKey(out.Key) || out.Server == nil ||
		out.Server.Port != needLab(t).Primary.Port || out.Server.InRecovery == nil || out.Server.BackendPID == 0 || out.Elapsed <= 0 {
		t.Errorf("incomplete report: %+v", out)
	}
	names := map[string]string{}
	for _, c := range out.Checks {
		names[c.Name] = c.Status
		if c.Detail == "" {
			t.Errorf("check %s has no detail", c.Name)
		}
	}
	for _, n := range []string{"connect", "primary", "session_continuity", "exclusion", "proxy", "idle_session_timeout", "dead_peer_detection", "privileges", "cleanup"} {
		if names[n] == "" {
			t.Errorf("check %q missing from %v", n, names)
		}
	}
	if names["exclusion"] != "fail" {
		t.Errorf("exclusion through a transaction pooler: %s", names["exclusion"])
	}
}

func TestProbeBadInput(t *testing.T) {
	// Malformed DSN: exit 2, and the password in it is not echoed.
	res := runCLI(t, nil, "probe", "postgres://user:hunter2-secret@127.0.0.1:notaport/db")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "malformed DSN") {
		t.Errorf("malformed DSN: exit %d: %s", res.Code, res.Stderr)
	}
	assertNoSecret(t, res, "hunter2-secret")
	if strings.Contains(res.Stderr, "for usage.") {
		t.Errorf("usage shown for a bad DSN: %s", res.Stderr)
	}

	// Unreachable: exit 3, names host:port, never the password.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	res = runCLI(t, nil, "probe", "--timeout", "2s", fmt.Sprintf("postgres://user:hunter2-secret@127.0.0.1:%d/db?sslmode=disable", port))
	if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("unreachable: exit %d: %s", res.Code, res.Stderr)
	}
	assertNoSecret(t, res, "hunter2-secret")

	// Wrong password: exit 3, says authentication, no password.
	wrong := strings.Replace(needLab(t).DirectDSN(), "postgres@", "postgres:wrong-pw-123@", 1)
	res = runCLI(t, nil, "probe", wrong)
	if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, "authentication") {
		t.Errorf("wrong password: exit %d: %s", res.Code, res.Stderr)
	}
	assertNoSecret(t, res, "wrong-pw-123")

	// A probe key that a role uses: exit 2.
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, []byte("roles:\n  poller: 424242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, nil, "probe", "--keys", keysFile, "--probe-key", "424242", needLab(t).DirectDSN())
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "poller") {
		t.Errorf("probe key of a role: exit %d: %s", res.Code, res.Stderr)
	}
	// Two DSNs: a usage error.
	if res := runCLI(t, nil, "probe", "a", "b"); res.Code != ExitUsage {
		t.Errorf("two arguments: exit %d", res.Code)
	}
}

func TestProbeColourOnlyOnTerminals(t *testing.T) {
	res := runCLIWith(t, t.Context(), nil, true, "", "probe", needLab(t).DirectDSN())
	if res.Code != ExitOK || !strings.Contains(res.Stdout, "\x1b[") {
		t.Errorf("no styling on a terminal (exit %d):\n%q", res.Code, res.Stdout)
	}
	res = runCLIWith(t, t.Context(), map[string]string{"NO_COLOR": "1"}, true, "", "probe", needLab(t).DirectDSN())
	if strings.Contains(res.Stdout, "\x1b[") {
		t.Errorf("NO_COLOR ignored:\n%q", res.Stdout)
	}
}

// TestProbeInterrupted: Ctrl-C (the context ends) interrupts the probe: it
// says so, claims no verdict, and exits 130.
func TestProbeInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	// Through a session pool of one, the contender waits for a server
	// connection until --timeout: the probe is still running at the cancel.
	res := runCLIWith(t, ctx, nil, false, "", "--timeout", "30s", "probe", needLab(t).PoolerDSN("session1"))
	if res.Code != ExitInterrupted || !strings.Contains(res.Stderr, "interrupted: no verdict") {
		t.Errorf("exit %d, stderr %q; want 130 and interrupted", res.Code, res.Stderr)
	}
	if strings.Contains(res.Stdout, "REFUSED") || strings.Contains(res.Stdout, "STABLE") {
		t.Errorf("an interrupted probe claims a verdict:\n%s", res.Stdout)
	}
}

// TestProbeRefusalSaysWhy: a refusal names its cause: two leaders
// (safety), or a lease that could not work (liveness: a pool of one).
func TestProbeRefusalSaysWhy(t *testing.T) {
	res := runCLI(t, nil, "probe", needLab(t).PoolerDSN("transaction"))
	if !strings.Contains(res.Stdout, "REFUSED  session-level advisory locks do not give mutual exclusion") {
		t.Errorf("transaction pooler:\n%s", res.Stdout)
	}
	res = runCLI(t, nil, "--timeout", "1s", "probe", needLab(t).PoolerDSN("session1"))
	if !strings.Contains(res.Stdout, "REFUSED  a lease over this DSN would not work: a stand-by cannot get a server connection to wait on") ||
		strings.Contains(res.Stdout, "two leaders") {
		t.Errorf("session pool of one:\n%s", res.Stdout)
	}
}

// isDecimalKey reports whether s is a bigint key written in decimal, as
// JSON documents print keys.
func isDecimalKey(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// TestProbeFrontDoorAnswers: what the probe says behind PgBouncer when the
// pooler, not the lock, is the answer, on a lab of its own (the last case
// stops its server): a pool whose only server connection is in use, a
// client limit, the admin console, a database alias, and the server down.
func TestProbeFrontDoorAnswers(t *testing.T) {
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{
		{Name: "session", Mode: lab.Session, PoolSize: 5},
		{Name: "session1", Mode: lab.Session, PoolSize: 1},
		{Name: "oneclient", Mode: lab.Session, PoolSize: 5, Settings: map[string]string{"max_client_conn": "1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	pw, err := l.Password()
	if err != nil {
		t.Fatal(err)
	}
	withPassword := func(dsn string) string { return strings.Replace(dsn, "postgres@", "postgres:"+pw+"@", 1) }

	t.Run("pool wait", func(t *testing.T) {
		holder := pgtest.Conn(t, l.PoolerDSN("session1"), "holder")
		pgtest.Exec(t, holder, "SELECT 1")
		res := runCLI(t, nil, "--timeout", "1s", "probe", withPassword(l.PoolerDSN("session1")))
		if res.Code != ExitCheckFailed || !strings.Contains(res.Stdout, "✗ connect") ||
			!strings.Contains(res.Stdout, "REFUSED  a lease over this DSN would not work: connection A got no server connection within 1s") ||
			strings.Contains(res.Stdout, "primary") || strings.Contains(res.Stdout, "✓ cleanup") {
			t.Errorf("exit %d:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		assertNoSecret(t, res, pw)
	})
	t.Run("client limit", func(t *testing.T) {
		for i := range 5 {
			res := runCLI(t, nil, "--timeout", "2s", "probe", withPassword(l.PoolerDSN("oneclient")))
			if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, "admits no more clients") || !strings.Contains(res.Stderr, "max_client_conn") ||
				strings.Contains(res.Stderr, "server is running") || res.Stdout != "" {
				t.Fatalf("run %d: exit %d:\n%s%s", i+1, res.Code, res.Stdout, res.Stderr)
			}
			assertNoSecret(t, res, pw)
		}
	})
	t.Run("admin console", func(t *testing.T) {
		res := runCLI(t, nil, "probe", withPassword(strings.Replace(l.PoolerDSN("session"), "/postgres?", "/pgbouncer?", 1)))
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, "PgBouncer's admin console") || !strings.Contains(res.Stderr, "not a database") ||
			strings.Contains(res.Stderr, "for usage") || res.Stdout != "" {
			t.Errorf("exit %d:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		assertNoSecret(t, res, pw)
	})
	t.Run("database alias", func(t *testing.T) {
		if err := labtest.AddPoolerAlias(l, "session", "app", "postgres"); err != nil {
			t.Fatal(err)
		}
		res := runCLI(t, nil, "probe", strings.Replace(l.PoolerDSN("session"), "/postgres?", "/app?", 1))
		if res.Code != ExitOK || !strings.Contains(res.Stdout, "as postgres, database app (postgres on the server)\n") {
			t.Errorf("exit %d:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
	})
	t.Run("server down", func(t *testing.T) {
		if err := l.StopServer(ctx, &l.Primary, "fast"); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			res := runCLI(t, nil, "--timeout", "2s", "probe", withPassword(l.PoolerDSN("session")))
			if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, "the database server behind it") || res.Stdout != "" {
				t.Errorf("run %d: exit %d:\n%s%s", i+1, res.Code, res.Stdout, res.Stderr)
			}
			assertNoSecret(t, res, pw)
		}
	})
}

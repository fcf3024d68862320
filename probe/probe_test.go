package probe_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
)

func cfgFor(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return cfg
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := dbconn.Connect(context.Background(), cfgFor(t, dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// assertNothingLeft checks, on the primary directly, that no probe left its
// key held or its temp table behind, and ends whatever did so that one
// failure does not cascade into the next case.
func assertNothingLeft(t *testing.T, key int64) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, testLab.DirectDSN())
	_, holders, err := locks.KeyHolders(ctx, conn, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) > 0 {
		t.Errorf("probe key %d left held by backend(s) %v", key, holders)
		for _, pid := range holders {
			_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		}
	}
	var tables int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname LIKE 'leasectl_probe_%'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables > 0 {
		t.Errorf("%d probe temp table(s) left behind", tables)
	}
}

func statusOf(rep *probe.Report, name string) probe.Status {
	c, _ := rep.Check(name)
	return c.Status
}

func dump(rep *probe.Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "\n  %-22s %-5s %s", c.Name, c.Status, c.Detail)
	}
	return b.String()
}

// TestVerdicts is the matrix: the verdict for each way of reaching
// the server, with a quiet pooler (the probe is its only client).
func TestVerdicts(t *testing.T) {
	cases := []struct {
		name       string
		dsn        string
		want       probe.Verdict
		failing    string // the check that must fail, for refused DSNs
		contenders int
	}{
		{"direct TCP", testLab.DirectDSN(), probe.Stable, "", 0},
		{"direct unix socket", testLab.SocketDSN(), probe.Stable, "", 0},
		{"PgBouncer transaction mode, pool 20", testLab.PoolerDSN("transaction"), probe.Refused, probe.CheckExclusion, 0},
		{"PgBouncer transaction mode, pool 1", testLab.PoolerDSN("tx1"), probe.Refused, probe.CheckExclusion, 0},
		{"PgBouncer session mode", testLab.PoolerDSN("session"), probe.Stable, "", 0},
		{"PgBouncer statement mode", testLab.PoolerDSN("statement"), probe.Refused, probe.CheckExclusion, 0},
		{"hot standby", testLab.StandbyDSN(), probe.Refused, probe.CheckPrimary, 0},
		// Concurrent contenders spread over the pool's backends: cleanup
		// must still find the key and the table on every one of them.
		{"PgBouncer transaction mode, 4 contenders", testLab.PoolerDSN("transaction"), probe.Refused, probe.CheckExclusion, 4},
		{"PgBouncer statement mode, 4 contenders", testLab.PoolerDSN("statement"), probe.Refused, probe.CheckExclusion, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, tc.dsn), Contenders: tc.contenders})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if rep.Verdict != tc.want {
				t.Errorf("verdict %s, want %s:%s", rep.Verdict, tc.want, dump(rep))
			}
			if tc.failing != "" && statusOf(rep, tc.failing) != probe.Fail {
				t.Errorf("check %s is %s, want fail:%s", tc.failing, statusOf(rep, tc.failing), dump(rep))
			}
			if rep.Verdict == probe.Stable && statusOf(rep, probe.CheckExclusion) != probe.Pass {
				t.Errorf("stable without a passing exclusion check:%s", dump(rep))
			}
			if statusOf(rep, probe.CheckCleanup) != probe.Pass {
				t.Errorf("cleanup: %s", dump(rep))
			}
			assertNothingLeft(t, locks.DefaultProbeKey)
		})
	}
}

// TestSessionModeIsAProxyButSafe: PgBouncer in session mode is a proxy (a
// warning) but keeps one server session per client (stable); --strict turns
// the warning into a refusal.
func TestSessionModeIsAProxyButSafe(t *testing.T) {
	cfg := cfgFor(t, testLab.PoolerDSN("session"))
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckProxy) != probe.Warn || rep.Verdict != probe.Stable {
		t.Fatalf("session mode: proxy %s, verdict %s:%s", statusOf(rep, probe.CheckProxy), rep.Verdict, dump(rep))
	}
	rep, err = probe.Run(context.Background(), probe.Options{ConnConfig: cfg, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != probe.Refused {
		t.Errorf("strict: verdict %s, want REFUSED:%s", rep.Verdict, dump(rep))
	}
	direct, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.DirectDSN())})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(direct, probe.CheckProxy) != probe.Pass {
		t.Errorf("direct connection flagged as proxied:%s", dump(direct))
	}
	assertNothingLeft(t, locks.DefaultProbeKey)
}

// TestPoolOfOneFailsWithinTheTimeout: behind a session pooler with a pool of
// one, A holds the only server connection and a contender can never get one.
// The probe must fail, within its timeout, not hang.
func TestPoolOfOneFailsWithinTheTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("session1")), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckExclusion)
	if rep.Verdict != probe.Refused || c.Status != probe.Fail || !strings.Contains(c.Detail, "no server connection") {
		t.Fatalf("verdict %s:%s", rep.Verdict, dump(rep))
	}
	if ctx.Err() != nil {
		t.Fatal("the probe ran into the test's one-minute bound: it hung")
	}
	assertNothingLeft(t, locks.DefaultProbeKey)
}

// TestCancelledProbeLeavesNothing cancels the probe while it waits on a
// starved contender; it must return, and still release its key and table.
func TestCancelledProbeLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("session1")), Timeout: 30 * time.Second})
	if err == nil && rep.Verdict != probe.Refused {
		t.Errorf("a cancelled probe said %s", rep.Verdict)
	}
	assertNothingLeft(t, locks.DefaultProbeKey)
}

// TestTakenProbeKeyRefuses: when someone already holds the probe key, the
// probe cannot show exclusion and says who holds it.
func TestTakenProbeKeyRefuses(t *testing.T) {
	ctx := context.Background()
	const key = 991177
	holder := connect(t, testLab.DirectDSN())
	if ok, err := locks.TryLock(ctx, holder, key); err != nil || !ok {
		t.Fatalf("take the key: %v %v", ok, err)
	}
	info, err := dbconn.Server(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.DirectDSN()), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckExclusion)
	if rep.Verdict != probe.Refused || !strings.Contains(c.Detail, fmt.Sprint(info.BackendPID)) {
		t.Errorf("want a refusal naming holder pid %d:%s", info.BackendPID, dump(rep))
	}
	if n, err := locks.Unlock(ctx, holder, key); err != nil || n != 1 {
		t.Errorf("the holder's lock was touched by the probe: released %d, %v", n, err)
	}
}

// TestIdleSessionTimeoutBelowHeartbeatRefuses uses a role whose sessions the
// server ends after 10 s of idleness: a 15 s heartbeat cannot keep a lease.
// The same role, without pg_read_all_stats, shows what who would hide.
func TestIdleSessionTimeoutBelowHeartbeatRefuses(t *testing.T) {
	ctx := context.Background()
	admin := connect(t, testLab.DirectDSN())
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS probe_idle",
		"CREATE ROLE probe_idle LOGIN PASSWORD 'idle-secret'",
		"ALTER ROLE probe_idle SET idle_session_timeout = '10s'",
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := testLab.AddLogin("probe_idle", "idle-secret"); err != nil {
		t.Fatal(err)
	}
	dsn := testLab.DSN(testLab.Primary.Port, "probe_idle", "postgres")
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn), HeartbeatInterval: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckIdle) != probe.Fail || rep.Verdict != probe.Refused {
		t.Errorf("idle_session_timeout 10s vs heartbeat 15s:%s", dump(rep))
	}
	rep, err = probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn), HeartbeatInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckIdle) != probe.Warn || rep.Verdict != probe.Stable {
		t.Errorf("idle_session_timeout 10s vs heartbeat 5s:%s", dump(rep))
	}
	if c, _ := rep.Check(probe.CheckPrivileges); !strings.Contains(c.Detail, "GRANT pg_read_all_stats") || !strings.Contains(c.Detail, "GRANT pg_signal_backend") {
		t.Errorf("privileges of an unprivileged role: %s", c.Detail)
	}
	assertNothingLeft(t, locks.DefaultProbeKey)
}

func TestUnreachableIsAConnectError(t *testing.T) {
	port := testLab.Primary.Port + 1
	for testLab.Pooler("transaction").Port == port || testLab.Standby.Port == port {
		port++
	}
	cfg := cfgFor(t, fmt.Sprintf("postgres://nobody:s3cret-pw@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port))
	_, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfg, Timeout: 2 * time.Second})
	var ce *dbconn.ConnectError
	if !asConnectError(err, &ce) {
		t.Fatalf("want a ConnectError, got %T %v", err, err)
	}
	if strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("error must name host:port and never the password: %v", err)
	}
}

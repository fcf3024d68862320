package probe_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/test/labtest"
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

// assertNothingLeft checks, on the primary directly, that no probe left a
// key of the probe's range held, and ends whatever did so that one failure
// does not cascade into the next case.
func assertNothingLeft(t *testing.T) {
	t.Helper()
	assertNothingLeftOn(t, testLab.DirectDSN())
}

// assertNothingLeftOn is assertNothingLeft on the server of dsn.
func assertNothingLeftOn(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, dsn)
	var holders []int32
	err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 1 AND classid = $1::bigint::oid`, locks.ProbeKeyBase>>32).Scan(&holders)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) > 0 {
		t.Errorf("probe keys left held by backend(s) %v", holders)
		for _, pid := range holders {
			_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		}
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
		cause      probe.Cause
		contenders int
	}{
		{"direct TCP", testLab.DirectDSN(), probe.Stable, "", "", 0},
		{"direct unix socket", testLab.SocketDSN(), probe.Stable, "", "", 0},
		{"PgBouncer transaction mode, pool 20", testLab.PoolerDSN("transaction"), probe.Refused, probe.CheckExclusion, probe.Safety, 0},
		{"PgBouncer transaction mode, pool 1", testLab.PoolerDSN("tx1"), probe.Refused, probe.CheckExclusion, probe.Safety, 0},
		{"PgBouncer session mode", testLab.PoolerDSN("session"), probe.Stable, "", "", 0},
		{"PgBouncer statement mode", testLab.PoolerDSN("statement"), probe.Refused, probe.CheckExclusion, probe.Safety, 0},
		{"hot standby", testLab.StandbyDSN(), probe.Refused, probe.CheckPrimary, probe.Safety, 0},
		// Concurrent contenders spread over the pool's backends: cleanup
		// must still find the key on every one of them.
		{"PgBouncer transaction mode, 4 contenders", testLab.PoolerDSN("transaction"), probe.Refused, probe.CheckExclusion, probe.Safety, 4},
		{"PgBouncer statement mode, 4 contenders", testLab.PoolerDSN("statement"), probe.Refused, probe.CheckExclusion, probe.Safety, 4},
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
			if rep.Verdict == probe.Stable && statusOf(rep, probe.CheckRelease) != probe.Pass {
				t.Errorf("stable without a passing release check:%s", dump(rep))
			}
			if rep.Verdict == probe.Refused && rep.Refusal != tc.cause {
				t.Errorf("refused for %q, want %q:%s", rep.Refusal, tc.cause, dump(rep))
			}
			assertNothingLeft(t)
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
	assertNothingLeft(t)
}

// TestPoolOfOneFailsWithinTheTimeout: behind a session pooler with a pool of
// one, A holds the only server connection and a contender can never get one.
// The probe must fail, within its timeout, not hang.
func TestPoolOfOneFailsWithinTheTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The timeout bounds A's login too: on a loaded machine (the race run
	// beside the tests) one second was once too short for it.
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("session1")), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckExclusion)
	if rep.Verdict != probe.Refused || c.Status != probe.Fail || !strings.Contains(c.Detail, "no server connection") || rep.Refusal != probe.Liveness {
		t.Fatalf("verdict %s (%s):%s", rep.Verdict, rep.Refusal, dump(rep))
	}
	if ctx.Err() != nil {
		t.Fatal("the probe ran into the test's one-minute bound: it hung")
	}
	assertNothingLeft(t)
}

// TestCancelledProbeLeavesNothing cancels the probe while it waits on a
// starved contender; it must return without a verdict, and still release
// its key.
func TestCancelledProbeLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("session1")), Timeout: 30 * time.Second})
	if !errors.Is(err, probe.ErrInterrupted) || rep != nil {
		t.Errorf("a cancelled probe returned %+v, %v; want no report and ErrInterrupted", rep, err)
	}
	assertNothingLeft(t)
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

// TestIdleSessionTimeoutOfTheRoleWarns uses a role whose sessions the
// server ends after 10 s of idleness: a lease that kept the setting would
// lose its session between 15 s heartbeats. leasectl's lease sets its own
// (0), so the probe warns and says so, rather than refuse. The same role,
// without pg_read_all_stats, shows what who would hide.
func TestIdleSessionTimeoutOfTheRoleWarns(t *testing.T) {
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
	if c, _ := rep.Check(probe.CheckIdleSessionTimeout); c.Status != probe.Warn || rep.Verdict != probe.Stable ||
		!strings.Contains(c.Detail, "between heartbeats") || !strings.Contains(c.Detail, "sets these to 0 on its own sessions") {
		t.Errorf("idle_session_timeout 10s vs heartbeat 15s:%s", dump(rep))
	}
	rep, err = probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn), HeartbeatInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckIdleSessionTimeout) != probe.Warn || rep.Verdict != probe.Stable {
		t.Errorf("idle_session_timeout 10s vs heartbeat 5s:%s", dump(rep))
	}
	if c, _ := rep.Check(probe.CheckPrivileges); !strings.Contains(c.Detail, "GRANT pg_read_all_stats") || !strings.Contains(c.Detail, "GRANT pg_signal_backend") {
		t.Errorf("privileges of an unprivileged role: %s", c.Detail)
	}
	assertNothingLeft(t)
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

// TestALockMustDieWithItsConnection: PgBouncer in session mode with an
// empty server_reset_query hands a server connection to the next client
// with the previous client's locks still held. Every session looks stable,
// but a dead leader's lock survives it. The probe closes A and checks from
// another connection that the key was released: refused, 5 of 5, naming
// the reset setting.
func TestALockMustDieWithItsConnection(t *testing.T) {
	for i := range 5 {
		rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("noreset")), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := rep.Check(probe.CheckRelease)
		if rep.Verdict != probe.Refused || rep.Refusal != probe.Safety || c.Status != probe.Fail || !strings.Contains(c.Detail, "server_reset_query") {
			t.Fatalf("run %d: verdict %s (%s):%s", i+1, rep.Verdict, rep.Refusal, dump(rep))
		}
	}
	assertNothingLeft(t)
}

// TestConcurrentProbesNeverRefuseEachOther: each probe takes a key of its
// own, so probes of one DSN at the same time all pass.
func TestConcurrentProbesNeverRefuseEachOther(t *testing.T) {
	for round := range 10 {
		var wg sync.WaitGroup
		reps := make([]*probe.Report, 2)
		errs := make([]error, 2)
		for i := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps[i], errs[i] = probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.DirectDSN())})
			}()
		}
		wg.Wait()
		for i, rep := range reps {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if rep.Verdict != probe.Stable {
				t.Fatalf("round %d, probe %d: %s:%s", round+1, i+1, rep.Verdict, dump(rep))
			}
		}
		if reps[0].Key == reps[1].Key || !locks.IsProbeKey(reps[0].Key) || !locks.IsProbeKey(reps[1].Key) {
			t.Errorf("keys %d and %d: want two different keys of the probe's range", reps[0].Key, reps[1].Key)
		}
	}
	assertNothingLeft(t)
}

// TestInterruptedProbesChangeNoLaterVerdict interrupts probes through the
// transaction pooler at every stage (a probe there may strand its key on a
// pooled backend), then probes the direct DSN: it must still be STABLE.
// Every interrupted probe returns no verdict.
func TestInterruptedProbesChangeNoLaterVerdict(t *testing.T) {
	for i := range 30 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i)*time.Millisecond/2, cancel)
		rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("transaction"))})
		cancel()
		var ce *dbconn.ConnectError
		switch {
		case errors.As(err, &ce) && ctx.Err() != nil: // interrupted while connecting
		case !errors.Is(err, probe.ErrInterrupted) && err != nil:
			t.Fatalf("probe %d: %v", i+1, err)
		case err == nil && rep.Verdict != probe.Refused:
			t.Fatalf("probe %d finished with %s through the transaction pooler", i+1, rep.Verdict)
		case err != nil && rep != nil:
			t.Fatalf("probe %d: an interrupted probe returned a report", i+1)
		}
	}
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.DirectDSN())})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != probe.Stable {
		t.Errorf("after 30 interrupted probes, the direct DSN is %s:%s", rep.Verdict, dump(rep))
	}
	assertNothingLeft(t)
}

// TestNoFalseWarnings: a single-host DSN that leaves sslmode to its
// default (pgx then tries TLS and plain text: two configs, one host) is not
// a multi-host DSN; the recommended multi-host DSN (primary,standby with
// target_session_attrs=primary) dials the host it connected to, not the
// first one. --strict passes both.
func TestNoFalseWarnings(t *testing.T) {
	noSSL := strings.Replace(testLab.DirectDSN(), "sslmode=disable&", "", 1)
	if noSSL == testLab.DirectDSN() {
		t.Fatalf("cannot drop sslmode from %s", testLab.DirectDSN())
	}
	for name, dsn := range map[string]string{
		"single host, default sslmode":            noSSL,
		"multi-host with target_session_attrs":    testLab.MultiHostDSN(),
		"multi-host, standby first, primary last": strings.Replace(testLab.MultiHostDSN(), fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", testLab.Primary.Port, testLab.Standby.Port), fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", testLab.Standby.Port, testLab.Primary.Port), 1),
	} {
		rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn), Strict: true})
		if err != nil {
			t.Fatal(err)
		}
		if statusOf(rep, probe.CheckPrimary) != probe.Pass || statusOf(rep, probe.CheckProxy) != probe.Pass {
			t.Errorf("%s: primary %s, proxy %s:%s", name, statusOf(rep, probe.CheckPrimary), statusOf(rep, probe.CheckProxy), dump(rep))
		}
	}
	assertNothingLeft(t)
}

// TestLoadBalancersAreRefused: through pgpool-II with load balancing over
// the primary and the standby, and through HAProxy round-robin over both,
// the probe refuses every time, naming load balancing.
func TestLoadBalancersAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, says string
	}{
		{"pgpool-II, default settings", doors.PgPoolDSN(), "pgpool-II balances load"},
		{"HAProxy round-robin over primary and standby", doors.HAProxyDSN("rr"), "load balancer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 30 {
				rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, tc.dsn)})
				if err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
				if rep.Verdict != probe.Refused || rep.Refusal != probe.Safety || !strings.Contains(strings.Join(rep.Reasons(), "; "), tc.says) {
					t.Fatalf("run %d: %s (%s), want REFUSED naming %q:%s", i+1, rep.Verdict, rep.Refusal, tc.says, dump(rep))
				}
			}
		})
	}
	assertNothingLeft(t)
}

// TestProxyIdleTimeouts: HAProxy in front of the primary cuts sessions idle
// for 2 s. The probe without --idle cannot see it; with --idle 3s it
// refuses (liveness), and with --idle 1s the session survives.
func TestProxyIdleTimeouts(t *testing.T) {
	dsn := doors.HAProxyDSN("idle")
	for _, tc := range []struct {
		idle time.Duration
		want probe.Verdict
	}{{0, probe.Stable}, {3 * time.Second, probe.Refused}, {time.Second, probe.Stable}} {
		rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn), Idle: tc.idle})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Verdict != tc.want {
			t.Errorf("--idle %s: %s, want %s:%s", tc.idle, rep.Verdict, tc.want, dump(rep))
		}
		if tc.want == probe.Refused {
			c, _ := rep.Check(probe.CheckIdleSurvival)
			if rep.Refusal != probe.Liveness || c.Status != probe.Fail || !strings.Contains(c.Detail, "closes idle connections") {
				t.Errorf("--idle %s: %s:%s", tc.idle, rep.Refusal, dump(rep))
			}
		}
	}
	assertNothingLeft(t)
}

// TestDeadPeerIsJudgedFromTheServersView: a unix-socket DSN that reaches a
// relay (socat, the way the Cloud SQL Auth Proxy serves its socket) crosses
// a network: the server sees a TCP client with its default keepalives,
// which the dead-peer check warns about (and --strict refuses), and the
// proxy check names the relay. The lab's own unix socket needs neither.
func TestDeadPeerIsJudgedFromTheServersView(t *testing.T) {
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, doors.RelayDSN("cloudsql")), Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckDeadPeer) != probe.Warn || rep.Verdict != probe.Refused || rep.Refusal != probe.Strict {
		t.Errorf("through the relay:%s", dump(rep))
	}
	if c, _ := rep.Check(probe.CheckProxy); c.Status != probe.Warn || !strings.Contains(c.Detail, "the server sees a TCP client") {
		t.Errorf("the relay is not named:%s", dump(rep))
	}
	rep, err = probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.SocketDSN()), Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if statusOf(rep, probe.CheckDeadPeer) != probe.Pass || rep.Verdict != probe.Stable {
		t.Errorf("the server's own unix socket:%s", dump(rep))
	}
	assertNothingLeft(t)
}

// TestPgPoolSettings: pgpool-II configured to treat every function but
// nextval and setval as read-only balances pg_try_advisory_lock to the
// standby too, where two clients can hold one key on two servers: refused.
// With load balancing off every statement goes to the primary: stable.
// Each needs a pgpool of its own (load_balance_mode takes a restart).
func TestPgPoolSettings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings map[string]string
		want     probe.Verdict
	}{
		{"write_function_list = 'nextval,setval'", map[string]string{"write_function_list": "'nextval,setval'"}, probe.Refused},
		{"load_balance_mode = off", map[string]string{"load_balance_mode": "off"}, probe.Stable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, d, err := labtest.Start(context.Background(), lab.Options{Standby: true}, labtest.Spec{PgPool: &labtest.PgPoolSpec{Settings: tc.settings}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Stop(context.Background()) })
			for i := range 10 {
				rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, d.PgPoolDSN())})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Verdict != tc.want {
					t.Fatalf("run %d: %s, want %s:%s", i+1, rep.Verdict, tc.want, dump(rep))
				}
				if c, ok := rep.Check("pgpool"); !ok || (tc.want == probe.Stable) != (c.Status == probe.Info) {
					t.Fatalf("run %d: the pgpool-II check is %+v:%s", i+1, c, dump(rep))
				}
			}
		})
	}
}

// TestProbeOnABorrowedConnection: with Options.Conn the probe runs its
// connection A on a connection it is given (a lease's own session) and
// opens only its contender. The verdicts are the same, the release is shown
// on the contender's connection, and the given connection stays open and
// holds nothing of the probe's.
func TestProbeOnABorrowedConnection(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want probe.Verdict
	}{{testLab.DirectDSN(), probe.Stable}, {testLab.PoolerDSN("transaction"), probe.Refused}} {
		conn := connect(t, c.dsn)
		rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, c.dsn), Conn: conn})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Verdict != c.want {
			t.Errorf("%s: verdict %s, want %s:%s", c.dsn, rep.Verdict, c.want, dump(rep))
		}
		if conn.IsClosed() {
			t.Fatalf("%s: the probe closed the connection it was given", c.dsn)
		}
		if c.want == probe.Stable {
			if ch, _ := rep.Check(probe.CheckRelease); ch.Status != probe.Pass || !strings.Contains(ch.Detail, "after the contender's connection closed") {
				t.Errorf("release check: %+v", ch)
			}
			_, holders, err := locks.KeyHolders(context.Background(), conn, rep.Key)
			if err != nil || len(holders) != 0 {
				t.Errorf("probe key %d still held by %v (%v) after the probe", rep.Key, holders, err)
			}
		}
		assertNothingLeft(t)
	}
}

// TestBalancerOverTwoPrimariesIsRefused: HAProxy in front of two primaries
// that share nothing (split brain, or one name for two unrelated servers)
// gives two clients the same key on two servers. Other clients of the
// balancer hold 0 to 3 connections through it, as a service's replicas
// would, so leastconn's servers carry equal or unequal loads; connections
// that a probe opens at the same moment then often land on one server. 30
// probes through each balancer, 30 refusals, each naming the other server.
func TestBalancerOverTwoPrimariesIsRefused(t *testing.T) {
	for _, name := range []string{"split", "split-rr", "split-random"} {
		t.Run(name, func(t *testing.T) {
			dsn := doors.HAProxyDSN(name)
			var others []*pgx.Conn
			defer func() {
				for _, c := range others {
					c.Close(context.Background())
				}
			}()
			refused := 0
			for i := range 30 {
				for len(others) > i%4 {
					others[len(others)-1].Close(context.Background())
					others = others[:len(others)-1]
				}
				for len(others) < i%4 {
					others = append(others, connect(t, dsn))
				}
				rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn)})
				if err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
				if rep.Verdict == probe.Refused && rep.Refusal == probe.Safety && strings.Contains(strings.Join(rep.Reasons(), "; "), "another server") {
					refused++
				} else {
					t.Logf("run %d, %d other connection(s): %s (%s), want REFUSED naming another server:%s", i+1, i%4, rep.Verdict, rep.Refusal, dump(rep))
				}
			}
			if refused != 30 {
				t.Errorf("%d of 30 probes through HAProxy %s over two unrelated primaries were refused, want 30", refused, name)
			}
		})
	}
	assertNothingLeftOn(t, testLab.DirectDSN())
	assertNothingLeftOn(t, doors.TwinDSN())
}

// allDetails joins every check's detail, to assert on what no line says.
func allDetails(rep *probe.Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		b.WriteString(c.Detail + "\n")
	}
	return b.String()
}

// TestStandbyFirstIsAStandbyNotABalancer: a multi-host DSN with
// target_session_attrs=any that names the standby first reaches the
// standby alone. The primary check refuses it, and no line calls it a load
// balancer: every statement went to that one server.
func TestStandbyFirstIsAStandbyNotABalancer(t *testing.T) {
	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=any&passfile=%s",
		testLab.User, testLab.Standby.Port, testLab.Primary.Port, testLab.PassFile)
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn)})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckPrimary)
	if rep.Verdict != probe.Refused || rep.Refusal != probe.Safety || c.Status != probe.Fail || !strings.Contains(c.Detail, "standby") {
		t.Errorf("want REFUSED by the primary check:%s", dump(rep))
	}
	if all := allDetails(rep); strings.Contains(all, "load balancer") || strings.Contains(all, "spreads") {
		t.Errorf("one standby reported as a load balancer:%s", dump(rep))
	}
	for _, name := range []string{probe.CheckContinuity, probe.CheckExclusion} {
		if statusOf(rep, name) != probe.Pass {
			t.Errorf("%s is %s on one standby:%s", name, statusOf(rep, name), dump(rep))
		}
	}
	assertNothingLeftOn(t, testLab.StandbyDSN())
}

// TestPoolWaitIsNotAPrimaryFailure: behind PgBouncer in session mode with a
// pool of one, whose only server connection another client holds, A's
// first statement waits for a server connection until the timeout. That
// is the pooler's wait, not a failing primary check: the connect check
// fails for liveness and says so, and cleanup claims no release.
func TestPoolWaitIsNotAPrimaryFailure(t *testing.T) {
	holder := connect(t, testLab.PoolerDSN("session1"))
	if _, err := holder.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("session1")), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckConnect)
	if rep.Verdict != probe.Refused || rep.Refusal != probe.Liveness || c.Status != probe.Fail || !strings.Contains(c.Detail, "no server connection") {
		t.Errorf("want REFUSED (liveness) by the connect check naming the pooler's wait:%s", dump(rep))
	}
	if _, ok := rep.Check(probe.CheckPrimary); ok {
		t.Errorf("a primary check without an answer from the server:%s", dump(rep))
	}
	if cl, _ := rep.Check(probe.CheckCleanup); cl.Status == probe.Pass {
		t.Errorf("cleanup claims a release it did not see:%s", dump(rep))
	}
	holder.Close(context.Background())
	assertNothingLeft(t)
}

// TestPoolersClientLimit: PgBouncer with max_client_conn = 1 admits one of
// the probe's connections. Whichever it is, the answer is the same: no
// verdict, an error of kind Unavailable (exit 3) that names the pooler's
// client limit, not the server.
func TestPoolersClientLimit(t *testing.T) {
	for i := range 10 {
		rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, testLab.PoolerDSN("oneclient")), Timeout: 2 * time.Second})
		if err == nil {
			t.Fatalf("run %d: a verdict through a pooler that admits one client:%s", i+1, dump(rep))
		}
		if !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "admits no more clients") || !strings.Contains(err.Error(), "max_client_conn") ||
			strings.Contains(err.Error(), "server is running") {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	assertNothingLeft(t)
}

// TestAdminConsoleIsNotADatabase: the DSN of PgBouncer's admin console
// (database pgbouncer) is an input error (exit 2) that says what it is.
func TestAdminConsoleIsNotADatabase(t *testing.T) {
	dsn := strings.Replace(testLab.PoolerDSN("session"), "/postgres?", "/pgbouncer?", 1)
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn)})
	if err == nil {
		t.Fatalf("a verdict for PgBouncer's admin console:%s", dump(rep))
	}
	if !errors.Is(err, errkind.Input) || !strings.Contains(err.Error(), "PgBouncer's admin console") || !strings.Contains(err.Error(), "not a database") {
		t.Errorf("got %v", err)
	}
}

// TestServerDownBehindAPooler: with the server behind PgBouncer stopped,
// PgBouncer still accepts logins, then keeps the first client waiting while
// it retries the server, and tells later ones that its logins fail. The
// probe's answer is the same either way: the database cannot be reached
// (kind Unavailable, exit 3), no verdict.
func TestServerDownBehindAPooler(t *testing.T) {
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{{Name: "s", Mode: lab.Session, PoolSize: 5}, {Name: "t", Mode: lab.Transaction, PoolSize: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	for _, name := range []string{"s", "t"} {
		if _, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, l.PoolerDSN(name))}); err != nil {
			t.Fatalf("%s with the server up: %v", name, err)
		}
	}
	if err := l.StopServer(ctx, &l.Primary, "fast"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s", "t", "s", "t"} {
		rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, l.PoolerDSN(name)), Timeout: 2 * time.Second})
		if err == nil {
			t.Fatalf("%s: a verdict with the server down:%s", name, dump(rep))
		}
		if !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "the database server behind it") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPgPoolModes: pgpool-II's clustering mode decides what its nodes are.
// In native replication mode both are writable primaries and every write,
// the lock included, goes to both (the lab's own test shows the key held on
// each): the probe names the mode and what it means for a lease, and calls
// neither node a standby or a replica. With a reset-less connection cache
// (reset_query_list = 'ABORT') a key outlives its client; with the DSN's
// statement_timeout of 50 ms the probe still waits for the key on its own
// terms, refuses for safety, names pgpool-II's settings, not PgBouncer's,
// and claims a release only where pg_locks shows it.
func TestPgPoolModes(t *testing.T) {
	t.Run("native replication", func(t *testing.T) {
		l, d, err := labtest.Start(context.Background(), lab.Options{Poolers: []lab.PoolerSpec{}}, labtest.Spec{PgPool: &labtest.PgPoolSpec{Mode: labtest.NativeReplication}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Stop(context.Background()) })
		for i := range 5 {
			rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, d.PgPoolDSN())})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := rep.Check(probe.CheckPgPool)
			if rep.Verdict != probe.Stable || c.Status != probe.Warn || !strings.Contains(c.Detail, "native_replication mode") || !strings.Contains(c.Detail, "each is a writable primary") {
				t.Fatalf("run %d:%s", i+1, dump(rep))
			}
			if strings.Contains(c.Detail, "standby") || strings.Contains(c.Detail, "replica (") || strings.Contains(c.Detail, "goes to the primary") {
				t.Fatalf("run %d: the pgpool line names the wrong topology:%s", i+1, dump(rep))
			}
		}
	})
	t.Run("reset-less cache, statement_timeout in the DSN", func(t *testing.T) {
		ctx := context.Background()
		l, d, err := labtest.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{}, Standby: true}, labtest.Spec{PgPool: &labtest.PgPoolSpec{
			Settings: map[string]string{"reset_query_list": "'ABORT'", "load_balance_mode": "off"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Stop(context.Background()) })
		// pgpool-II caches no connection to database postgres.
		admin := connect(t, l.DirectDSN())
		if _, err := admin.Exec(ctx, "CREATE DATABASE app"); err != nil {
			t.Fatal(err)
		}
		// pgpool-II logs in to the standby too: wait until it has replayed
		// the new database.
		standby := connect(t, l.StandbyDSN())
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var there bool
			if err := standby.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'app')").Scan(&there); err != nil {
				t.Fatal(err)
			}
			if there {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the standby did not replay CREATE DATABASE app within 30s")
			}
		}
		dsn := l.DSN(d.PgPool.Port, l.User, "app") + "&options=-c%20statement_timeout%3D50"
		// The ground truth: a key taken through pgpool outlives its client.
		const key = 4242002
		c := connect(t, dsn)
		var pid int32
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) s", int64(key)).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
		var still bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND pid = $2)", key, pid).Scan(&still); err != nil || !still {
			t.Fatalf("the key did not outlive its client through pgpool (%v): this test proves nothing", err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn)})
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := rep.Check(probe.CheckRelease)
			if rep.Verdict != probe.Refused || rep.Refusal != probe.Safety || rel.Status != probe.Fail || !strings.Contains(rel.Detail, "reset_query_list") || strings.Contains(allDetails(rep), "PgBouncer") {
				t.Fatalf("run %d: want REFUSED (safety) by the release check naming reset_query_list:%s", i+1, dump(rep))
			}
			cl, _ := rep.Check(probe.CheckCleanup)
			var held []int32
			if err := admin.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_locks
 WHERE locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = $1`, rep.Key).Scan(&held); err != nil {
				t.Fatal(err)
			}
			switch {
			case cl.Status == probe.Pass && len(held) > 0:
				t.Fatalf("run %d: cleanup passed, and backend(s) %v still hold the key:%s", i+1, held, dump(rep))
			case cl.Status != probe.Pass && (len(held) == 0 || !strings.Contains(cl.Detail, "connection_life_time") || strings.Contains(cl.Detail, "server_lifetime")):
				t.Fatalf("run %d: cleanup %s with the key held by %v:%s", i+1, cl.Status, held, dump(rep))
			}
			for _, pid := range held {
				_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
			}
		}
	})
}

package labtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

func connectT(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// answeredBy runs sql, whose first two columns are a backend pid and the
// port of the server that ran it, on a connection of its own, and returns
// them.
func answeredBy(ctx context.Context, t *testing.T, dsn, sql string, more ...any) (pid int32, port int) {
	t.Helper()
	conn := connectT(ctx, t, dsn)
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(append([]any{&pid, &port}, more...)...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return pid, port
}

// advisoryHolder returns the pid holding advisory lock key on the server of
// dsn, or 0.
func advisoryHolder(ctx context.Context, t *testing.T, dsn string, key int64) int32 {
	t.Helper()
	conn := connectT(ctx, t, dsn)
	defer conn.Close(ctx)
	var pid int32
	err := conn.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return pid
}

// TestFrontDoors starts a lab with a standby, pgpool-II with the lab's
// default settings, two HAProxy instances (round robin over primary and
// standby; the primary alone with a 2 s client timeout) and a socat relay,
// checks what each front door does, and that Stop leaves nothing behind.
func TestFrontDoors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, d, err := labtest.Start(ctx, lab.Options{Dir: dir, Poolers: []lab.PoolerSpec{}, Standby: true}, labtest.Spec{
		PgPool: &labtest.PgPoolSpec{},
		HAProxy: []labtest.HAProxySpec{
			{Name: "rr", Backends: []string{"primary", "standby"}},
			{Name: "idle", Backends: []string{"primary"}, TimeoutClient: 2 * time.Second},
		},
		Relays: []string{"cloudsql"},
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = l.Stop(context.Background())
		}
	}()
	primary, standby := l.Primary.Port, l.Standby.Port

	t.Run("state", func(t *testing.T) {
		saved, sd, err := labtest.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if sd.PgPool == nil || sd.PgPool.Port != d.PgPool.Port || len(sd.HAProxies) != 2 || len(sd.Relays) != 1 {
			t.Fatalf("lab.json lacks the front doors: pgpool %+v, haproxy %+v, relays %+v", sd.PgPool, sd.HAProxies, sd.Relays)
		}
		if sd.PgPoolDSN() != d.PgPoolDSN() || sd.HAProxyDSN("idle") != d.HAProxyDSN("idle") || sd.RelayDSN("cloudsql") != d.RelayDSN("cloudsql") {
			t.Error("the DSNs of the loaded lab differ from the started one's")
		}
		if h := sd.HAProxy("rr"); h == nil || h.Balance != "roundrobin" || h.TimeoutClient != time.Hour {
			t.Errorf("rr's defaults are not recorded: %+v", h)
		}
		if got, want := len(saved.Status()), len(l.Status()); got != want {
			t.Errorf("the loaded lab reports %d processes, the started one %d: are the front doors attached?", got, want)
		}
		kinds := map[string]string{}
		for _, c := range l.Status() {
			kinds[c.Name] = c.Kind
			if !c.Up || c.PID == 0 {
				t.Errorf("status: %s is not up: %+v", c.Name, c)
			}
		}
		for _, name := range []string{"pgpool", "rr", "idle", "cloudsql"} {
			if kinds[name] == "" {
				t.Errorf("status does not list %s: %v", name, kinds)
			}
		}
		pw, _ := l.Password()
		for _, dsn := range []string{d.PgPoolDSN(), d.HAProxyDSN("rr"), d.RelayDSN("cloudsql")} {
			if dsn == "" || strings.Contains(dsn, pw) {
				t.Errorf("DSN empty or carrying the password: %q", dsn)
			}
		}
		if d.HAProxyDSN("nope") != "" || d.RelayDSN("nope") != "" {
			t.Error("unknown names have DSNs")
		}
	})

	t.Run("pgpool balances reads to the standby", func(t *testing.T) {
		seen := map[int]int{}
		for i := 0; i < 40 && (seen[standby] == 0 || seen[primary] == 0); i++ {
			_, port := answeredBy(ctx, t, d.PgPoolDSN(), "SELECT pg_backend_pid(), current_setting('port')::int")
			seen[port]++
		}
		if seen[standby] == 0 || seen[primary] == 0 {
			t.Fatalf("SELECTs through pgpool reached (port: count) %v; want both the primary (%d) and the standby (%d)", seen, primary, standby)
		}
	})

	t.Run("pgpool sends volatile functions to the primary", func(t *testing.T) {
		// pg_is_in_recovery() is volatile, so pgpool (with both function
		// lists empty, its default) treats the SELECT as a write: it never
		// tells a client through pgpool that it is on the standby.
		for i := 0; i < 12; i++ {
			var inRecovery bool
			_, port := answeredBy(ctx, t, d.PgPoolDSN(), "SELECT pg_backend_pid(), current_setting('port')::int, pg_is_in_recovery()", &inRecovery)
			if port != primary || inRecovery {
				t.Fatalf("SELECT ..., pg_is_in_recovery() reached port %d (in recovery: %v); pgpool should send volatile functions to the primary (%d)", port, inRecovery, primary)
			}
		}
	})

	t.Run("pgpool splits pg_backend_pid from the advisory lock", func(t *testing.T) {
		const key = 7_000_001
		for i := 0; i < 40; i++ {
			conn := connectT(ctx, t, d.PgPoolDSN())
			var pid int32
			var port int
			if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('port')::int").Scan(&pid, &port); err != nil {
				t.Fatal(err)
			}
			if port != standby {
				conn.Close(ctx)
				continue
			}
			var got bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&got); err != nil || !got {
				t.Fatalf("pg_try_advisory_lock through pgpool: %v, %v", got, err)
			}
			holder := advisoryHolder(ctx, t, l.DirectDSN(), key)
			if holder == 0 || holder == pid {
				t.Fatalf("on the primary the lock is held by pid %d; the session's pg_backend_pid() said %d (a standby backend): want another, non-zero pid", holder, pid)
			}
			if h := advisoryHolder(ctx, t, l.StandbyDSN(), key); h != 0 {
				t.Fatalf("the standby holds the lock too (pid %d)", h)
			}
			conn.Close(ctx)
			return
		}
		t.Fatal("no pgpool session in 40 was balanced to the standby")
	})

	t.Run("pgpool with the pgpass file", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, psqlPath(t), "-X", "-At", "-d", d.PgPoolDSN(), "-c", "select 41+1").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Fatalf("psql through pgpool with passfile: %v: %s", err, out)
		}
		cfg, err := dbconn.Parse(strings.Replace(d.PgPoolDSN(), "postgres@", "postgres:not-the-password@", 1), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if conn, err := dbconn.Connect(ctx, cfg); err == nil {
			conn.Close(ctx)
			t.Fatal("pgpool let a wrong password in")
		}
	})

	t.Run("haproxy round robin alternates servers", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			var inRecovery [2]bool
			conn1 := connectT(ctx, t, d.HAProxyDSN("rr"))
			conn2 := connectT(ctx, t, d.HAProxyDSN("rr"))
			for j, c := range []*pgx.Conn{conn1, conn2} {
				if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery[j]); err != nil {
					t.Fatal(err)
				}
				c.Close(ctx)
			}
			if inRecovery[0] == inRecovery[1] {
				t.Fatalf("two successive connections through rr both have pg_is_in_recovery() = %v; want one on each server", inRecovery[0])
			}
		}
	})

	t.Run("haproxy client timeout cuts idle sessions", func(t *testing.T) {
		conn := connectT(ctx, t, d.HAProxyDSN("idle"))
		var port int
		if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil || port != primary {
			t.Fatalf("idle: port %d, %v; want the primary %d", port, err, primary)
		}
		// This sleep is the thing under test: idle for less than the timeout.
		time.Sleep(500 * time.Millisecond)
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("idle for 0.5 s of a 2 s timeout, the session is gone: %v", err)
		}
		// Left idle, the session ends: HAProxy logs it with termination
		// state "cD" (the client side timed out during the data phase).
		// Only then must the session fail.
		h := d.HAProxy("idle")
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(readFileT(h.LogFile), " cD "); {
			if time.Now().After(deadline) {
				t.Fatalf("idle for 30 s behind a 2 s client timeout, and haproxy logged no client timeout (cD)\n%s", lab.LogTail(h.LogFile, 10))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
			t.Fatal("haproxy logged the client timeout, and the session still works")
		}
	})

	t.Run("relay is a TCP client on a unix socket", func(t *testing.T) {
		r := d.Relay("cloudsql")
		want := fmt.Sprintf("host=%s port=5432 ", r.SocketDir)
		if !strings.HasPrefix(d.RelayDSN("cloudsql"), want) || filepath.Base(r.Socket) != ".s.PGSQL.5432" {
			t.Fatalf("relay DSN %q (socket %s), want it to start %q", d.RelayDSN("cloudsql"), r.Socket, want)
		}
		const sql = "SELECT coalesce(host(client_addr), 'NULL') FROM pg_stat_activity WHERE pid = pg_backend_pid()"
		for dsn, want := range map[string]string{d.RelayDSN("cloudsql"): "127.0.0.1", l.SocketDSN(): "NULL"} {
			var addr string
			if err := connectT(ctx, t, dsn).QueryRow(ctx, sql).Scan(&addr); err != nil {
				t.Fatalf("%s: %v", dsn, err)
			}
			if addr != want {
				t.Errorf("%s: client_addr = %s, want %s", dsn, addr, want)
			}
		}
		out, err := exec.CommandContext(ctx, psqlPath(t), "-X", "-At", "-d", d.RelayDSN("cloudsql"), "-c", "select 41+1").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Fatalf("psql through the relay: %v: %s", err, out)
		}
	})

	t.Run("AddLogin reaches pgpool", func(t *testing.T) {
		if _, err := connectT(ctx, t, l.DirectDSN()).Exec(ctx, "CREATE ROLE fd_login LOGIN PASSWORD 'fd-secret'"); err != nil {
			t.Fatal(err)
		}
		if err := l.AddLogin("fd_login", "fd-secret"); err != nil {
			t.Fatal(err)
		}
		// pgpool logs in to both servers, HAProxy to either: wait for the
		// role to reach the standby.
		sb := connectT(ctx, t, l.StandbyDSN())
		for deadline := time.Now().Add(10 * time.Second); ; {
			var n int
			if err := sb.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = 'fd_login'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the new role did not reach the standby within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		for name, port := range map[string]int{"pgpool": d.PgPool.Port, "haproxy": d.HAProxy("rr").Port} {
			var user string
			if err := connectT(ctx, t, l.DSN(port, "fd_login", "postgres")).QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "fd_login" {
				t.Errorf("%s as fd_login: %q, %v", name, user, err)
			}
		}
	})

	t.Run("stop leaves nothing", func(t *testing.T) {
		runDir := l.RunDir
		pids := []int{labtest.PgPoolPID(d.PgPool), labtest.HAProxyPID(d.HAProxy("rr")), labtest.HAProxyPID(d.HAProxy("idle")), labtest.RelayPID(d.Relay("cloudsql"))}
		for _, pid := range pids {
			if pid == 0 {
				t.Fatalf("a front door has no live pid: %v", pids)
			}
		}
		// Stop it as `leasectl lab down` does: from its saved state.
		saved, sd, err := labtest.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		// Every pgpool process is visible to Stop's last sweep, although
		// they retitle themselves ("pgpool: wait for connection request").
		using := map[int]bool{}
		for _, pid := range lab.ProcessesUsing(runDir) {
			using[pid] = true
		}
		pgpoolMain := pids[0]
		group := processGroup(pgpoolMain)
		if len(group) < 3 {
			t.Fatalf("pgpool's process group has %d processes: %v", len(group), group)
		}
		for _, pid := range group {
			if !using[pid] {
				t.Errorf("pgpool process %d is not found by ProcessesUsing", pid)
			}
		}
		// Lose the lab's pgpool pid file: Stop must still find pgpool's
		// main process (through pgpool's own pid file), as only its own
		// shutdown removes its shared memory.
		if err := os.Remove(sd.PgPool.PIDFile); err != nil {
			t.Fatal(err)
		}
		stopped = true
		if err := saved.Stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if left := lab.ProcessesUsing(runDir); len(left) > 0 {
			t.Fatalf("processes left behind after Stop: %v", left)
		}
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("pid %d still exists", pid)
			}
		}
		for _, c := range l.Status() {
			if c.Up || c.PID != 0 {
				t.Errorf("after stop, %s still up: %+v", c.Name, c)
			}
		}
		if _, err := os.Stat(runDir); err == nil {
			t.Errorf("run dir %s still exists", runDir)
		}
		if ids := sharedMemoryOf(pgpoolMain); len(ids) > 0 {
			t.Errorf("pgpool's shared memory is left behind: shmids %v (ipcs -m)", ids)
		}
	})
}

// processGroup returns the pids of the processes in the group pgid.
func processGroup(pgid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		var pid int
		if len(f) > 2 && f[2] == fmt.Sprint(pgid) {
			fmt.Sscan(e.Name(), &pid)
			out = append(out, pid)
		}
	}
	return out
}

// sharedMemoryOf returns the SysV shared memory segments that pid created.
func sharedMemoryOf(pid int) []string {
	data, _ := os.ReadFile("/proc/sysvipc/shm")
	var ids []string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		// key shmid perms size cpid ...
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == fmt.Sprint(pid) {
			ids = append(ids, f[1])
		}
	}
	return ids
}

func readFileT(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// TestPgPoolSettings: a pgpool.conf setting of the spec wins over the
// lab's. With write_function_list set (the old style of configuration),
// only nextval and setval count as writes: pg_is_in_recovery() is balanced
// to the standby too, and so is pg_try_advisory_lock, whose lock is then
// taken on the standby, where it fences nothing on the primary.
func TestPgPoolSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, d, err := labtest.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{}, Standby: true},
		labtest.Spec{PgPool: &labtest.PgPoolSpec{Settings: map[string]string{"write_function_list": "'nextval,setval'"}}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer l.Stop(context.Background())
	primary, standby := l.Primary.Port, l.Standby.Port

	onStandby := 0
	for i := 0; i < 40 && onStandby == 0; i++ {
		var inRecovery bool
		_, port := answeredBy(ctx, t, d.PgPoolDSN(), "SELECT pg_backend_pid(), current_setting('port')::int, pg_is_in_recovery()", &inRecovery)
		if inRecovery != (port == standby) {
			t.Fatalf("port %d says pg_is_in_recovery() = %v", port, inRecovery)
		}
		if inRecovery {
			onStandby++
		}
	}
	if onStandby == 0 {
		t.Fatal("with write_function_list set, no SELECT pg_is_in_recovery() in 40 reached the standby")
	}

	const key = 7_000_002
	for i := 0; i < 40; i++ {
		conn := connectT(ctx, t, d.PgPoolDSN())
		var pid int32
		var port int
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('port')::int, pg_try_advisory_lock($1)", int64(key)).Scan(&pid, &port, &got); err != nil || !got {
			t.Fatalf("pg_try_advisory_lock through pgpool: %v, %v", got, err)
		}
		if port != standby {
			conn.Close(ctx)
			continue
		}
		if h := advisoryHolder(ctx, t, l.StandbyDSN(), key); h != pid {
			t.Fatalf("the standby's lock holder is %d, want the session's backend %d", h, pid)
		}
		if h := advisoryHolder(ctx, t, l.DirectDSN(), key); h != 0 {
			t.Fatalf("the primary (%d) holds the lock too (pid %d)", primary, h)
		}
		conn.Close(ctx)
		return
	}
	t.Fatal("no pg_try_advisory_lock in 40 sessions was balanced to the standby")
}

// TestFrontDoorOptionErrors: options that cannot work are refused before
// anything starts, with a message that says what to change.
func TestFrontDoorOptionErrors(t *testing.T) {
	primary := []string{"primary"}
	for _, tc := range []struct {
		spec labtest.Spec
		want string
	}{
		{labtest.Spec{PgPool: &labtest.PgPoolSpec{}}, "Standby: true"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a", Backends: []string{"standby"}}}}, "Standby: true"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a", Backends: []string{"replica"}}}}, `neither "primary" nor "standby"`},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a"}}}, "no Backends"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a", Backends: primary}, {Name: "a", Backends: primary}}}, "own name"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a b", Backends: primary}}}, "letters, digits"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a", Backends: primary, TimeoutClient: -time.Second}}}, "out of range"},
		{labtest.Spec{Relays: []string{"x", "x"}}, "own name"},
		{labtest.Spec{Relays: []string{"../x"}}, "letters, digits"},
	} {
		_, _, err := labtest.Start(context.Background(), lab.Options{}, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.spec, err, tc.want)
		}
	}
}

// TestFrontDoorStartFailureLeavesNothing: when a front door fails to start
// (here an HAProxy balance algorithm that does not exist) after pgpool-II
// and a relay already run, Start returns the reason and stops and removes
// everything it started.
func TestFrontDoorStartFailureLeavesNothing(t *testing.T) {
	base := pgtest.TempBase(t, "leasectl-fronts-fail-")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var steps strings.Builder
	l, _, err := labtest.Start(ctx, lab.Options{Log: &steps, Poolers: []lab.PoolerSpec{}, Standby: true}, labtest.Spec{
		PgPool:  &labtest.PgPoolSpec{},
		Relays:  []string{"r"},
		HAProxy: []labtest.HAProxySpec{{Name: "bad", Backends: []string{"primary"}, Balance: "no-such-algorithm"}},
	})
	if err == nil {
		l.Stop(context.Background())
		t.Fatal("started with an unknown balance algorithm")
	}
	if !strings.Contains(err.Error(), "haproxy bad") || !strings.Contains(err.Error(), "no-such-algorithm") {
		t.Errorf("error does not name the instance and its balance: %v", err)
	} else {
		t.Logf("start failed as it should: %v", err)
	}
	if !strings.Contains(steps.String(), "start pgpool-II") || !strings.Contains(steps.String(), "start socat relay r") {
		t.Fatalf("pgpool and the relay were not started before haproxy failed, so this test proves nothing:\n%s", steps.String())
	}
	if left := lab.ProcessesUsing(base); len(left) > 0 {
		t.Fatalf("processes left behind by the failed start: %v", left)
	}
	entries, _ := os.ReadDir(base)
	if len(entries) > 0 {
		t.Fatalf("files left behind by the failed start: %v", entries)
	}
}

func psqlPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("psql")
	if err != nil {
		t.Fatal("psql not found (sudo apt-get install -y postgresql-client)")
	}
	return path
}

// Package pgtest is the test plumbing around the lab: [RunMain] starts one
// lab per test package from TestMain (with a watchdog that stops it should
// the test binary die), and the fixtures that tests of several packages
// build on a lab's real PostgreSQL: connections that name themselves, a
// second database, a login role without privileges, a prepared transaction
// that holds an advisory lock, a session blocked waiting for one. Each
// fixture fails the test on error and cleans up after it. Only tests import
// it, so none of it is in the leasectl binary.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/locks"
)

// Conn opens a connection to dsn whose pg_stat_activity row carries
// application_name app (unless empty), closed when the test ends.
func Conn(t testing.TB, dsn, app string) *pgx.Conn {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if app != "" {
		cfg.RuntimeParams["application_name"] = app
	}
	conn, err := dbconn.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Exec runs sql on conn or fails the test.
func Exec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// PID is the server process of conn's session.
func PID(t testing.TB, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// Database creates database name afresh on the lab's primary and returns a
// DSN for it; the database is dropped, its sessions ended, when the test
// ends.
func Database(t testing.TB, l *lab.Lab, name string) string {
	t.Helper()
	admin := Conn(t, l.DirectDSN(), "pgtest-admin")
	Exec(t, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	Exec(t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return l.DSN(l.Primary.Port, l.User, name)
}

// Login creates a login role with no privileges beyond its own (no
// pg_read_all_stats), records its password with the lab, and returns a DSN
// that connects as it to database postgres.
func Login(t testing.TB, l *lab.Lab, role, password string) string {
	t.Helper()
	admin := Conn(t, l.DirectDSN(), "pgtest-admin")
	Exec(t, admin, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	Exec(t, admin, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", pgx.Identifier{role}.Sanitize(), password))
	if err := l.AddLogin(role, password); err != nil {
		t.Fatal(err)
	}
	return l.DSN(l.Primary.Port, role, "postgres")
}

// PreparedLock prepares a transaction that holds the transaction-level
// advisory lock key and returns its gid. The session that prepared it is
// closed: the lock now has no backend, and pg_locks shows it with a NULL
// pid. ROLLBACK PREPARED runs when the test ends.
func PreparedLock(t testing.TB, l *lab.Lab, key int64) string {
	t.Helper()
	ctx := context.Background()
	gid := fmt.Sprintf("pgtest-%d", time.Now().UnixNano())
	conn := Conn(t, l.DirectDSN(), "pgtest-preparer")
	Exec(t, conn, "BEGIN")
	Exec(t, conn, "SELECT pg_advisory_xact_lock($1)", key)
	Exec(t, conn, "PREPARE TRANSACTION '"+gid+"'")
	conn.Close(ctx)
	admin := Conn(t, l.DirectDSN(), "pgtest-admin")
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'") })
	return gid
}

// Wait starts pg_advisory_lock(key) on conn in the background: the session
// blocks until the key is free. The returned channel yields the statement's
// result once it has the lock (or failed). When the test ends, a wait that
// is still blocked is ended by closing conn's socket, and waited for, so
// that nothing uses conn while its cleanup closes it.
func Wait(t testing.TB, conn *pgx.Conn, key int64) <-chan error {
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		_, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", key)
		done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-finished:
		default:
			_ = conn.PgConn().Conn().Close()
			<-finished
		}
	})
	return done
}

// StandBy makes conn a polling stand-by for key, the way a replica that
// leaves the server's lock queue alone stands by: it retries
// pg_try_advisory_lock(key) every interval until it gets the key. The
// returned channel is closed once conn holds it; until then the test must
// not use conn. The polling stops when the test ends.
func StandBy(t testing.TB, conn *pgx.Conn, key int64, every time.Duration) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err == nil && ok {
				close(got)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	return got
}

// Alive reports whether backend pid still exists, as conn sees
// pg_stat_activity.
func Alive(t testing.TB, conn *pgx.Conn, pid int32) bool {
	t.Helper()
	var alive bool
	if err := conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	return alive
}

// WaitIdleHolder waits until the holder of advisory key has been idle for
// longer than d, by the server's clock in pg_stat_activity (the one that
// stale-holder detection reads), as conn sees it: a test of that detection
// needs a holder that has really idled past its threshold. It fails t
// after a minute (a hang, not a slow machine).
func WaitIdleHolder(t testing.TB, conn *pgx.Conn, key int64, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := locks.BigintKey(key)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		snap, err := locks.Read(ctx, conn, locks.Filter{Keys: []locks.Key{k}})
		if err != nil {
			t.Fatal(err)
		}
		h, held := snap.Find(k).Holder()
		idle := false
		if held && h.PID != 0 {
			err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(state LIKE 'idle%' AND clock_timestamp() - state_change > make_interval(secs => $2)), false)
  FROM pg_stat_activity WHERE pid = $1`, h.PID, d.Seconds()).Scan(&idle)
			if err != nil {
				t.Fatal(err)
			}
		}
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder of key %d (held: %v, %+v) did not idle past %s within a minute", key, held, h, d)
		}
	}
}

// Strand strands key on a pooled server connection the way FACTS.md says it
// happens: a client takes it through the named pooler of l and leaves; the
// server connection keeps it. The pooler must be a transaction pool of one
// ("tx1"), so that the next client gets the same backend: that is how the
// lock is released when the test ends.
func Strand(t testing.TB, l *lab.Lab, pooler string, key int64) {
	t.Helper()
	ctx := context.Background()
	client := Conn(t, l.PoolerDSN(pooler), "stranding-client")
	Exec(t, client, "SELECT pg_advisory_lock($1)", key)
	client.Close(ctx)
	t.Cleanup(func() {
		_, _ = locks.Unlock(ctx, Conn(t, l.PoolerDSN(pooler), ""), key)
	})
}

// TempBase makes a directory for the rest of the test's temporary files,
// sets TMPDIR to it and removes it when the test ends: a lab started then
// puts its run directory there, so a test can check that nothing is left.
// The servers' OS user must reach the run directory made under it.
func TempBase(t *testing.T, prefix string) string {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", base)
	return base
}

package locks_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

func read(t *testing.T, conn *pgx.Conn, f locks.Filter) *locks.Snapshot {
	t.Helper()
	snap, err := locks.Read(context.Background(), conn, f)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// waitFor reads until cond holds: a session blocking in pg_advisory_lock
// shows up in pg_locks a moment after it sends the statement. It gives up
// after a generous minute (a hang, not a slow machine).
func waitFor(t *testing.T, conn *pgx.Conn, f locks.Filter, what string, cond func(*locks.Snapshot) bool) *locks.Snapshot {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		snap := read(t, conn, f)
		if cond(snap) {
			return snap
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s; last snapshot: %+v", what, snap)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHolderAndWaiterFromRealSessions(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	observer := pgtest.Conn(t, dsn, "observer")
	leader := pgtest.Conn(t, dsn, "leader-a")
	standby := pgtest.Conn(t, dsn, "standby-b")
	const key = 1840000001
	pgtest.Exec(t, leader, "SELECT pg_advisory_lock($1)", int64(key))
	leaderPID, standbyPID := pgtest.PID(t, leader), pgtest.PID(t, standby)

	blocked := pgtest.Wait(t, standby, key)
	f := locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}}
	snap := waitFor(t, observer, f, "the waiter", func(s *locks.Snapshot) bool { return len(s.Find(locks.BigintKey(key)).Waiters) == 1 })

	l := snap.Find(locks.BigintKey(key))
	h, ok := l.Holder()
	if !ok || len(l.Holders) != 1 || h.PID != leaderPID {
		t.Fatalf("holders %+v, want pid %d only", l.Holders, leaderPID)
	}
	if h.Application != "leader-a" || h.User != testLab.User || h.ClientAddr != "127.0.0.1" || h.ClientPort <= 0 ||
		h.BackendStart.IsZero() || h.State != "idle" || h.StateChange.IsZero() || h.Hidden || h.Gone || h.Prepared != nil || h.Shared {
		t.Errorf("holder fields: %+v", h)
	}
	if d, ok := h.Idle(snap.Now); !ok || d < 0 {
		t.Errorf("holder idle = %v, %v; want a known idle time", d, ok)
	}
	w := l.Waiters[0]
	if w.PID != standbyPID || w.Granted || w.Application != "standby-b" || w.State != "active" || w.WaitStart.IsZero() {
		t.Errorf("waiter: %+v, want pid %d active with a wait start", w, standbyPID)
	}
	if d, ok := w.Waited(snap.Now); !ok || d < 0 {
		t.Errorf("waiter waited = %v, %v", d, ok)
	}

	// The failover the lease relies on: the holder goes, the waiter holds.
	if _, err := locks.Unlock(ctx, leader, key); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	snap = read(t, observer, f)
	if h, ok := snap.Find(locks.BigintKey(key)).Holder(); !ok || h.PID != standbyPID || len(snap.Find(locks.BigintKey(key)).Waiters) != 0 {
		t.Errorf("after release: %+v, want standby pid %d holding alone", snap.Keys, standbyPID)
	}
	if _, err := locks.Unlock(ctx, standby, key); err != nil {
		t.Fatal(err)
	}
	if snap := read(t, observer, f); snap.Find(locks.BigintKey(key)).Held() || len(snap.Keys) != 0 {
		t.Errorf("after both released: %+v, want the key free", snap.Keys)
	}
}

// TestReadThroughTransactionPooler reads through PgBouncer in transaction
// mode, where consecutive statements land on different server connections:
// Read must leave nothing behind on one that the next depends on, and its
// binary rows must say what the direct ones say.
func TestReadThroughTransactionPooler(t *testing.T) {
	leader := pgtest.Conn(t, testLab.DirectDSN(), "leader-tx")
	const key = 1840000011
	leaderPID := pgtest.PID(t, leader)
	pgtest.Exec(t, leader, "SELECT pg_advisory_lock($1)", int64(key))
	direct := read(t, pgtest.Conn(t, testLab.DirectDSN(), "observer"), locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}})
	want, ok := direct.Find(locks.BigintKey(key)).Holder()
	if !ok || want.PID != leaderPID {
		t.Fatalf("direct: holder %+v, want pid %d", want, leaderPID)
	}
	pooled := pgtest.Conn(t, testLab.PoolerDSN("transaction"), "observer-tx")
	for i := range 5 {
		for _, f := range []locks.Filter{{Keys: []locks.Key{locks.BigintKey(key)}, Presence: true}, {All: true}} {
			got, ok := read(t, pooled, f).Find(locks.BigintKey(key)).Holder()
			if !ok || got.PID != want.PID || got.Application != "leader-tx" || !got.BackendStart.Equal(want.BackendStart) ||
				!got.StateChange.Equal(want.StateChange) || got.State != "idle" || got.ClientPort != want.ClientPort {
				t.Fatalf("read %d through the pooler (%+v): holder %+v, want %+v", i, f, got, want)
			}
		}
	}
}

func TestKeysAtTheEdgesOfTheEncoding(t *testing.T) {
	ctx := context.Background()
	holder := pgtest.Conn(t, testLab.DirectDSN(), "edges")
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	pid := pgtest.PID(t, holder)
	edge := []int64{-1, 1 << 31, 1<<32 + 5, math.MaxInt64, math.MinInt64, -(1 << 32)}
	var want []locks.Key
	for _, k := range edge {
		pgtest.Exec(t, holder, "SELECT pg_advisory_lock($1)", k)
		want = append(want, locks.BigintKey(k))
	}
	t.Cleanup(func() {
		for _, k := range edge {
			_, _ = locks.Unlock(ctx, holder, k)
		}
	})
	for _, f := range []locks.Filter{{Keys: want}, {All: true}} {
		snap := read(t, observer, f)
		for _, k := range want {
			if h, ok := snap.Find(k).Holder(); !ok || h.PID != pid {
				t.Errorf("filter %+v: key %s: holder %+v, want pid %d", f, k, snap.Find(k).Holders, pid)
			}
		}
	}
	// Asking for neighbours of the edge keys must not return the edge keys.
	snap := read(t, observer, locks.Filter{Keys: []locks.Key{locks.BigintKey(-2), locks.BigintKey(1<<31 - 1), locks.BigintKey(5), locks.BigintKey(1 << 32)}})
	if len(snap.Keys) != 0 {
		t.Errorf("neighbour keys matched: %+v", snap.Keys)
	}
}

func TestLockInAnotherDatabaseIsNotShown(t *testing.T) {
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	other := pgtest.Conn(t, pgtest.Database(t, testLab, "who_other"), "other-db")
	const key = 1840000777
	pgtest.Exec(t, other, "SELECT pg_advisory_lock($1)", int64(key))
	// The same query run in who_other sees the lock: the filter is the
	// database, not the key.
	if snap := read(t, other, locks.Filter{All: true}); !snap.Find(locks.BigintKey(key)).Held() {
		t.Fatalf("the lock is not visible from its own database: %+v", snap.Keys)
	}
	for _, f := range []locks.Filter{{All: true}, {Keys: []locks.Key{locks.BigintKey(key)}}} {
		if snap := read(t, observer, f); snap.Find(locks.BigintKey(key)).Held() {
			t.Errorf("filter %+v: a lock of database who_other is shown in postgres: %+v", f, snap.Find(locks.BigintKey(key)))
		}
	}
}

func TestPairKeysAreTheirOwnForm(t *testing.T) {
	ctx := context.Background()
	holder := pgtest.Conn(t, testLab.DirectDSN(), "pair")
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	pgtest.Exec(t, holder, "SELECT pg_advisory_lock(-7, 9)")
	t.Cleanup(func() { _, _ = holder.Exec(ctx, "SELECT pg_advisory_unlock(-7, 9)") })
	pair := locks.PairOf(-7, 9)
	if pair.String() != "-7,9" {
		t.Fatalf("pair key renders as %q", pair)
	}
	if snap := read(t, observer, locks.Filter{All: true}); !snap.Find(pair).Held() {
		t.Errorf("pair lock missing from all: %+v", snap.Keys)
	}
	if snap := read(t, observer, locks.Filter{Keys: []locks.Key{pair}}); !snap.Find(pair).Held() {
		t.Errorf("pair lock missing when asked for: %+v", snap.Keys)
	}
	// The bigint key with the same 64 bits is a different lock.
	same := locks.BigintKey(pair.ID)
	if snap := read(t, observer, locks.Filter{Keys: []locks.Key{same}}); len(snap.Keys) != 0 {
		t.Errorf("bigint key %d matched the pair lock: %+v", pair.ID, snap.Keys)
	}
}

func TestPreparedTransactionHoldsWithoutPID(t *testing.T) {
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	const key = 1840000555
	gid := pgtest.PreparedLock(t, testLab, key)

	snap := read(t, observer, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}})
	h, ok := snap.Find(locks.BigintKey(key)).Holder()
	if !ok {
		t.Fatalf("prepared transaction's lock not shown: %+v", snap.Keys)
	}
	if h.PID != 0 || h.Prepared == nil || h.Prepared.GID != gid || h.Prepared.Owner != testLab.User ||
		h.Prepared.PreparedAt.IsZero() || h.User != testLab.User || h.Hidden || h.Gone {
		t.Errorf("prepared holder: %+v (prepared %+v), want pid 0 and gid %s", h, h.Prepared, gid)
	}
	if d, ok := h.Idle(snap.Now); !ok || d < 0 {
		t.Errorf("a prepared transaction's idle time = %v, %v; want the time since PREPARE", d, ok)
	}
	pgtest.Exec(t, observer, "ROLLBACK PREPARED '"+gid+"'")
	if snap := read(t, observer, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}}); len(snap.Keys) != 0 {
		t.Errorf("after ROLLBACK PREPARED: %+v", snap.Keys)
	}
}

func TestStaleHolder(t *testing.T) {
	ctx := context.Background()
	holder := pgtest.Conn(t, testLab.DirectDSN(), "hung-leader")
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	const key = 1840000444
	pgtest.Exec(t, holder, "SELECT pg_advisory_lock($1)", int64(key))
	t.Cleanup(func() { _, _ = locks.Unlock(ctx, holder, key) })
	pgtest.WaitIdleHolder(t, observer, key, time.Second)
	snap := read(t, observer, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}})
	lease := snap.ByRole(nil, []locks.Key{locks.BigintKey(key)}, false)[0]
	if got := lease.Health(snap.Now, time.Second); got != locks.StaleHolder {
		t.Errorf("health with a 1s threshold once idle past 1s = %v, want StaleHolder", got)
	}
	if got := lease.Health(snap.Now, time.Hour); got != locks.Healthy {
		t.Errorf("health with a 1h threshold = %v, want Healthy", got)
	}
}

func TestOtherRolesSessionsAreHiddenWithoutReadAllStats(t *testing.T) {
	ctx := context.Background()
	const role = "who_nostats"
	dsn := pgtest.Login(t, testLab, role, "who-nostats-pw")
	admin := pgtest.Conn(t, testLab.DirectDSN(), "admin")
	const key, own = 1840000333, 1840000334
	pgtest.Exec(t, admin, "SELECT pg_advisory_lock($1)", int64(key))
	t.Cleanup(func() { _, _ = locks.Unlock(ctx, admin, key) })
	viewer := pgtest.Conn(t, dsn, "viewer")
	pgtest.Exec(t, viewer, "SELECT pg_advisory_lock($1)", int64(own))

	snap := read(t, viewer, locks.Filter{Keys: []locks.Key{locks.BigintKey(key), locks.BigintKey(own)}})
	h, ok := snap.Find(locks.BigintKey(key)).Holder()
	if !ok || !h.Hidden || h.PID == 0 || h.User != testLab.User || h.Application != "admin" ||
		h.ClientAddr != "" || !h.BackendStart.IsZero() || h.State != "" {
		t.Errorf("another role's holder: %+v; want hidden, with pid, user and application_name still visible", h)
	}
	if h.Stale(snap.Now, 0) {
		t.Errorf("a hidden holder must never be called stale")
	}
	if !locks.AnyHidden(snap.ByRole(nil, []locks.Key{locks.BigintKey(key)}, false)) {
		t.Errorf("AnyHidden = false")
	}
	if o, ok := snap.Find(locks.BigintKey(own)).Holder(); !ok || o.Hidden || o.User != role || o.BackendStart.IsZero() {
		t.Errorf("own holder: %+v; want visible", o)
	}

	pgtest.Exec(t, admin, "GRANT pg_read_all_stats TO "+role)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "REVOKE pg_read_all_stats FROM "+role) })
	snap = read(t, viewer, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}})
	if h, _ := snap.Find(locks.BigintKey(key)).Holder(); h.Hidden || h.BackendStart.IsZero() || h.ClientAddr == "" {
		t.Errorf("with pg_read_all_stats: %+v; want visible", h)
	}
}

func TestSharedHolders(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.Conn(t, testLab.DirectDSN(), "shared-a"), pgtest.Conn(t, testLab.DirectDSN(), "shared-b")
	const key = 1840000222
	pgtest.Exec(t, a, "SELECT pg_advisory_lock_shared($1)", int64(key))
	pgtest.Exec(t, b, "SELECT pg_advisory_lock_shared($1)", int64(key))
	t.Cleanup(func() {
		_, _ = a.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", int64(key))
		_, _ = b.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", int64(key))
	})
	l := read(t, a, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}}).Find(locks.BigintKey(key))
	if len(l.Holders) != 2 || !l.Holders[0].Shared || !l.Holders[1].Shared {
		t.Errorf("shared holders: %+v", l.Holders)
	}
}

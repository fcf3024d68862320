package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

func TestMarkRecordsItsBound(t *testing.T) {
	for _, tc := range []struct {
		bound, want time.Duration
	}{
		{30 * time.Second, 30 * time.Second},
		{1500 * time.Microsecond, 2 * time.Millisecond}, // rounded up
		{0, time.Millisecond},
		{100 * 24 * time.Hour, 4294967295 * time.Millisecond}, // capped
	} {
		k := locks.MarkOf(tc.bound)
		got, ok := locks.MarkBound(k)
		if !ok || got != tc.want {
			t.Errorf("MarkOf(%s) = %s: bound %s, %v; want %s", tc.bound, k, got, ok, tc.want)
		}
		if c, _ := k.LockTag(); c != 0x6D61726B {
			t.Errorf("MarkOf(%s) has high half %#x, want the bytes \"mark\"", tc.bound, c)
		}
	}
	for _, k := range []locks.Key{locks.BigintKey(locks.MarkOf(time.Second).ID), locks.PairOf(0x6D61726B, 0), locks.PairOf(1, 1000)} {
		if _, ok := locks.MarkBound(k); ok {
			t.Errorf("%v read as a lease mark", k)
		}
	}
}

// TestReadTellsLeasesByTheirMark: a session that took a lease mark before
// its key is a lease with the mark's bound, as holder and as waiter; a
// session without one is not; the mark is no key of the snapshot, even with
// --all. A lock of the mark's form that someone holds exclusively is a key
// like any other, and marks no one.
func TestReadTellsLeasesByTheirMark(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	observer := pgtest.Conn(t, dsn, "observer")
	lease, waiter, plain := pgtest.Conn(t, dsn, "lease"), pgtest.Conn(t, dsn, "lease-waiter"), pgtest.Conn(t, dsn, "plain")
	const key, other = 1840600001, 1840600002
	if ok, err := locks.TakeMark(ctx, lease, 3500*time.Millisecond); err != nil || !ok {
		t.Fatalf("TakeMark: %v, %v", ok, err)
	}
	if ok, err := locks.TakeMark(ctx, waiter, 90*time.Second); err != nil || !ok {
		t.Fatalf("TakeMark: %v, %v", ok, err)
	}
	pgtest.Exec(t, lease, "SELECT pg_advisory_lock($1)", int64(key))
	pgtest.Exec(t, plain, "SELECT pg_advisory_lock($1)", int64(other))
	pgtest.Wait(t, waiter, key)
	f := locks.Filter{Keys: []locks.Key{locks.BigintKey(key), locks.BigintKey(other)}}
	snap := waitFor(t, observer, f, "the waiter", func(s *locks.Snapshot) bool { return len(s.Find(locks.BigintKey(key)).Waiters) == 1 })
	l := snap.Find(locks.BigintKey(key))
	if h, _ := l.Holder(); !h.IsLease() || h.LeaseBound != 3500*time.Millisecond || h.PID != pgtest.PID(t, lease) {
		t.Errorf("holder %+v, want pid %d, a lease with bound 3.5s", h, pgtest.PID(t, lease))
	}
	if w := l.Waiters[0]; !w.IsLease() || w.LeaseBound != 90*time.Second {
		t.Errorf("waiter %+v, want a lease with bound 1m30s", w)
	}
	if h, _ := snap.Find(locks.BigintKey(other)).Holder(); h.IsLease() || h.PID != pgtest.PID(t, plain) {
		t.Errorf("holder of the other key %+v, want pid %d, not a lease", h, pgtest.PID(t, plain))
	}
	all := read(t, observer, locks.Filter{All: true})
	for _, s := range []*locks.Snapshot{snap, all} {
		for _, k := range s.Keys {
			if _, ok := locks.MarkBound(k.Key); ok {
				t.Errorf("the mark %s is a key of the snapshot", k.Key)
			}
		}
	}
	if h, _ := all.Find(locks.BigintKey(key)).Holder(); h.LeaseBound != 3500*time.Millisecond {
		t.Errorf("with --all, holder %+v lacks its mark", h)
	}

	// Someone's own key in the mark's range, held exclusively: a key.
	squatter := pgtest.Conn(t, dsn, "squatter")
	k1, k2 := locks.MarkOf(time.Minute).Int4s()
	pgtest.Exec(t, squatter, "SELECT pg_advisory_lock($1::int4, $2::int4)", k1, k2)
	if ok, err := locks.TakeMark(ctx, plain, time.Minute); err != nil || ok {
		t.Errorf("TakeMark beside an exclusive holder: %v, %v; want false", ok, err)
	}
	all = read(t, observer, locks.Filter{All: true})
	if h, ok := all.Find(locks.MarkOf(time.Minute)).Holder(); !ok || h.PID != pgtest.PID(t, squatter) || h.IsLease() {
		t.Errorf("the exclusive hold in the mark's range: %+v, %v; want a key held by pid %d", h, ok, pgtest.PID(t, squatter))
	}
	if h, _ := all.Find(locks.BigintKey(other)).Holder(); h.IsLease() {
		t.Errorf("a refused mark marked pid %d", h.PID)
	}
}

package locks_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestHealthOnTheServer: exactly one leader, as `who --check` and verify's
// one_leader both judge it, on the locks the server reports: a session
// that holds its key exclusively leads; a key held in shared mode, by one
// session or two, has no leader, and neither has a key that a prepared
// transaction holds.
func TestHealthOnTheServer(t *testing.T) {
	ctx := context.Background()
	const (
		exclusive = 1840000701 + iota
		oneShared
		twoShared
		prepared
		free
	)
	leader := pgtest.Conn(t, testLab.DirectDSN(), "leader")
	pgtest.Exec(t, leader, "SELECT pg_advisory_lock($1)", int64(exclusive))
	a, b := pgtest.Conn(t, testLab.DirectDSN(), "shared-a"), pgtest.Conn(t, testLab.DirectDSN(), "shared-b")
	pgtest.Exec(t, a, "SELECT pg_advisory_lock_shared($1)", int64(oneShared))
	pgtest.Exec(t, a, "SELECT pg_advisory_lock_shared($1)", int64(twoShared))
	pgtest.Exec(t, b, "SELECT pg_advisory_lock_shared($1)", int64(twoShared))
	gid := pgtest.PreparedLock(t, testLab, prepared)

	keys := []locks.Key{}
	for _, k := range []int64{exclusive, oneShared, twoShared, prepared, free} {
		keys = append(keys, locks.BigintKey(k))
	}
	observer := pgtest.Conn(t, testLab.DirectDSN(), "observer")
	snap, err := locks.Read(ctx, observer, locks.Filter{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	leases := snap.ByRole(nil, keys, false)
	for i, tc := range []struct {
		want   locks.Health
		detail string
	}{
		{locks.Healthy, ""},
		{locks.SharedHolders, "1 session holds it in shared mode (pid " + strconv.Itoa(int(pgtest.PID(t, a))) + ")"},
		{locks.SharedHolders, "2 sessions hold it in shared mode"},
		{locks.PreparedHolder, `held by prepared transaction "` + gid + `"`},
		{locks.NoHolder, ""},
	} {
		l := leases[i]
		// A threshold of a day: nothing here is stale, whatever the time.
		if got := l.Health(snap.Now, 24*time.Hour); got != tc.want {
			t.Errorf("key %s: %s, want %s (holders %+v)", l.Key, got, tc.want, l.Holders)
		}
		var detail string
		switch tc.want {
		case locks.SharedHolders:
			detail = l.SharedDetail()
		case locks.PreparedHolder:
			detail = l.PreparedDetail()
		}
		if !strings.Contains(detail, tc.detail) {
			t.Errorf("key %s: %q lacks %q", l.Key, detail, tc.detail)
		}
	}
}

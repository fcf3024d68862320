package locks_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// holderOf reads key's holder as the observer sees it, or fails.
func holderOf(t *testing.T, observer *pgx.Conn, key locks.Key) locks.Session {
	t.Helper()
	h, ok := read(t, observer, locks.Filter{Keys: []locks.Key{key}}).Find(key).Holder()
	if !ok {
		t.Fatalf("key %s has no holder", key)
	}
	return h
}

func TestFailoverTerminatesExactlyTheHolderAndAStandByTakesOver(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	for _, tc := range []struct {
		name string
		wait func(t *testing.T, standby *pgx.Conn, key int64) // how the stand-by waits
	}{
		{"polling stand-by", func(t *testing.T, c *pgx.Conn, key int64) { pgtest.StandBy(t, c, key, 20*time.Millisecond) }},
		{"stand-by in the lock queue", func(t *testing.T, c *pgx.Conn, key int64) { pgtest.Wait(t, c, key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const key = 1840000911
			observer := pgtest.Conn(t, dsn, "observer")
			leader := pgtest.Conn(t, dsn, "leader-a")
			bystander := pgtest.Conn(t, dsn, "bystander")
			standby := pgtest.Conn(t, dsn, "standby-b")
			pgtest.Exec(t, leader, "SELECT pg_advisory_lock($1)", int64(key))
			leaderPID, standbyPID := pgtest.PID(t, leader), pgtest.PID(t, standby)
			tc.wait(t, standby, key)
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, _ = observer.Exec(cctx, "SELECT pg_terminate_backend($1)", standbyPID)
			})

			target, err := locks.FindTarget(ctx, observer, locks.BigintKey(key), map[int64]string{key: "poller"})
			if err != nil {
				t.Fatal(err)
			}
			if target.Holder.PID != leaderPID || target.Locks.Role != "poller" || target.ViaProxy || target.Holder.Application != "leader-a" {
				t.Fatalf("target %+v, want pid %d of role poller, direct", target, leaderPID)
			}
			res, err := target.Failover(ctx, observer, locks.FailoverOptions{Wait: time.Minute, Force: true})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Termination.Gone || res.Termination.PID != leaderPID || res.Termination.Sent.IsZero() || res.Termination.ServerStart.IsZero() {
				t.Errorf("termination %+v, want pid %d gone", res.Termination, leaderPID)
			}
			if res.Takeover == nil || res.Takeover.Holder.PID != standbyPID || res.Takeover.Holder.Application != "standby-b" ||
				res.Takeover.After <= 0 || res.Takeover.Polls < 1 || !res.Takeover.ByServerClock {
				t.Fatalf("takeover %+v, want the stand-by pid %d", res.Takeover, standbyPID)
			}
			if pgtest.Alive(t, observer, leaderPID) {
				t.Errorf("the old holder's backend %d is still there", leaderPID)
			}
			if !pgtest.Alive(t, observer, pgtest.PID(t, bystander)) {
				t.Errorf("a bystander was terminated too")
			}
			if err := leader.Ping(ctx); err == nil {
				t.Errorf("the old holder's connection still works")
			}
		})
	}
}

func TestTerminateTerminatesNothingWhenTheHolderChanged(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	const key = 1840000912
	k := locks.BigintKey(key)
	observer := pgtest.Conn(t, dsn, "observer")
	first := pgtest.Conn(t, dsn, "first")
	second := pgtest.Conn(t, dsn, "second")
	pgtest.Exec(t, first, "SELECT pg_advisory_lock($1)", int64(key))
	stale := holderOf(t, observer, k)

	// The session was seen holding the key; since then it released it and
	// another took it.
	if _, err := locks.Unlock(ctx, first, key); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, second, "SELECT pg_advisory_lock($1)", int64(key))
	t.Cleanup(func() { _, _ = locks.Unlock(ctx, second, key) })
	_, err := locks.Terminate(ctx, observer, k, stale, 5*time.Second)
	if !errors.Is(err, locks.ErrHolderChanged) || !strings.Contains(err.Error(), "nothing was terminated") {
		t.Fatalf("Terminate with a released holder = %v, want ErrHolderChanged", err)
	}
	if !pgtest.Alive(t, observer, stale.PID) || !pgtest.Alive(t, observer, pgtest.PID(t, second)) {
		t.Errorf("a backend was terminated although the holder changed")
	}

	// The same pid holding the key, but a different backend_start: what a
	// reused pid looks like. It is not the session that was looked up.
	now := holderOf(t, observer, k)
	reused := now
	reused.BackendStart = now.BackendStart.Add(-time.Hour)
	if _, err := locks.Terminate(ctx, observer, k, reused, 5*time.Second); !errors.Is(err, locks.ErrHolderChanged) {
		t.Fatalf("Terminate with another backend_start = %v, want ErrHolderChanged", err)
	}
	// The key of another form, or another key, is not the key looked up.
	for _, other := range []locks.Key{locks.BigintKey(key).Fence(), locks.BigintKey(key + 1)} {
		if _, err := locks.Terminate(ctx, observer, other, now, 5*time.Second); !errors.Is(err, locks.ErrHolderChanged) {
			t.Errorf("Terminate for key %s = %v, want ErrHolderChanged", other, err)
		}
	}
	if h := holderOf(t, observer, k); h.PID != now.PID || !pgtest.Alive(t, observer, now.PID) {
		t.Errorf("the holder was terminated: %+v", h)
	}
}

func TestTerminatePairKeyHolder(t *testing.T) {
	dsn := testLab.DirectDSN()
	observer := pgtest.Conn(t, dsn, "observer")
	holder := pgtest.Conn(t, dsn, "pair-holder")
	pgtest.Exec(t, holder, "SELECT pg_advisory_lock(-7, 912)")
	k := locks.PairOf(-7, 912)
	h := holderOf(t, observer, k)
	term, err := locks.Terminate(context.Background(), observer, k, h, 5*time.Second)
	if err != nil || !term.Gone {
		t.Fatalf("Terminate pair key holder = %+v, %v", term, err)
	}
	if pgtest.Alive(t, observer, h.PID) {
		t.Errorf("pid %d still there", h.PID)
	}
}

func TestTerminateRefusesItsOwnBackend(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "self")
	const key = 1840000913
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock($1)", int64(key))
	h := holderOf(t, conn, locks.BigintKey(key))
	if _, err := locks.Terminate(ctx, conn, locks.BigintKey(key), h, 5*time.Second); !errors.Is(err, locks.ErrOwnSession) {
		t.Fatalf("Terminate own backend = %v, want ErrOwnSession", err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Errorf("the connection terminated itself: %v", err)
	}
	snap := read(t, conn, locks.Filter{Keys: []locks.Key{locks.BigintKey(key)}})
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	lease := snap.ByRole(nil, []locks.Key{locks.BigintKey(key)}, false)[0]
	if _, err := locks.NewTarget(server, lease, snap.Now); !errors.Is(err, locks.ErrOwnSession) {
		t.Errorf("NewTarget with the holder answering = %v, want ErrOwnSession", err)
	}
}

// TestTerminatePermissions: a role may end its own backends; another role's
// only with pg_signal_backend, and a superuser's not at all. Without
// pg_read_all_stats the other role's backend_start is withheld, so the
// re-check compares NULL with NULL and still finds the holder.
func TestTerminatePermissions(t *testing.T) {
	ctx := context.Background()
	const key, suKey = 1840000914, 1840000915
	k := locks.BigintKey(key)
	holderDSN := pgtest.Login(t, testLab, "fo_holder", "fo-holder-pw")
	opDSN := pgtest.Login(t, testLab, "fo_operator", "fo-operator-pw")
	admin := pgtest.Conn(t, testLab.DirectDSN(), "admin")
	operator := pgtest.Conn(t, opDSN, "operator")
	holder := pgtest.Conn(t, holderDSN, "worker")
	pgtest.Exec(t, holder, "SELECT pg_advisory_lock($1)", int64(key))
	h := holderOf(t, operator, k)
	if !h.Hidden || !h.BackendStart.IsZero() || h.User != "fo_holder" {
		t.Fatalf("holder as the operator sees it: %+v; want hidden, without backend_start", h)
	}

	_, err := locks.Terminate(ctx, operator, k, h, 5*time.Second)
	var pe *locks.PermissionError
	if !errors.As(err, &pe) || pe.HolderSuperuser || pe.Role != "fo_operator" || pe.HolderRole != "fo_holder" || pe.PID != h.PID {
		t.Fatalf("Terminate without pg_signal_backend = %v (%+v), want a PermissionError", err, pe)
	}
	if pe.Grant() != `GRANT pg_signal_backend TO "fo_operator"` || !strings.Contains(err.Error(), pe.Grant()) || !strings.Contains(err.Error(), "run failover as role fo_holder") {
		t.Errorf("message %q (grant %q) does not say what would allow it", err, pe.Grant())
	}
	if !pgtest.Alive(t, admin, h.PID) {
		t.Fatalf("pid %d terminated despite the error", h.PID)
	}

	pgtest.Exec(t, admin, "GRANT pg_signal_backend TO fo_operator")
	term, err := locks.Terminate(ctx, operator, k, h, 5*time.Second)
	if err != nil || !term.Gone {
		t.Fatalf("Terminate with pg_signal_backend and a withheld backend_start = %+v, %v", term, err)
	}
	if pgtest.Alive(t, admin, h.PID) {
		t.Errorf("pid %d still there", h.PID)
	}

	// A superuser's backend: no grant helps.
	pgtest.Exec(t, admin, "SELECT pg_advisory_lock($1)", int64(suKey))
	t.Cleanup(func() { _, _ = locks.Unlock(ctx, admin, suKey) })
	su := holderOf(t, operator, locks.BigintKey(suKey))
	_, err = locks.Terminate(ctx, operator, locks.BigintKey(suKey), su, 5*time.Second)
	if !errors.As(err, &pe) || !pe.HolderSuperuser || pe.Grant() != "" || !strings.Contains(err.Error(), "only a superuser") {
		t.Fatalf("Terminate of a superuser's backend = %v, want a PermissionError naming superusers", err)
	}
	if err := admin.Ping(ctx); err != nil {
		t.Errorf("the superuser's backend was terminated: %v", err)
	}
}

func TestAwaitTakeoverGivesUpWithoutStandBy(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	const key = 1840000916
	observer := pgtest.Conn(t, dsn, "observer")
	leader := pgtest.Conn(t, dsn, "lonely-leader")
	pgtest.Exec(t, leader, "SELECT pg_advisory_lock($1)", int64(key))
	target, err := locks.FindTarget(ctx, observer, locks.BigintKey(key), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := target.Failover(ctx, observer, locks.FailoverOptions{Wait: 200 * time.Millisecond, Force: true})
	if !errors.Is(err, locks.ErrNoTakeover) || res == nil || !res.Termination.Gone || res.Takeover != nil {
		t.Fatalf("Failover without stand-by = %+v, %v; want the termination and ErrNoTakeover", res, err)
	}
	// The connection survives the wait and finds nothing to fail over.
	if _, err := locks.FindTarget(ctx, observer, locks.BigintKey(key), nil); !errors.Is(err, locks.ErrNoHolder) {
		t.Errorf("FindTarget after = %v, want ErrNoHolder", err)
	}
}

func TestNewTargetRefusals(t *testing.T) {
	now := time.Now()
	primary := dbconn.ServerInfo{BackendPID: 99}
	one := locks.Session{PID: 10, Granted: true}
	lease := func(hs ...locks.Session) locks.Lease {
		return locks.Lease{Role: "poller", KeyLocks: locks.KeyLocks{Key: locks.BigintKey(1), Holders: hs}}
	}
	for _, tc := range []struct {
		name   string
		server dbconn.ServerInfo
		lease  locks.Lease
		want   error
	}{
		{"a holder on a primary", primary, lease(one), nil},
		{"standby", dbconn.ServerInfo{InRecovery: true}, lease(one), locks.ErrStandby},
		{"no holder", primary, lease(), locks.ErrNoHolder},
		{"shared holders", primary, lease(one, locks.Session{PID: 11, Granted: true}), locks.ErrNotALease},
		{"prepared transaction", primary, lease(locks.Session{Granted: true, Prepared: &locks.PreparedXact{GID: "g"}}), locks.ErrNotALease},
		{"the answering backend", dbconn.ServerInfo{BackendPID: 10}, lease(one), locks.ErrOwnSession},
	} {
		target, err := locks.NewTarget(tc.server, tc.lease, now)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (target != nil) {
			t.Errorf("%s: %v, %v; want %v", tc.name, target, err, tc.want)
		}
	}
	if _, err := locks.NewTarget(primary, lease(), now); !strings.Contains(err.Error(), "nothing to fail over: nobody holds poller") {
		t.Errorf("no holder message: %v", err)
	}
}

func TestIsTakeover(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	old := locks.Session{PID: 10, Granted: true, BackendStart: start}
	for _, tc := range []struct {
		name string
		s    locks.Session
		want bool
	}{
		{"another pid", locks.Session{PID: 11, Granted: true}, true},
		{"the same session", old, false},
		{"the pid reused by a new backend", locks.Session{PID: 10, Granted: true, BackendStart: start.Add(time.Minute)}, true},
		{"the same pid, start withheld: cannot tell, so not", locks.Session{PID: 10, Granted: true, Hidden: true}, false},
		{"a waiter", locks.Session{PID: 11}, false},
		{"a prepared transaction", locks.Session{Granted: true, Prepared: &locks.PreparedXact{GID: "g"}}, false},
	} {
		if got := locks.IsTakeover(old, tc.s); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAwaitTakeoverSaysWhenTheKeyPassedBeforeTheSignal: the holder check and
// the signal are one statement, not one atomic step. When the holder
// released the key before the signal and a stand-by took it, the takeover
// says so (BeforeSignal), by the server's clock; a takeover after the
// signal does not.
func TestAwaitTakeoverSaysWhenTheKeyPassedBeforeTheSignal(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	const key = 1840000917
	observer := pgtest.Conn(t, dsn, "observer")
	old := pgtest.Conn(t, dsn, "old-holder")
	next := pgtest.Conn(t, dsn, "new-holder")
	pgtest.Exec(t, old, "SELECT pg_advisory_lock($1)", int64(key))
	oldHolder := holderOf(t, observer, locks.BigintKey(key))
	// The old holder releases; the new one takes the key (and goes idle):
	// both before the "signal" below.
	pgtest.Exec(t, old, "SELECT pg_advisory_unlock($1)", int64(key))
	pgtest.Exec(t, next, "SELECT pg_advisory_lock($1)", int64(key))
	var now time.Time
	if err := observer.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		signalAt time.Time
		want     bool
	}{{now, true}, {now.Add(-time.Hour), false}} {
		term := locks.Termination{PID: oldHolder.PID, Gone: true, Sent: time.Now(), ServerStart: tc.signalAt, SignalAt: tc.signalAt}
		tk, err := locks.AwaitTakeover(ctx, observer, locks.BigintKey(key), oldHolder, term, locks.AwaitOptions{Within: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Holder.PID != pgtest.PID(t, next) || tk.BeforeSignal != tc.want {
			t.Errorf("signal at %s: takeover by %d, before the signal %v; want %d, %v", tc.signalAt, tk.Holder.PID, tk.BeforeSignal, pgtest.PID(t, next), tc.want)
		}
	}
}

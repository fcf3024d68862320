package locks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// The ways a forced failover can refuse or fail; each is wrapped with the
// specifics (key, pid) and tested with errors.Is.
var (
	// ErrHolderChanged means the session that was looked up no longer held
	// the key when the termination statement ran (it released the key, or
	// exited and its pid may have been reused): nothing was terminated.
	ErrHolderChanged = errkind.New(errkind.CheckFailed, "the holder changed since it was looked up: nothing was terminated")
	// ErrNoHolder means nobody holds the key: there is nothing to fail over.
	ErrNoHolder = errkind.New(errkind.CheckFailed, "nothing to fail over")
	// ErrNotALease means the key is held in a way no lease holds it: by a
	// prepared transaction (no backend to terminate) or by several sessions
	// in shared mode.
	ErrNotALease = errkind.New(errkind.CheckFailed, "not a lease")
	// ErrStandby means the server is a standby: its advisory locks are its
	// own, and terminating a backend there fences nothing on the primary.
	ErrStandby = errkind.New(errkind.Input, "the server is a standby")
	// ErrOwnSession means the holder is the very backend the termination
	// would run on: through a transaction pooler, leasectl was lent the
	// server connection that holds the key.
	ErrOwnSession = errkind.New(errkind.Input, "the holder is this connection's own backend")
	// ErrNoTakeover means no other session took the key within the wait.
	ErrNoTakeover = errkind.New(errkind.CheckFailed, "no stand-by took over")
)

// PermissionError reports that the server refused to terminate the holder
// (SQLSTATE 42501): only superusers may end a superuser's backend; other
// backends may be ended by their own role, by members of it, and by members
// of pg_signal_backend.
type PermissionError struct {
	// PID is the backend that was to be terminated.
	PID int32
	// HolderRole is the role the holder is connected as.
	HolderRole string
	// HolderSuperuser is true when HolderRole is a superuser: then only a
	// superuser can terminate it, whatever is granted.
	HolderSuperuser bool
	// Role is the role that tried (current_user).
	Role string
	// Err is the server's error.
	Err error
}

func (e *PermissionError) Error() string {
	if e.HolderSuperuser {
		return fmt.Sprintf("permission denied to terminate pid %d: it runs as superuser %s, and only a superuser can end a superuser's backend; run failover as a superuser",
			e.PID, e.HolderRole)
	}
	return fmt.Sprintf("permission denied to terminate pid %d of role %s as role %s: %s; (or run failover as role %s)",
		e.PID, e.HolderRole, e.Role, e.Grant(), e.HolderRole)
}

// Unwrap returns the server's error.
func (e *PermissionError) Unwrap() error { return e.Err }

// Grant is the statement that would let Role terminate the holder, or ""
// when no grant can (a superuser holder).
func (e *PermissionError) Grant() string {
	if e.HolderSuperuser {
		return ""
	}
	return grantTo("pg_signal_backend", e.Role)
}

// Termination is what [Terminate] did.
type Termination struct {
	// PID is the backend that was terminated.
	PID int32
	// Gone is true when pg_terminate_backend confirmed that the backend
	// exited within the timeout. False means the signal was sent but the
	// backend was still there when the timeout passed (the server logs a
	// WARNING); it may still exit.
	Gone bool
	// Sent is when the statement was sent (the client's clock, with its
	// monotonic reading): the signal goes out a round trip's half later.
	Sent time.Time
	// ServerStart is the server's clock at the start of the statement
	// (statement_timestamp()), before it checked the holder.
	ServerStart time.Time
	// SignalAt is the server's clock after the holder check, just before
	// the signal; zero when nothing was signalled.
	SignalAt time.Time
	// Took is how long the statement took: signalling, and waiting for the
	// backend to exit. pg_terminate_backend checks for the exit every
	// 100 ms, so this is rarely less, although the backend (and its lock)
	// is usually gone within a millisecond or two.
	Took time.Duration
}

// Returned is when the statement returned.
func (t Termination) Returned() time.Time { return t.Sent.Add(t.Took) }

// terminateSQL terminates the holder of one advisory key in one statement,
// so that nothing can change between the check and the kill: it terminates
// $3 only if, at that instant, the server is not a standby, $3 is not the
// backend running the statement, and $3 holds the key (granted, objsubid
// $4, classid $1, objid $2, current database) with backend_start $5. A
// pid can exit and be reused between a lookup and a kill; pid and
// backend_start together name one backend. backend_start is compared with
// IS NOT DISTINCT FROM because the server withholds it (NULL) for other
// roles' sessions from a role without pg_read_all_stats: the lookup saw
// NULL and so does this statement, and the guard is then pid and key only.
// pg_terminate_backend($3, $6) waits up to $6 ms for the backend to exit
// (PostgreSQL 14+): true once it is gone, false (with a WARNING) when the
// timeout passed first. With timeout 0 it would return true as soon as the
// signal was sent, which says nothing about the lock. The CASE calls it
// only when every condition holds (it is volatile, so never pre-computed);
// terminated is NULL when the holder changed. statement_timestamp() is the
// server's clock at the start of the statement, for measuring the takeover;
// signal_at is its clock right after the holder check, just before the
// signal (recorded with set_config in the subquery that sends it).
//
// The check and the signal are one statement, not one atomic step: a
// holder that releases the key in the microseconds between them is
// terminated anyway. AwaitTakeover tells when that happened
// (Takeover.BeforeSignal).
const terminateSQL = `SELECT statement_timestamp() AS signalled, pg_is_in_recovery() AS standby,
       $3::int = pg_backend_pid() AS own,
       CASE WHEN NOT pg_is_in_recovery() AND $3::int <> pg_backend_pid() AND EXISTS (
              SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = $4::int2
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
                 AND l.pid = $3::int AND a.backend_start IS NOT DISTINCT FROM $5::timestamptz)
            THEN (SELECT pg_terminate_backend($3::int, $6::bigint)
                    FROM (SELECT set_config('leasectl.signal_at', clock_timestamp()::text, true)) s) END AS terminated,
       nullif(current_setting('leasectl.signal_at', true), '')::timestamptz AS signal_at`

// Terminate ends the backend of holder, which [Read] found holding key, and
// waits up to timeout for it to exit: the lock dies with it. The holder is
// re-checked in the same statement (see [terminateSQL]); when it no longer
// holds the key, nothing is terminated and the error wraps
// [ErrHolderChanged]. A standby wraps [ErrStandby], the statement's own
// backend [ErrOwnSession]. When the server refuses (SQLSTATE 42501) the
// error is a [*PermissionError] saying what would allow it.
func Terminate(ctx context.Context, q Querier, key Key, holder Session, timeout time.Duration) (Termination, error) {
	t := Termination{PID: holder.PID}
	switch {
	case holder.Prepared != nil || holder.PID == 0:
		return t, fmt.Errorf("key %s is held by a prepared transaction, which has no backend to terminate: %w", key, ErrNotALease)
	case timeout < time.Millisecond:
		return t, fmt.Errorf("terminate pid %d: the timeout must be at least 1ms, got %s", holder.PID, timeout)
	}
	classid, objid := key.LockTag()
	var start *time.Time // NULL: backend_start was withheld from us
	if !holder.BackendStart.IsZero() {
		start = &holder.BackendStart
	}
	// The statement may take the whole server-side timeout; give the
	// server's answer time to arrive rather than cancel it at the same
	// moment.
	sctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	t.Sent = time.Now()
	var standby, own bool
	var terminated *bool
	var signalAt *time.Time
	err := queryRow(sctx, q, []any{&t.ServerStart, &standby, &own, &terminated, &signalAt}, terminateSQL,
		int64(classid), int64(objid), holder.PID, int16(key.Form), start, timeout.Milliseconds())
	t.Took = time.Since(t.Sent)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return t, permissionError(ctx, q, holder, err)
	case errors.As(err, &pgErr) && pgErr.Code == "42883":
		return t, fmt.Errorf("terminate pid %d: pg_terminate_backend(pid, timeout) needs PostgreSQL 14 or newer: %w", holder.PID, err)
	case err != nil:
		return t, fmt.Errorf("terminate pid %d: %w", holder.PID, err)
	case standby:
		return t, fmt.Errorf("refusing to terminate pid %d: %w; terminating a backend there fences nothing on the primary (point the DSN at the primary)", holder.PID, ErrStandby)
	case own:
		return t, fmt.Errorf("refusing to terminate pid %d: %w (a pooler lent it to leasectl); connect to the server directly, not through the pooler", holder.PID, ErrOwnSession)
	case terminated == nil:
		return t, fmt.Errorf("pid %d no longer holds key %s: %w", holder.PID, key, ErrHolderChanged)
	}
	t.Gone = *terminated
	if signalAt != nil {
		t.SignalAt = *signalAt
	}
	return t, nil
}

// permissionError explains a refused termination: whose backend it was and
// what would allow it. It asks the server who we are and whether the
// holder's role is a superuser (pg_roles is readable by every role).
func permissionError(ctx context.Context, q Querier, holder Session, err error) error {
	pe := &PermissionError{PID: holder.PID, HolderRole: holder.User, Err: err}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if qerr := queryRow(ctx, q, []any{&pe.Role, &pe.HolderSuperuser},
		`SELECT current_user::text, coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = $1), false)`, holder.User); qerr != nil {
		// Without the details the server's own message still says it.
		return fmt.Errorf("terminate pid %d: %w (GRANT pg_signal_backend to this role, or run failover as the holder's role)", holder.PID, err)
	}
	return pe
}

// queryRow runs sql, which returns one row, and scans it into dest.
func queryRow(ctx context.Context, q Querier, dest []any, sql string, args ...any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// Takeover is the session that took a key over after its holder was
// terminated.
type Takeover struct {
	// Holder is the new holder.
	Holder Session
	// After is the measured takeover time: how long after the signal the
	// new holder held the key, at most. It is the smaller of two upper
	// bounds: the client's, from sending the termination to the read that
	// saw the new holder (never much under the termination's 100 ms exit
	// check, since reads start after it returns), and, when ByServerClock,
	// the server's: from the statement's start to the new holder's last
	// state change, which for an idle session is the end of the statement
	// that took the key, or later.
	After time.Duration
	// ByServerClock says that After comes from the server's clock.
	ByServerClock bool
	// Now is the server's clock at the read that saw the new holder, for
	// the holder's ages.
	Now time.Time
	// Polls is how many reads it took.
	Polls int
	// BeforeSignal: by the server's clock the new holder already held the
	// key before the signal (its last state change, which follows the
	// statement that took the key, came before it). The terminated holder
	// had released the key in the moment between the check and the signal.
	BeforeSignal bool
}

// BoundByTerm tightens the takeover time with a third upper bound: when
// the new holder began its term, termAfter after the same origin (the
// request or the signal, [Failover.Origin]) by the server's clock. A lease
// holds the key before it begins its term, so it took over no later; read
// on the client's clock, or from a state change that came after the term
// began, the takeover could otherwise come out later than the term that
// follows it ("took over within 26ms", then "began its term within 25ms").
// A zero termAfter (not measured) changes nothing.
func (tk *Takeover) BoundByTerm(termAfter time.Duration) {
	if tk != nil && termAfter > 0 && termAfter < tk.After {
		tk.After, tk.ByServerClock = termAfter, true
	}
}

// measureTakeover bounds the takeover by h, seen by the client at seen,
// after term (see [Takeover.After]).
func measureTakeover(term Termination, h Session, seen time.Time) (time.Duration, bool) {
	after := seen.Sub(term.Sent)
	// An idle session changed state last when a statement ended, after it
	// took the key; an active one may still be in the statement that took
	// it, whose start says nothing. A state change before the signal was
	// not this takeover's.
	if strings.HasPrefix(h.State, "idle") && !term.ServerStart.IsZero() && h.StateChange.After(term.ServerStart) {
		if d := h.StateChange.Sub(term.ServerStart); d < after {
			return d, true
		}
	}
	return after, false
}

// IsTakeover reports whether s, a holder of the key, is a session other
// than old: a backend (a prepared transaction does not lead) whose pid
// differs, or whose pid is old's reused by a new backend (a different
// backend_start, where both are visible).
func IsTakeover(old, s Session) bool {
	switch {
	case !s.Granted || s.Prepared != nil || s.PID == 0:
		return false
	case s.PID != old.PID:
		return true
	}
	return !s.BackendStart.IsZero() && !old.BackendStart.IsZero() && !s.BackendStart.Equal(old.BackendStart)
}

// AwaitOptions configure [AwaitTakeover].
type AwaitOptions struct {
	// Within is how long to wait for a new holder after the termination
	// returned.
	Within time.Duration
	// Poll is the pause between reads; default 10ms.
	Poll time.Duration
	// ReadTimeout bounds each read; default 5s.
	ReadTimeout time.Duration
}

// AwaitTakeover reads the key's holders every o.Poll until a session other
// than old, which term terminated, holds it ([IsTakeover]), and returns it
// with the measured takeover time. When none does within o.Within of the
// termination's return the error wraps [ErrNoTakeover]. Each read has its
// own timeout, so giving up never cancels a query (which would close the
// connection).
func AwaitTakeover(ctx context.Context, conn *pgx.Conn, key Key, old Session, term Termination, o AwaitOptions) (Takeover, error) {
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Second
	}
	deadline := term.Returned().Add(o.Within)
	f := Filter{Keys: []Key{key}}
	for polls := 1; ; polls++ {
		rctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
		snap, err := Read(rctx, conn, f)
		cancel()
		if err != nil {
			return Takeover{}, fmt.Errorf("wait for a new holder of key %s: %w", key, err)
		}
		seen := time.Now()
		for _, h := range snap.Find(key).Holders {
			if IsTakeover(old, h) {
				after, server := measureTakeover(term, h, seen)
				before := strings.HasPrefix(h.State, "idle") && !term.SignalAt.IsZero() && h.StateChange.Before(term.SignalAt)
				return Takeover{Holder: h, After: after, ByServerClock: server, Now: snap.Now, Polls: polls, BeforeSignal: before}, nil
			}
		}
		if !seen.Before(deadline) {
			return Takeover{}, fmt.Errorf("key %s: %w within %s of terminating pid %d", key, ErrNoTakeover, o.Within, old.PID)
		}
		select {
		case <-ctx.Done():
			return Takeover{}, ctx.Err()
		case <-time.After(min(o.Poll, time.Until(deadline))):
		}
	}
}

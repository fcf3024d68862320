package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements of WaitLock, for each key form.
const (
	waitBigintSQL = "SELECT set_config('lock_timeout', $1, false), pg_advisory_lock($2)"
	waitPairSQL   = "SELECT set_config('lock_timeout', $1, false), pg_advisory_lock($2::int4, $3::int4)"
)

// WaitLock waits in the server's lock queue for the session-level advisory
// lock key, for at most timeout, and reports whether this session now holds
// it. False with a nil error means the wait timed out on the server
// (lock_timeout, SQLSTATE 55P03) and the session is still usable. It is one
// statement, one round trip: a takeover waits on it.
//
// Waiting in the queue rather than polling pg_try_advisory_lock is what
// makes a takeover immediate: the server grants the key to the first waiter
// the moment the holder's session ends. The timeout is set as the session's
// lock_timeout by the same statement, before it waits (the select list runs
// in order), so that the wait is bounded on the server even when the client
// cannot reach it; it stays set after a grant, and reverts with the
// statement when the wait times out. Cancelling ctx cancels the wait; pgx
// then closes the connection, which also leaves the queue.
//
// key may be in either form: the lease waits for its role's key in the
// bigint form and for the stop fence (see Key.Fence) in the pair form.
func WaitLock(ctx context.Context, conn *pgx.Conn, key Key, timeout time.Duration) (bool, error) {
	ms := timeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	limit := strconv.FormatInt(ms, 10) + "ms"
	var err error
	if key.Form == Pair {
		k1, k2 := key.Int4s()
		_, err = conn.Exec(ctx, waitPairSQL, limit, k1, k2)
	} else {
		_, err = conn.Exec(ctx, waitBigintSQL, limit, key.ID)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: lock_timeout expired
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pg_advisory_lock(%s): %w", key, err)
	}
	return true, nil
}

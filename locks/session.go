package locks

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryLock takes the session-level advisory lock key without waiting and
// reports whether this session now holds it. Through a transaction pooler
// the answer is meaningless: the "session" is whichever server connection
// the pooler lent for this statement.
func TryLock(ctx context.Context, conn *pgx.Conn, key int64) (bool, error) {
	_, ok, err := TryLockPID(ctx, conn, key)
	return ok, err
}

// TryLockPID is TryLock that also returns the backend pid the statement ran
// on, read in the same statement: through a pooler, the pid of the server
// connection that now holds (or was refused) the key.
func TryLockPID(ctx context.Context, conn *pgx.Conn, key int64) (pid uint32, ok bool, err error) {
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), pg_try_advisory_lock($1)", key).Scan(&pid, &ok); err != nil {
		return 0, false, fmt.Errorf("pg_try_advisory_lock(%d): %w", key, err)
	}
	return pid, ok, nil
}

// KeyHolders returns the backend pid this statement ran on and the pids of
// the sessions that hold the bigint key in the current database, read in
// one statement. A prepared transaction's hold has no pid and is left out.
func KeyHolders(ctx context.Context, conn *pgx.Conn, key int64) (self uint32, holders []uint32, err error) {
	classid, objid := BigintKey(key).LockTag()
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid(),
       coalesce(array_agg(pid ORDER BY pid) FILTER (WHERE pid IS NOT NULL), '{}')
  FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 1
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid = $1::bigint::oid AND objid = $2::bigint::oid`, int64(classid), int64(objid)).Scan(&self, &holders)
	if err != nil {
		return 0, nil, fmt.Errorf("read holders of key %d: %w", key, err)
	}
	return self, holders, nil
}

// Unlock releases the bigint key as many times as this session holds it
// (session locks stack) and returns how many holds it released. It never
// calls pg_advisory_unlock_all(), which would also drop locks of other
// clients sharing a pooled server connection.
func Unlock(ctx context.Context, conn *pgx.Conn, key int64) (int, error) {
	return UnlockKey(ctx, conn, BigintKey(key))
}

// UnlockKey is Unlock for a key in either form.
func UnlockKey(ctx context.Context, conn *pgx.Conn, key Key) (int, error) {
	released := 0
	for {
		var ok bool
		var err error
		if key.Form == Pair {
			k1, k2 := key.Int4s()
			err = conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1::int4, $2::int4)", k1, k2).Scan(&ok)
		} else {
			err = conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key.ID).Scan(&ok)
		}
		if err != nil {
			return released, fmt.Errorf("pg_advisory_unlock(%s): %w", key, err)
		}
		if !ok {
			return released, nil
		}
		released++
		if released > 1<<16 {
			return released, fmt.Errorf("pg_advisory_unlock(%s): still held after %d releases", key, released)
		}
	}
}

// UnlockLingering releases every hold of key that the backend running the
// statement has, after keeping that backend busy for linger. It is for
// cleaning up through a transaction pooler: statements sent at once on
// several connections, each lingering, are handed distinct server
// connections, so together they reach backends that a single statement
// would not. It runs as one statement (a DO block, which takes no
// parameters: the key is an integer literal).
func UnlockLingering(ctx context.Context, conn *pgx.Conn, key int64, linger time.Duration) error {
	sql := fmt.Sprintf("DO $$BEGIN PERFORM pg_sleep(%.3f); WHILE pg_advisory_unlock(%d::bigint) LOOP END LOOP; END$$", linger.Seconds(), key)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("release key %d: %w", key, err)
	}
	return nil
}

package locks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TryLock takes the session-level advisory lock key without waiting and
// reports whether this session now holds it. Through a transaction pooler
// the answer is meaningless: the "session" is whichever server connection
// the pooler lent for this statement.
func TryLock(ctx context.Context, conn *pgx.Conn, key int64) (bool, error) {
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		return false, fmt.Errorf("pg_try_advisory_lock(%d): %w", key, err)
	}
	return ok, nil
}

// Unlock releases key as many times as this session holds it (session locks
// stack) and returns how many holds it released. It never calls
// pg_advisory_unlock_all(), which would also drop locks of other clients
// sharing a pooled server connection.
func Unlock(ctx context.Context, conn *pgx.Conn, key int64) (int, error) {
	released := 0
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
			return released, fmt.Errorf("pg_advisory_unlock(%d): %w", key, err)
		}
		if !ok {
			return released, nil
		}
		released++
		if released > 1<<16 {
			return released, fmt.Errorf("pg_advisory_unlock(%d): still held after %d releases", key, released)
		}
	}
}

package term

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Warm-ups. A new backend knows nothing of the catalog: the first run of a
// statement over the term record costs parse, plan and execute from cold
// caches, several milliseconds each, and a takeover runs a handful of them
// back to back. A session that will run them at a takeover (a stand-by's
// lease session, an obituary's kept connection) warms them once, when it
// connects: EXPLAIN plans a statement that writes without running it, and a
// statement that only reads is run. Nothing is written and nothing is
// notified.

// explain plans sql with args on conn, without running it.
func explain(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	_, err := conn.Exec(ctx, "EXPLAIN "+sql, args...)
	return err
}

// WarmEnd readies conn to record the end of a term of key (End, EndAll),
// as an obituary's kept connection does once it is open.
func WarmEnd(ctx context.Context, conn *pgx.Conn, key int64) error {
	return wrap("warm up the term record", explain(ctx, conn, endSQL, key, "", Killed, 0.0, Channel(key)))
}

// WarmTakeover readies conn, a stand-by's lease session, for what it runs
// once it is granted key: it reads the current term (Current) and plans
// the statements that begin a term (Start) and renew it (RenewSQL).
func WarmTakeover(ctx context.Context, conn *pgx.Conn, key int64) error {
	if _, _, _, err := Current(ctx, conn, key); err != nil {
		return err
	}
	steps := []struct {
		sql  string
		args []any
	}{
		{fenceLockSQL, []any{key, int64(1)}},
		{beginSQL, []any{key, "", "", "", 0, int32(0), "", int64(0), int64(0), int64(0), Channel(key)}},
		{pruneSQL, []any{key, 1}},
		{RenewSQL, []any{key, ""}},
		{endSQL, []any{key, "", Released, 0.0, Channel(key)}},
	}
	for _, s := range steps {
		if err := explain(ctx, conn, s.sql, s.args...); err != nil {
			return wrap("warm up the term record", err)
		}
	}
	return nil
}

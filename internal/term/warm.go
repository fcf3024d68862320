package term

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Ready statements. A new backend knows nothing of the catalog: the first
// run of a statement over the term record costs parse, plan and execute
// from cold caches, several milliseconds each, and a takeover runs a
// handful of them back to back (a group's, one per role: beginning nine
// terms took 12-20 ms, against 2-3 ms prepared). A session that will run
// them at a takeover (a stand-by's lease session, an obituary's kept
// connection) readies them once, when it connects: it prepares them
// (pgx then sends them by name, with no parse), plans those that write
// with EXPLAIN, which runs nothing, and runs the one that only reads.
// Nothing is written and nothing is notified. The session must be one of
// its own, as a lease's proven session is: a prepared statement lives on
// its server session.

// explain plans sql with args on conn, without running it.
func explain(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	_, err := conn.Exec(ctx, "EXPLAIN "+sql, args...)
	return err
}

// prepare prepares each of sqls on conn under its own text, as pgx looks
// statements up.
func prepare(ctx context.Context, conn *pgx.Conn, sqls ...string) error {
	for _, sql := range sqls {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil {
			return wrap("prepare the term record's statements", err)
		}
	}
	return nil
}

// WarmEnd readies conn to record the end of a term of key (End, EndAll),
// as an obituary's kept connection does once it is open.
func WarmEnd(ctx context.Context, conn *pgx.Conn, key int64) error {
	if err := prepare(ctx, conn, endSQL, latestSQL); err != nil {
		return err
	}
	return wrap("warm up the term record", explain(ctx, conn, endSQL, key, "", Killed, 0.0, Channel(key)))
}

// WarmTakeover readies conn, a stand-by's lease session, for what it runs
// once it is granted key: it reads the current term (Current, Latest) and
// begins (Start, StartAll), renews and ends (End) a term.
func WarmTakeover(ctx context.Context, conn *pgx.Conn, key int64) error {
	if err := prepare(ctx, conn, currentSQL, latestSQL, fenceLockSQL, beginSQL, pruneSQL, RenewSQL, endSQL); err != nil {
		return err
	}
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

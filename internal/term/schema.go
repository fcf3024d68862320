package term

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// ErrNoSchema means the lease's database has no schema leasectl, or not
// all of it: `leasectl fence init` creates it.
var ErrNoSchema = errkind.New(errkind.CheckFailed, "the term record (schema leasectl) does not exist")

// ddlLock is the transaction-level advisory lock that serialises schema
// creation: replicas that connect at once would otherwise race in CREATE
// ... IF NOT EXISTS (which can fail on a duplicate catalog entry). It is
// the two-int4 form of a key in the probe's range, which no role and no
// probe uses in that form.
const ddlLock = `SELECT pg_advisory_xact_lock(1818583411, 0)`

// DDL is the SQL that creates the schema leasectl, idempotently: what
// `leasectl fence init` runs and --print-sql prints.
const DDL = `CREATE SCHEMA IF NOT EXISTS leasectl;

-- The current term of each role: one row per role key, what
-- leasectl.fence checks. It changes only when a term begins: not at a
-- renewal, nor when the term ends (see leasectl.term_history).
CREATE TABLE IF NOT EXISTS leasectl.term (
    key      bigint PRIMARY KEY,
    role     text NOT NULL,
    epoch    bigint NOT NULL,
    term_id  text NOT NULL,
    began    timestamptz NOT NULL
);

-- Every term of each role, newest kept: who led, when, with which
-- timings, when it was last renewed, and how it ended.
CREATE TABLE IF NOT EXISTS leasectl.term_history (
    key                    bigint NOT NULL,
    epoch                  bigint NOT NULL,
    term_id                text NOT NULL,
    role                   text NOT NULL,
    host                   text NOT NULL,
    os_pid                 integer NOT NULL,
    backend_pid            integer NOT NULL,
    backend_start          timestamptz NOT NULL,
    fence_backend_pid      integer NOT NULL,
    application_name       text NOT NULL,
    heartbeat_interval_ms  bigint NOT NULL,
    heartbeat_timeout_ms   bigint NOT NULL,
    stop_timeout_ms        bigint NOT NULL,
    began                  timestamptz NOT NULL,
    renewed                timestamptz NOT NULL,
    ended                  timestamptz,
    end_reason             text,
    evicted                timestamptz,
    PRIMARY KEY (key, term_id)
);
CREATE INDEX IF NOT EXISTS term_history_key_epoch ON leasectl.term_history (key, epoch);

-- The fencing lock of a role key: a two-int4 advisory key in the probe's
-- range ("leas"), which no role and no probe uses in this form. Fenced
-- transactions hold it shared until they end; a new term takes it
-- exclusively, so it begins only once they are over.
CREATE OR REPLACE FUNCTION leasectl.fence_lock(key bigint) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (((key # (key >> 32)) & 2147483647) | 1)::integer $$;

-- leasectl.fence(token) returns the term's epoch while the term that the
-- token names is current (until the next term begins), and otherwise
-- raises SQLSTATE LF001. Call it
-- inside the transaction whose writes it guards: that transaction either
-- commits before the next term begins, or does not commit.
CREATE OR REPLACE FUNCTION leasectl.fence(token text) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $fence$
DECLARE
  k bigint;
  e bigint;
  id text;
  cur record;
BEGIN
  IF split_part(token, ':', 1) <> 'leasectl' OR split_part(token, ':', 4) !~ '^[0-9a-f]{16}$' THEN
    RAISE EXCEPTION 'leasectl.fence: % is not a fencing token (leasectl run gives one to its program as LEASECTL_FENCE_TOKEN)', quote_literal(token)
      USING ERRCODE = '22023';
  END IF;
  k := split_part(token, ':', 2)::bigint;
  e := split_part(token, ':', 3)::bigint;
  id := split_part(token, ':', 4);
  -- Held until this transaction ends: a new term waits for it.
  PERFORM pg_advisory_xact_lock_shared(1818583411, leasectl.fence_lock(k));
  IF current_setting('transaction_isolation') = 'read committed' THEN
    -- A new statement: its snapshot is taken after the lock was granted.
    IF EXISTS (SELECT FROM leasectl.term t WHERE t.key = k AND t.epoch = e AND t.term_id = id) THEN
      RETURN e;
    END IF;
  ELSE
    -- The transaction's snapshot may predate the lock: a locking read
    -- fails on a row changed since then (a new term).
    BEGIN
      IF EXISTS (SELECT FROM leasectl.term t WHERE t.key = k AND t.epoch = e AND t.term_id = id FOR SHARE) THEN
        RETURN e;
      END IF;
    EXCEPTION WHEN serialization_failure THEN
      RAISE EXCEPTION 'leasectl: stale fencing token of role %: term % is not current (a newer term began after this transaction''s snapshot)', substr(token, length(split_part(token, ':', 1) || split_part(token, ':', 2) || split_part(token, ':', 3) || split_part(token, ':', 4)) + 5), e
        USING ERRCODE = 'LF001';
    END;
  END IF;
  SELECT t.epoch INTO cur FROM leasectl.term t WHERE t.key = k;
  RAISE EXCEPTION 'leasectl: stale fencing token of role %: term % is not current (current: term %)',
    substr(token, length(split_part(token, ':', 1) || split_part(token, ':', 2) || split_part(token, ':', 3) || split_part(token, ':', 4)) + 5), e,
    coalesce(cur.epoch::text, 'none')
    USING ERRCODE = 'LF001';
END
$fence$;
`

// checkSQL says whether both tables and the fence function exist and whether this role may use
// them, from the catalogs: naming a table of a schema without USAGE on it
// is an error.
const checkSQL = `SELECT count(*) = 2 AND EXISTS (SELECT FROM pg_proc p JOIN pg_namespace pn ON pn.oid = p.pronamespace
                                         WHERE pn.nspname = 'leasectl' AND p.proname = 'fence'),
       coalesce(bool_and(has_schema_privilege(n.oid, 'USAGE') AND
                has_table_privilege(c.oid, CASE c.relname WHEN 'term' THEN 'SELECT, INSERT, UPDATE'
                                                          ELSE 'SELECT, INSERT, UPDATE, DELETE' END)), false),
       coalesce(bool_and(has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')), false)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'leasectl' AND c.relname IN ('term', 'term_history') AND c.relkind = 'r'`

// GrantSQL is what lets role use the term record, run by the owner of the
// schema leasectl.
func GrantSQL(role string) string {
	r := pgx.Identifier{role}.Sanitize()
	return "GRANT USAGE ON SCHEMA leasectl TO " + r + "; GRANT SELECT, INSERT, UPDATE, DELETE ON leasectl.term, leasectl.term_history TO " + r + ";"
}

// Status is whether a database has the term record.
type Status int

const (
	// Ready: the tables exist and this role may use them.
	Ready Status = iota
	// Missing: the schema, or a table of it, does not exist.
	Missing
	// NoPrivilege: the tables exist, but this role may not read and write
	// them.
	NoPrivilege
	// ReadOnly: the tables exist, and this role may read but not write
	// them: enough to show terms (leasectl who, history), not to lead with
	// them.
	ReadOnly
)

// Check reports whether the database of q has the term record, usable by
// this role.
func Check(ctx context.Context, q Querier) (Status, error) {
	var exists, usable, readable bool
	if err := q.QueryRow(ctx, checkSQL).Scan(&exists, &usable, &readable); err != nil {
		return Missing, fmt.Errorf("look for the term record: %w", err)
	}
	switch {
	case !exists:
		return Missing, nil
	case usable:
		return Ready, nil
	case readable:
		return ReadOnly, nil
	}
	return NoPrivilege, nil
}

// CreateError says why the schema could not be created.
type CreateError struct {
	Err error
}

func (e *CreateError) Error() string {
	return fmt.Sprintf("create the term record (schema leasectl): %v", e.Err)
}

func (e *CreateError) Unwrap() error { return e.Err }

// Denied reports whether the server refused for lack of privilege (42501),
// rather than failing.
func (e *CreateError) Denied() bool {
	var pgErr *pgconn.PgError
	return errors.As(e.Err, &pgErr) && pgErr.Code == "42501"
}

// Create runs DDL on conn in one transaction under ddlLock. It is
// idempotent.
func Create(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "BEGIN; "+ddlLock+"; "+DDL+" COMMIT;"); err != nil {
		if !conn.IsClosed() {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return &CreateError{Err: err}
	}
	return nil
}

// Ensure creates the term record when it is missing and reports the
// status afterwards. A *CreateError says why it could not be created.
func Ensure(ctx context.Context, conn *pgx.Conn) (Status, error) {
	st, err := Check(ctx, conn)
	if err != nil || st != Missing {
		return st, err
	}
	if err := Create(ctx, conn); err != nil {
		return Missing, err
	}
	return Check(ctx, conn)
}

package locks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// Proof is what one statement on a lease session shows about that session:
// which backend and which server ran it, and whether that backend holds
// the key.
type Proof struct {
	// PID is pg_backend_pid() of the backend that ran the statement.
	PID uint32
	// Held says pg_locks shows the key granted to that backend, in the
	// current database.
	Held bool
	// AlsoHeld says pg_locks shows the other hold that was asked about
	// (see Prove) granted; false when none was asked about.
	AlsoHeld bool
	// Server is the server that ran the statement.
	Server dbconn.Identity
}

// Hold is a key held by a backend.
type Hold struct {
	Key Key
	PID uint32
}

// proofSQL reads a Proof in one statement: $1, $2 and $3 are the key's
// classid, objid and objsubid as pg_locks shows them; $4 to $7 the other
// hold's, with its backend pid ($7 = 0 when there is none). It reads
// pg_locks once.
const proofSQL = `WITH held AS (
  SELECT pid, classid, objid, objsubid FROM pg_locks
   WHERE locktype = 'advisory' AND granted
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
SELECT pg_backend_pid(),
       EXISTS (SELECT 1 FROM held WHERE pid = pg_backend_pid()
                  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = $3::int2),
       EXISTS (SELECT 1 FROM held WHERE pid = $7::int
                  AND classid = $4::bigint::oid AND objid = $5::bigint::oid AND objsubid = $6::int2),
       ` + dbconn.IdentityColumns

// Prove runs proofSQL on conn for key, held by the backend that runs it,
// and for also when it is not nil: one round trip.
func Prove(ctx context.Context, conn *pgx.Conn, key Key, also *Hold) (Proof, error) {
	var p Proof
	if err := conn.QueryRow(ctx, proofSQL, proofArgs(key, also)...).Scan(p.dest()...); err != nil {
		return p, fmt.Errorf("prove the hold on key %s: %w", key, err)
	}
	return p, nil
}

// QueueProof adds Prove's statement to b, to run in the same round trip as
// the batch's other statements (the lease's heartbeat renews its term
// beside it); *p holds the proof once the batch has run without error.
func QueueProof(b *pgx.Batch, key Key, also *Hold, p *Proof) {
	b.Queue(proofSQL, proofArgs(key, also)...).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(p.dest()...); err != nil {
			return fmt.Errorf("prove the hold on key %s: %w", key, err)
		}
		return nil
	})
}

func proofArgs(key Key, also *Hold) []any {
	classid, objid := key.LockTag()
	var aClassid, aObjid uint32
	var aForm int16
	var aPID int32
	if also != nil {
		aClassid, aObjid = also.Key.LockTag()
		aForm, aPID = int16(also.Key.Form), int32(also.PID)
	}
	return []any{int64(classid), int64(objid), int16(key.Form), int64(aClassid), int64(aObjid), aForm, aPID}
}

func (p *Proof) dest() []any { return append([]any{&p.PID, &p.Held, &p.AlsoHeld}, p.Server.Dest()...) }

// Check compares the proof with what the session must be: backend pid, on
// server, holding the key, on a primary, and, when also is not nil, the
// other hold granted. It returns nil when all hold, and otherwise a
// *ProofError that says what does not.
func (p Proof) Check(key Key, pid uint32, server dbconn.Identity, also *Hold) error {
	switch {
	case p.PID != pid:
		return &ProofError{Proof: p, Reason: fmt.Sprintf("the statement ran on backend pid %d, but this session's backend is pid %d: something between client and server (a pooler in transaction mode, perhaps reconfigured; a load balancer) moves its statements", p.PID, pid)}
	case !p.Server.SameServer(server):
		return &ProofError{Proof: p, Reason: fmt.Sprintf("the statement ran on another server (%s) than this session's (%s): a load balancer or proxy spreads its statements", p.Server, server)}
	case p.Server.InRecovery:
		return &ProofError{Proof: p, Reason: "the server is in recovery (a standby): its locks fence nothing on the primary"}
	case !p.Held:
		return &ProofError{Proof: p, Reason: fmt.Sprintf("pg_locks does not show key %s granted to backend pid %d: the session lost the lock (released by something between client and server?)", key, pid)}
	case also != nil && !p.AlsoHeld:
		return &ProofError{Proof: p, Reason: fmt.Sprintf("pg_locks does not show key %s granted to backend pid %d (its session ended?)", also.Key, also.PID)}
	}
	return nil
}

// ProofError says why a lease session failed its proof.
type ProofError struct {
	Proof  Proof
	Reason string
}

func (e *ProofError) Error() string { return e.Reason }

// Ready prepares, on conn, the statements a lease runs on its sessions the
// moment a key is granted (the proof, the wait for the stop fence, a
// group's try of the fences), so that none is parsed on the takeover's
// path; pgx then sends them by name. conn must be a session of its own,
// as a lease's proven session is: a prepared statement lives on its server
// session.
func Ready(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range []string{proofSQL, waitBigintSQL, waitPairSQL, tryPairsSQL} {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil {
			return fmt.Errorf("prepare the lease's statements: %w", err)
		}
	}
	return nil
}

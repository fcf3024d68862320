package locks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// The statements of a group lease (lease.RunGroup): one session holds the
// keys of many roles, so a stand-by cannot wait in the server's lock queue
// for all of them and polls with pg_try_advisory_lock instead, counts the
// replicas by their presence locks, and the heartbeat proves every hold at
// once.

// Poll is what one poll of a group's stand-by saw: the keys it won, on the
// backend and server that ran the statement.
type Poll struct {
	Won    []int64
	PID    uint32
	Server dbconn.Identity
}

// TryKeys tries the bigint keys in one statement and returns the ones this
// session now holds. Trying a key that is held costs next to nothing; the
// caller keeps what it wants of the rest and unlocks the others
// (UnlockKeys).
//
// It runs 20 times a second on every stand-by, so it is a prepared
// statement (parsing and planning it each time costs four times as much
// on the server): conn must be a session of its own, which a lease's
// proven session is.
func TryKeys(ctx context.Context, conn *pgx.Conn, keys []int64) (Poll, error) {
	var p Poll
	if _, err := conn.Prepare(ctx, tryKeysName, tryKeysSQL); err != nil {
		return p, fmt.Errorf("poll for keys: %w", err)
	}
	err := conn.QueryRow(ctx, tryKeysName, keys).Scan(append([]any{&p.Won, &p.PID}, p.Server.Dest()...)...)
	if err != nil {
		return p, fmt.Errorf("poll for keys: %w", err)
	}
	return p, nil
}

const (
	tryKeysName = "leasectl_try_keys"
	tryKeysSQL  = `SELECT coalesce((SELECT array_agg(k ORDER BY i) FROM unnest($1::int8[]) WITH ORDINALITY AS c(k, i)
                    WHERE pg_try_advisory_lock(k)), '{}'),
       pg_backend_pid(), ` + dbconn.IdentityColumns
)

// UnlockKeys releases one hold of each bigint key.
func UnlockKeys(ctx context.Context, conn *pgx.Conn, keys []int64) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(k) FROM unnest($1::int8[]) AS k`, keys); err != nil {
		return fmt.Errorf("release keys: %w", err)
	}
	return nil
}

// CountHolders returns how many sessions hold any of the two-int4 keys
// (presence locks) in shared mode. It reads pg_locks, which costs about a
// millisecond with a few hundred locks: a group counts once a second, and
// when it won more keys than its share.
func CountHolders(ctx context.Context, conn *pgx.Conn, presence []Key) (int, error) {
	ids := make([]int64, len(presence))
	for i, k := range presence {
		ids[i] = k.ID
	}
	var n int
	err := conn.QueryRow(ctx, `SELECT count(DISTINCT pid) FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND mode = 'ShareLock' AND objsubid = 2
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((classid::bigint << 32) | objid::bigint) = ANY ($1::int8[])`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the replicas: %w", err)
	}
	return n, nil
}

// tryPairsSQL is TryLockPairs' statement.
const tryPairsSQL = `SELECT coalesce((SELECT array_agg((k1::bigint << 32) | (k2::bigint & 4294967295))
                   FROM unnest($1::int4[], $2::int4[]) AS t(k1, k2) WHERE pg_try_advisory_lock(k1, k2)), '{}'),
       pg_backend_pid(), ` + dbconn.IdentityColumns

// TryLockPairs tries the two-int4 keys (stop fences) in order and returns
// the ones this session now holds, with the backend and server that ran
// the statement.
func TryLockPairs(ctx context.Context, conn *pgx.Conn, keys []Key) (won []Key, pid uint32, server dbconn.Identity, err error) {
	hi, lo := int4Halves(keys)
	var ids []int64
	err = conn.QueryRow(ctx, tryPairsSQL, hi, lo).
		Scan(append([]any{&ids, &pid}, server.Dest()...)...)
	if err != nil {
		return nil, 0, server, fmt.Errorf("try the stop fences: %w", err)
	}
	for _, id := range ids {
		won = append(won, Key{Form: Pair, ID: id})
	}
	return won, pid, server, nil
}

// LockShared takes the two-int4 keys in shared mode without waiting, and
// returns the ones it could not take (someone holds them exclusively).
func LockShared(ctx context.Context, conn *pgx.Conn, keys []Key) (refused []Key, err error) {
	hi, lo := int4Halves(keys)
	var ids []int64
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg((k1::bigint << 32) | (k2::bigint & 4294967295)), '{}')
  FROM unnest($1::int4[], $2::int4[]) AS t(k1, k2) WHERE NOT pg_try_advisory_lock_shared(k1, k2)`, hi, lo).Scan(&ids)
	if err != nil {
		return nil, fmt.Errorf("take the presence locks: %w", err)
	}
	for _, id := range ids {
		refused = append(refused, Key{Form: Pair, ID: id})
	}
	return refused, nil
}

// UnlockShared releases one shared hold of each two-int4 key.
func UnlockShared(ctx context.Context, conn *pgx.Conn, keys []Key) error {
	hi, lo := int4Halves(keys)
	_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_shared(k1, k2) FROM unnest($1::int4[], $2::int4[]) AS t(k1, k2)`, hi, lo)
	if err != nil {
		return fmt.Errorf("release the presence locks: %w", err)
	}
	return nil
}

func int4Halves(keys []Key) (hi, lo []int32) {
	hi, lo = make([]int32, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		hi[i], lo[i] = k.Int4s()
	}
	return hi, lo
}

// GroupProof is what one statement on a group's lease session shows: the
// backend and server that ran it, and every advisory lock granted to it and
// to the group's stop fence session.
type GroupProof struct {
	PID    uint32
	Server dbconn.Identity
	// Held are the exclusive holds, Shared the shared ones, each by
	// backend pid.
	Held, Shared map[uint32]map[Key]bool
}

// QueueGroupProof adds the statement of a GroupProof of the running
// backend and of backend other (the fence session) to b.
func QueueGroupProof(b *pgx.Batch, other uint32, p *GroupProof) {
	b.Queue(groupProofSQL, int32(other)).QueryRow(func(row pgx.Row) error {
		var pids []int64
		var ids []int64
		var forms []int16
		var shared []bool
		if err := row.Scan(append(append([]any{&p.PID}, p.Server.Dest()...), &pids, &ids, &forms, &shared)...); err != nil {
			return fmt.Errorf("prove the holds: %w", err)
		}
		p.Held, p.Shared = map[uint32]map[Key]bool{}, map[uint32]map[Key]bool{}
		for i := range pids {
			m := p.Held
			if shared[i] {
				m = p.Shared
			}
			pid := uint32(pids[i])
			if m[pid] == nil {
				m[pid] = map[Key]bool{}
			}
			m[pid][Key{Form: KeyForm(forms[i]), ID: ids[i]}] = true
		}
		return nil
	})
}

const groupProofSQL = `WITH held AS (
  SELECT pid, (classid::bigint << 32) | objid::bigint AS k, objsubid AS f, mode = 'ShareLock' AS s
    FROM pg_locks
   WHERE locktype = 'advisory' AND granted AND pid IN (pg_backend_pid(), $1::int)
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `,
       coalesce((SELECT array_agg(pid::int8 ORDER BY pid, k, f) FROM held), '{}'),
       coalesce((SELECT array_agg(k ORDER BY pid, k, f) FROM held), '{}'),
       coalesce((SELECT array_agg(f ORDER BY pid, k, f) FROM held), '{}'),
       coalesce((SELECT array_agg(s ORDER BY pid, k, f) FROM held), '{}')`

// Check says whether the proof shows what a group's sessions must hold:
// run on backend pid of server, a primary, with keys held by pid and
// fences held by fencePID. The error names the first hold missing.
func (p GroupProof) Check(pid uint32, server dbconn.Identity, keys []Key, fencePID uint32, fences []Key) error {
	switch {
	case p.PID != pid:
		return &ProofError{Reason: fmt.Sprintf("the statement ran on backend pid %d, but this session's backend is pid %d: something between client and server (a pooler in transaction mode, perhaps reconfigured; a load balancer) moves its statements", p.PID, pid)}
	case !p.Server.SameServer(server):
		return &ProofError{Reason: fmt.Sprintf("the statement ran on another server (%s) than this session's (%s): a load balancer or proxy spreads its statements", p.Server, server)}
	case p.Server.InRecovery:
		return &ProofError{Reason: "the server is in recovery (a standby): its locks fence nothing on the primary"}
	}
	for _, k := range keys {
		if !p.Held[pid][k] {
			return &ProofError{Reason: fmt.Sprintf("pg_locks does not show key %s granted to backend pid %d: the session lost the lock (released by something between client and server?)", k, pid)}
		}
	}
	for _, k := range fences {
		if !p.Held[fencePID][k] {
			return &ProofError{Reason: fmt.Sprintf("pg_locks does not show key %s granted to backend pid %d (its session ended?)", k, fencePID)}
		}
	}
	return nil
}

package locks

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lease mark: how a session shows every other session that it is the
// lease session of a leasectl lease (leasectl run, run --procfile, the
// lease package), and not a worker that elects itself with the runbook's
// SQL in its own code. The application name cannot tell: it is the
// user's to set. Before it can be granted any key, a lease session takes
// its mark, a two-int4 advisory lock in shared mode whose high half is
// the bytes "mark" and whose low half is the lease's bound in
// milliseconds: how long it may hold a key idle without a term of its own
// before it is overdue (heartbeat interval + heartbeat timeout + stop
// time, timing.Lease.Stopped). pg_locks shows it to every role, with no
// schema and no privilege, and it goes with the session.

// markClass is the high half of every lease mark: the bytes "mark".
const markClass uint32 = 0x6D61726B

// markClassSQL is markClass in decimal, for the statement that reads
// pg_locks (a test ties the two together).
const markClassSQL = "1835102827"

// MarkOf is the lease mark of a lease whose bound is bound, rounded up to
// a whole millisecond and capped at the low half's range (49 days).
func MarkOf(bound time.Duration) Key {
	ms := max(int64(math.Ceil(float64(bound)/float64(time.Millisecond))), 1)
	return Key{Form: Pair, ID: int64(uint64(markClass)<<32 | uint64(min(ms, math.MaxUint32)))}
}

// MarkBound says whether k is a lease mark, and the bound it records.
func MarkBound(k Key) (time.Duration, bool) {
	classid, objid := k.LockTag()
	if k.Form != Pair || classid != markClass || objid == 0 {
		return 0, false
	}
	return time.Duration(objid) * time.Millisecond, true
}

// TakeMark takes the lease mark of bound on conn, the lease session, for
// as long as the session lives. It reports false when another session
// holds that lock exclusively (someone's own key in leasectl's range):
// the session then goes unmarked, and is judged as any elector's.
func TakeMark(ctx context.Context, conn *pgx.Conn, bound time.Duration) (bool, error) {
	k1, k2 := MarkOf(bound).Int4s()
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1::int4, $2::int4)", k1, k2).Scan(&ok); err != nil {
		return false, fmt.Errorf("take the lease mark: %w", err)
	}
	return ok, nil
}

// The drained mark: how the lease session of a group run that was drained
// (leasectl failover --replica, lease.ErrDrained) shows that it is still
// connected while it serves no role. A drained group gives up its presence
// locks, by which the other replicas count those that share the roles, and
// leads nothing, so without a mark it would hold no lock at all and vanish
// from who --replicas. The drained mark is the lease mark's class with a
// low half of 0 (no bound): a two-int4 advisory lock held in shared mode,
// which every reading of pg_locks returns with the lease marks, and which
// goes with the session. A drained replica takes it before it answers the
// drain, and again on each new session until it restarts.
var DrainedMark = Key{Form: Pair, ID: int64(uint64(markClass) << 32)}

// TakeDrainedMark takes the drained mark on conn, a group's lease session,
// for as long as the session lives. It reports false when another session
// holds that lock exclusively: the replica then goes unmarked, and who
// --replicas does not show it.
func TakeDrainedMark(ctx context.Context, conn *pgx.Conn) (bool, error) {
	k1, k2 := DrainedMark.Int4s()
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1::int4, $2::int4)", k1, k2).Scan(&ok); err != nil {
		return false, fmt.Errorf("take the drained mark: %w", err)
	}
	return ok, nil
}

// IsLease reports whether s is the lease session of a leasectl lease: it
// holds a lease mark ([Session.LeaseBound]).
func (s Session) IsLease() bool { return s.LeaseBound > 0 }

// takeMarks moves the lease marks out of the snapshot's keys into the
// sessions they mark: each session of the snapshot that holds one gets its
// bound (the largest, should it hold several) as LeaseBound; the holders of
// the drained mark become the snapshot's Drained. A mark is held in shared
// mode only; a lock of the same form held exclusively is someone's key,
// and stays.
func (s *Snapshot) takeMarks() {
	var bounds map[int32]time.Duration
	kept := s.Keys[:0]
	for _, l := range s.Keys {
		if l.Key == DrainedMark && sharedOnly(l) {
			s.Drained = append(s.Drained, l.Holders...)
			continue
		}
		bound, ok := MarkBound(l.Key)
		if !ok || !sharedOnly(l) {
			kept = append(kept, l)
			continue
		}
		if bounds == nil {
			bounds = map[int32]time.Duration{}
		}
		for _, h := range l.Holders {
			bounds[h.PID] = max(bounds[h.PID], bound)
		}
	}
	clear(s.Keys[len(kept):])
	s.Keys = kept
	if bounds == nil {
		return
	}
	for i := range s.Keys {
		l := &s.Keys[i]
		for _, ss := range [][]Session{l.Holders, l.Waiters} {
			for j := range ss {
				ss[j].LeaseBound = bounds[ss[j].PID]
			}
		}
	}
	for j := range s.Drained {
		s.Drained[j].LeaseBound = bounds[s.Drained[j].PID]
	}
}

package term

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/locks"
)

// How a term ended, as the history records it.
const (
	// Released: the holder's work returned (it exited, or the lease was
	// stopped), and the holder released the key.
	Released = "released"
	// SteppedDown: the holder was asked to step down (leasectl failover).
	SteppedDown = "stepped down"
	// SessionLost: the holder lost its session (the server ended it, a
	// heartbeat failed), stopped its work and recorded the end once it
	// could reach the server again.
	SessionLost = "session lost"
	// Killed: the holder's process was killed (SIGKILL); a process it left
	// for the purpose recorded the end once its program was gone.
	Killed = "killed"
	// Evicted: a stand-by ended the sessions of a holder that had stopped
	// renewing its term (a frozen process), and the term ended at its last
	// renewal.
	Evicted = "evicted"
	// DeadlinePassed: the holder never recorded the end; the next leader
	// ended it once its deadline had passed, at its last renewal.
	DeadlinePassed = "deadline passed"
)

// Holder is who holds a term.
type Holder struct {
	Host  string
	OSPID int
	// BackendPID and BackendStart are the lease session's backend, which
	// holds the key; FenceBackendPID is the stop fence session's.
	BackendPID      uint32
	BackendStart    time.Time
	FenceBackendPID uint32
	Application     string
}

// Term is one term of a role, as recorded.
type Term struct {
	Key    int64
	Role   string
	Epoch  int64
	ID     string
	Holder Holder
	// Timing is the holder's heartbeat interval and timeout and its work's
	// stop time: what bounds how long its work can outlive a lost session.
	Timing timing.Lease
	// Began is when the term began, Renewed when its holder last renewed
	// it, Ended when it ended (zero while it is live), all on the server's
	// clock.
	Began, Renewed, Ended time.Time
	// EndReason is how it ended: Released, SteppedDown, SessionLost,
	// Evicted or DeadlinePassed; empty while live.
	EndReason string
	// Evicted says a stand-by ended the holder's sessions.
	Evicted bool
	// LeaderlessBefore is, in a History, how long the role had no term
	// before this one began; HasPrevious says there was an earlier term to
	// measure from.
	LeaderlessBefore time.Duration
	HasPrevious      bool
}

// Live reports whether the term has not ended.
func (t Term) Live() bool { return t.Ended.IsZero() }

// Deadline is when the holder must have noticed a lost session and
// stopped its work, by its recorded timing (timing.Lease.TermDeadline).
func (t Term) Deadline() time.Time { return t.Renewed.Add(t.Timing.TermDeadline()) }

// Overdue reports whether a live term has gone unrenewed at now for longer
// than a live holder ever lets it (timing.Lease.Stopped): its holder shows
// no sign of life.
func (t Term) Overdue(now time.Time) bool {
	return t.Live() && now.Sub(t.Renewed) > t.Timing.Stopped()
}

// Channel is the channel on which term changes of key are notified: a new
// leader that waits for the previous term's end LISTENs on it.
func Channel(key int64) string { return "leasectl_term_" + strconv.FormatInt(key, 10) }

// Note is the payload of a notification on Channel.
type Note struct {
	Event string `json:"event"` // "began" or "ended"
	Epoch int64  `json:"epoch"`
	ID    string `json:"term_id"`
}

// ParseNote decodes a notification payload on Channel.
func ParseNote(payload string) (Note, error) {
	var n Note
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.Event == "" {
		return n, fmt.Errorf("not a term notification: %q", payload)
	}
	return n, nil
}

// NewID returns a random term id: with the epoch it names a term, and
// unlike the epoch it is never handed out twice (an asynchronous failover
// that lost the last term's record hands out its epoch again).
func NewID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Querier runs queries: a *pgx.Conn, a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// columns are a term's columns, in the order scan reads them, from the
// history row h.
const columns = `h.key, h.role, h.epoch, h.term_id, h.host, h.os_pid, h.backend_pid, h.backend_start,
       h.fence_backend_pid, h.application_name, h.heartbeat_interval_ms, h.heartbeat_timeout_ms,
       h.stop_timeout_ms, h.began, h.renewed, h.ended, coalesce(h.end_reason, ''), h.evicted IS NOT NULL`

func scan(row pgx.Row, extra ...any) (Term, error) {
	var t Term
	var hbi, hbt, stop int64
	var ended *time.Time
	dest := append([]any{&t.Key, &t.Role, &t.Epoch, &t.ID, &t.Holder.Host, &t.Holder.OSPID, &t.Holder.BackendPID, &t.Holder.BackendStart,
		&t.Holder.FenceBackendPID, &t.Holder.Application, &hbi, &hbt, &stop, &t.Began, &t.Renewed, &ended, &t.EndReason, &t.Evicted}, extra...)
	if err := row.Scan(dest...); err != nil {
		return t, err
	}
	t.Timing = timing.Lease{HeartbeatInterval: time.Duration(hbi) * time.Millisecond, HeartbeatTimeout: time.Duration(hbt) * time.Millisecond, StopTimeout: time.Duration(stop) * time.Millisecond}
	if ended != nil {
		t.Ended = *ended
	}
	return t, nil
}

// currentSQL reads the current term of key $1 and the server's clock; no
// row when the key never had a term.
const currentSQL = `SELECT ` + columns + `, clock_timestamp()
  FROM leasectl.term c JOIN leasectl.term_history h ON h.key = c.key AND h.term_id = c.term_id
 WHERE c.key = $1`

// Current returns the current term of key (the newest, live or ended) and
// the server's clock, with ok false when key never had a term.
func Current(ctx context.Context, q Querier, key int64) (t Term, now time.Time, ok bool, err error) {
	row := q.QueryRow(ctx, currentSQL, key)
	t, err = scan(row, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		err = q.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now)
		return Term{}, now, false, wrap("read the current term", err)
	}
	if err != nil {
		return Term{}, now, false, wrap("read the current term", err)
	}
	return t, now, true, nil
}

// Reading is what QueueCurrent read: the key's current term (OK false when
// it never had one) and, when it has one, the server's clock.
type Reading struct {
	Term Term
	Now  time.Time
	OK   bool
}

// QueueCurrent adds Current's reading of key to b, to run in the same round
// trip as the batch's other statements; *r holds it once the batch has run
// without error.
func QueueCurrent(b *pgx.Batch, key int64, r *Reading) {
	b.Queue(currentSQL, key).QueryRow(func(row pgx.Row) error {
		t, err := scan(row, &r.Now)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			*r = Reading{}
			return nil
		case err != nil:
			return wrap("read the current term", err)
		}
		r.Term, r.OK = t, true
		return nil
	})
}

// latestSQL reads the current terms of the keys $1, each with the server's
// clock.
const latestSQL = `SELECT ` + columns + `, clock_timestamp()
  FROM leasectl.term c JOIN leasectl.term_history h ON h.key = c.key AND h.term_id = c.term_id
 WHERE c.key = ANY($1::bigint[])`

// Latest returns the current term of each of keys that has one, and the
// server's clock.
func Latest(ctx context.Context, q Querier, keys []int64) (map[int64]Term, time.Time, error) {
	var now time.Time
	out := map[int64]Term{}
	rows, err := q.Query(ctx, latestSQL, keys)
	if err != nil {
		return nil, now, wrap("read the current terms", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scan(rows, &now)
		if err != nil {
			return nil, now, wrap("read the current terms", err)
		}
		out[t.Key] = t
	}
	if err := rows.Err(); err != nil {
		return nil, now, wrap("read the current terms", err)
	}
	if now.IsZero() {
		if err := q.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			return nil, now, wrap("read the server's clock", err)
		}
	}
	return out, now, nil
}

// History returns the terms of key that began at or after since (all when
// zero), newest first, at most limit of them (all when limit <= 0), each
// with how long the role had no term before it.
func History(ctx context.Context, q Querier, key int64, since time.Time, limit int) ([]Term, error) {
	var sincePtr *time.Time
	if !since.IsZero() {
		sincePtr = &since
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := q.Query(ctx, `SELECT * FROM (
  SELECT `+columns+`, h.began - lag(h.ended) OVER (ORDER BY h.epoch, h.began) AS gap
    FROM leasectl.term_history h WHERE h.key = $1) t
 WHERE $2::timestamptz IS NULL OR began >= $2
 ORDER BY epoch DESC, began DESC
 LIMIT CASE WHEN $3::int < 0 THEN NULL ELSE $3::int END`, key, sincePtr, limit)
	if err != nil {
		return nil, wrap("read the term history", err)
	}
	defer rows.Close()
	var out []Term
	for rows.Next() {
		var gap *time.Duration
		t, err := scan(rows, &gap)
		if err != nil {
			return nil, wrap("read the term history", err)
		}
		if gap != nil {
			t.LeaderlessBefore, t.HasPrevious = max(*gap, 0), true
		}
		out = append(out, t)
	}
	return out, wrap("read the term history", rows.Err())
}

// Begin is what a new term records about itself. The holder's backend pid
// and start are those of the session that runs Start: the lease session.
type Begin struct {
	Key    int64
	Role   string
	ID     string
	Holder Holder
	Timing timing.Lease
	// Keep is how many terms of the role the history keeps; older ones
	// are deleted. Values below 1 mean 1.
	Keep int
	// FenceWait is how long the new term waits for fenced transactions of
	// the previous one (leasectl.fence) before it ends their sessions.
	FenceWait time.Duration
	// Timeout bounds each statement beyond that wait.
	Timeout time.Duration
	// OnFenced, when set, hears of the sessions Start ended, or why it
	// could not.
	OnFenced func(pids []int32, err error)
}

// beginSQL ends the previous term if it is still open (the new leader
// waited for its deadline: it ends at its last renewal), makes the new
// term current with the next epoch, and adds it to the history, in one
// statement; the new term is announced on Channel when it commits.
const beginSQL = `WITH prev AS (
  UPDATE leasectl.term_history
     SET ended = renewed, end_reason = CASE WHEN evicted IS NOT NULL THEN 'evicted' ELSE 'deadline passed' END
   WHERE key = $1 AND ended IS NULL
  RETURNING term_id
), next AS (
  SELECT greatest((SELECT max(epoch) FROM leasectl.term_history WHERE key = $1),
                  (SELECT epoch FROM leasectl.term WHERE key = $1), 0) + 1 AS epoch,
         clock_timestamp() AS began
), cur AS (
  INSERT INTO leasectl.term AS c (key, role, epoch, term_id, began)
  SELECT $1, $2, next.epoch, $3, next.began FROM next
  ON CONFLICT (key) DO UPDATE
     SET role = excluded.role, epoch = excluded.epoch, term_id = excluded.term_id, began = excluded.began
  RETURNING c.epoch, c.began
), hist AS (
  INSERT INTO leasectl.term_history (key, epoch, term_id, role, host, os_pid, backend_pid, backend_start,
      fence_backend_pid, application_name, heartbeat_interval_ms, heartbeat_timeout_ms, stop_timeout_ms, began, renewed)
  SELECT $1, cur.epoch, $3, $2, $4, $5, pg_backend_pid(),
         (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
         $6, $7, $8, $9, $10, cur.began, cur.began FROM cur
  RETURNING epoch
)
SELECT cur.epoch, cur.began, (SELECT count(*) FROM prev), (SELECT count(*) FROM hist),
       pg_notify($11, json_build_object('event', 'began', 'epoch', cur.epoch, 'term_id', $3::text)::text)
  FROM cur`

// pruneSQL keeps the newest $2 terms of key $1 in the history; it runs
// after beginSQL, whose new term it counts.
const pruneSQL = `DELETE FROM leasectl.term_history
 WHERE key = $1 AND epoch <= (SELECT epoch FROM leasectl.term WHERE key = $1) - $2`

// Started is what Begin recorded.
type Started struct {
	Epoch int64
	Began time.Time
	// EndedPrevious says the previous term was still open, and was ended
	// at its last renewal.
	EndedPrevious bool
}

// fenceLockSQL takes the fencing lock of key $1 exclusively for the rest
// of the transaction, waiting at most $2 ms for the fenced transactions
// that hold it shared (leasectl.fence): a new term begins only once they
// are over.
const fenceLockSQL = `SELECT set_config('lock_timeout', $2::bigint::text || 'ms', true),
       pg_advisory_xact_lock(1818583411, leasectl.fence_lock($1))`

// fencedSQL ends the sessions whose transactions hold the fencing lock of
// key $1 (fenced transactions of the previous term still open), waiting up
// to $2 ms for each to exit, and returns their pids.
const fencedSQL = `SELECT l.pid, pg_terminate_backend(l.pid, $2::bigint)
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.mode = 'ShareLock'
   AND l.classid = 1818583411 AND l.objid = leasectl.fence_lock($1)::bigint::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.pid <> pg_backend_pid()`

// Start records the beginning of a term on conn, which holds the key, in
// one round trip: it takes the role's fencing lock (waiting up to
// b.FenceWait for fenced transactions of the previous term), the previous
// term ends if it is still open (see beginSQL), the new one becomes
// current, and the history keeps b.Keep terms. Fenced transactions still
// open after b.FenceWait have their sessions ended (b.OnFenced hears of
// them), and it tries again.
func Start(ctx context.Context, conn *pgx.Conn, b Begin) (Started, error) {
	wait := max(b.FenceWait, time.Millisecond)
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, wait+max(b.Timeout, time.Second))
		s, err := start(sctx, conn, b, wait)
		cancel()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || attempt >= 10 {
			return s, err
		}
		ectx, cancel := context.WithTimeout(ctx, wait+max(b.Timeout, time.Second))
		pids, err := endFenced(ectx, conn, b.Key, wait)
		cancel()
		if b.OnFenced != nil {
			b.OnFenced(pids, err)
		}
	}
}

func start(ctx context.Context, conn *pgx.Conn, b Begin, wait time.Duration) (Started, error) {
	batch := &pgx.Batch{}
	var s Started
	var ended, added int64
	queueBegin(batch, b, wait, &s, &ended, &added)
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		return s, wrap("begin the term", err)
	}
	s.EndedPrevious = ended > 0
	if added != 1 {
		return s, fmt.Errorf("begin the term: no history row was added")
	}
	return s, nil
}

// queueBegin queues what begins b's term: its fencing lock, beginSQL and
// the history's pruning, reading the result into s, ended and added.
func queueBegin(batch *pgx.Batch, b Begin, wait time.Duration, s *Started, ended, added *int64) {
	batch.Queue(fenceLockSQL, b.Key, wait.Milliseconds())
	batch.Queue(beginSQL, b.Key, b.Role, b.ID, b.Holder.Host, b.Holder.OSPID, int32(b.Holder.FenceBackendPID), b.Holder.Application, b.Timing.HeartbeatInterval.Milliseconds(), b.Timing.HeartbeatTimeout.Milliseconds(),
		b.Timing.StopTimeout.Milliseconds(), Channel(b.Key)).QueryRow(func(row pgx.Row) error {
		var note string
		return row.Scan(&s.Epoch, &s.Began, ended, added, &note)
	})
	batch.Queue(pruneSQL, b.Key, max(b.Keep, 1))
}

// StartAll begins the terms of bs (distinct keys, all held by conn) in one
// round trip and one transaction: every term begins, or none does. It does
// not end fenced transactions: when one of the previous terms still has
// some open after its FenceWait, or anything else fails, no term began and
// the error says why; Start, one term at a time, then deals with them.
// A lost connection leaves unknown whether they began.
func StartAll(ctx context.Context, conn *pgx.Conn, bs []Begin) ([]Started, error) {
	// Every batch takes its fencing locks in one order, so that two
	// replicas beginning terms at once wait for each other, never deadlock
	// (keys can share a fencing lock).
	bs = slices.Clone(bs)
	order := make([]int, len(bs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(FenceLock(bs[a].Key), FenceLock(bs[b].Key)) })
	sorted := make([]Begin, len(bs))
	for i, j := range order {
		sorted[i] = bs[j]
	}
	started, err := startAll(ctx, conn, sorted)
	if err != nil {
		return nil, err
	}
	out := make([]Started, len(bs))
	for i, j := range order {
		out[j] = started[i]
	}
	return out, nil
}

// FenceLock is leasectl.fence_lock(key): the second half of the fencing
// lock of key's terms. Keys may share one.
func FenceLock(key int64) int32 {
	return int32(((key ^ (key >> 32)) & 2147483647) | 1)
}

func startAll(ctx context.Context, conn *pgx.Conn, bs []Begin) ([]Started, error) {
	out := make([]Started, len(bs))
	ended, added := make([]int64, len(bs)), make([]int64, len(bs))
	batch := &pgx.Batch{}
	var wait, timeout time.Duration
	for i, b := range bs {
		w := max(b.FenceWait, time.Millisecond)
		queueBegin(batch, b, w, &out[i], &ended[i], &added[i])
		wait, timeout = max(wait, w), max(timeout, b.Timeout)
	}
	sctx, cancel := context.WithTimeout(ctx, wait+max(timeout, time.Second))
	defer cancel()
	if err := conn.SendBatch(sctx, batch).Close(); err != nil {
		return nil, wrap("begin the terms", err)
	}
	for i := range bs {
		out[i].EndedPrevious = ended[i] > 0
		if added[i] != 1 {
			return nil, fmt.Errorf("begin the term of key %d: no history row was added", bs[i].Key)
		}
	}
	return out, nil
}

// endFenced ends the sessions of the fenced transactions that hold key's
// fencing lock and returns their pids.
func endFenced(ctx context.Context, conn *pgx.Conn, key int64, wait time.Duration) ([]int32, error) {
	rows, err := conn.Query(ctx, fencedSQL, key, wait.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("end the open fenced transactions of the previous term: %w", err)
	}
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var pid int32
		var gone bool
		if err := rows.Scan(&pid, &gone); err != nil {
			return pids, err
		}
		pids = append(pids, pid)
	}
	return pids, rows.Err()
}

// RenewSQL renews term $2 of key $1 if it is still live: the leader's
// heartbeat runs it beside its proof, in the same round trip, as its write
// check. It affects no row when the term has ended.
const RenewSQL = `UPDATE leasectl.term_history SET renewed = clock_timestamp()
 WHERE key = $1 AND term_id = $2 AND ended IS NULL`

// endSQL records that term $2 of key $1 ended $4 milliseconds ago (when
// its work was gone), with reason $3 unless a stand-by evicted its holder,
// and announces it on Channel. It leaves the current-term row alone: a
// fenced transaction in REPEATABLE READ holds a row lock on it, and the
// token of an ended term passes until the next term begins, which waits
// for such transactions anyway.
const endSQL = `WITH h AS (
  UPDATE leasectl.term_history
     SET ended = greatest(renewed, clock_timestamp() - make_interval(secs => $4::float8 / 1000)),
         end_reason = CASE WHEN evicted IS NOT NULL THEN 'evicted' ELSE $3 END
   WHERE key = $1 AND term_id = $2 AND ended IS NULL
  RETURNING epoch, ended
)
SELECT (SELECT count(*) FROM h),
       pg_notify($5, json_build_object('event', 'ended', 'epoch', (SELECT epoch FROM h), 'term_id', $2::text)::text)`

// End records that term id of key ended ago (its work was gone then) with
// reason, and reports whether it was still open.
func End(ctx context.Context, q Querier, key int64, id, reason string, ago time.Duration) (bool, error) {
	var n int64
	var note string
	err := q.QueryRow(ctx, endSQL, key, id, reason, float64(max(ago, 0).Microseconds())/1000, Channel(key)).Scan(&n, &note)
	if err != nil {
		return false, wrap("record the end of the term", err)
	}
	return n > 0, nil
}

// Ending is one term whose end EndAll records.
type Ending struct {
	Key    int64
	ID     string
	Reason string
	Ago    time.Duration
}

// EndAll records the ends of terms as End does, in one round trip (a
// killed group's obituary ends many at once, while their next leaders
// wait), and reports for each whether it was still open. The batch is one
// implicit transaction: on an error none is recorded, and each carries it.
func EndAll(ctx context.Context, conn *pgx.Conn, ends []Ending) ([]bool, error) {
	open := make([]bool, len(ends))
	b := &pgx.Batch{}
	for i, e := range ends {
		b.Queue(endSQL, e.Key, e.ID, e.Reason, float64(max(e.Ago, 0).Microseconds())/1000, Channel(e.Key)).QueryRow(func(row pgx.Row) error {
			var n int64
			var note string
			if err := row.Scan(&n, &note); err != nil {
				return err
			}
			open[i] = n > 0
			return nil
		})
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return make([]bool, len(ends)), wrap("record the ends of the terms", err)
	}
	return open, nil
}

// MarkEvicted records that a stand-by ended the sessions of term id's
// holder.
func MarkEvicted(ctx context.Context, q Querier, key int64, id string) error {
	_, err := q.Exec(ctx, `UPDATE leasectl.term_history SET evicted = clock_timestamp() WHERE key = $1 AND term_id = $2 AND ended IS NULL AND evicted IS NULL`, key, id)
	return wrap("mark the term evicted", err)
}

// wrap says what failed; a missing schema reads as ErrNoSchema.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("%s: %w (%v)", what, ErrNoSchema, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Standing is what the record says of a key's holder, as `leasectl who`
// reports it.
type Standing string

const (
	// StandingLive: the holder leads a live term that it renews.
	StandingLive Standing = "live"
	// StandingStale: the holder's term has gone unrenewed for longer than a
	// live holder ever lets it (Term.Overdue): it is frozen or hung.
	StandingStale Standing = "stale"
	// StandingWaiting: the holder is a lease of leasectl (it holds a lease
	// mark, locks.TakeMark) that has the key but no term of its own yet: a
	// new leader that waits for the previous term to end (or for its
	// deadline) or is about to begin its own. Not an alert until it is
	// StandingOverdue.
	StandingWaiting Standing = "waiting"
	// StandingOverdue: the holder is a lease of leasectl that has held the
	// key idle, without a term of its own, for longer than the bound its
	// lease mark records (heartbeat interval + timeout + stop time): a
	// frozen stand-by that the server granted the key, or a hung one.
	StandingOverdue Standing = "overdue"
	// StandingOther: the holder is not a lease of leasectl: it holds no
	// lease mark and no term of its own (a worker that elects itself with
	// its own SQL, or a leasectl from before the mark). It leads by
	// holding the key, as it did before there was a term record, and the
	// record says nothing of it.
	StandingOther Standing = "other"
	// StandingFree: nobody holds the key.
	StandingFree Standing = "free"
)

// Assess says where a key's holder h (held false when the key is free)
// stands in the record, from the key's current term t (ok false when it
// never had one) at now on the server's clock. A holder that leads the
// live term is judged by its renewals; any other holder by its lease mark
// (locks.Session.LeaseBound): without one it is not a lease of leasectl
// (StandingOther); with one it is StandingOverdue once it has been idle for
// longer than its bound, and StandingWaiting until then, or when the
// server withholds its state.
func Assess(t Term, ok bool, h locks.Session, held bool, now time.Time) Standing {
	switch {
	case !held:
		return StandingFree
	case ok && t.Live() && leads(t, h, held):
		if t.Overdue(now) {
			return StandingStale
		}
		return StandingLive
	case !h.IsLease():
		return StandingOther
	}
	if idle, known := h.Idle(now); known && idle > h.LeaseBound {
		return StandingOverdue
	}
	return StandingWaiting
}

package locks

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Session is one holder or waiter of an advisory key: the pg_locks row
// joined with the pg_stat_activity row of its backend, or with the
// pg_prepared_xacts row when a prepared transaction holds the lock.
//
// Zero times and empty strings mean the server gave no value; whether that is
// because the value is empty or because it is hidden from this role is told
// by Hidden and Gone, never guessed from the empty value.
type Session struct {
	// PID is the server process id. It is 0 (pg_locks.pid is NULL) when a
	// prepared transaction holds or awaits the lock; Prepared then says which.
	PID int32
	// Prepared describes the prepared transaction that holds the lock when
	// PID is 0, and is nil otherwise.
	Prepared *PreparedXact
	// Granted is true for a holder, false for a waiter.
	Granted bool
	// Shared is true for pg_advisory_lock_shared (ShareLock): several
	// sessions can hold a key in shared mode at once.
	Shared bool
	// User is pg_stat_activity.usename (for a prepared transaction, its
	// owner). Visible to every role.
	User string
	// Application is application_name. Visible to every role.
	Application string
	// ClientAddr and ClientPort are where the session connects from. Both
	// are empty over a unix socket (ClientPort -1, as the server reports it)
	// and when Hidden.
	ClientAddr string
	ClientPort int32
	// BackendStart is when the session connected: the session's age, and
	// together with PID what identifies a backend across pid reuse.
	BackendStart time.Time
	// State is pg_stat_activity.state: "active", "idle", "idle in
	// transaction", ...
	State string
	// StateChange is when State last changed: for an idle holder, its last
	// activity.
	StateChange time.Time
	// WaitStart is when a waiter began to wait (pg_locks.waitstart, from
	// PostgreSQL 14; zero on older servers and for holders).
	WaitStart time.Time
	// Hidden is true when the server withheld the session's client, start
	// time and state from this role: reading other roles' sessions needs
	// membership in pg_read_all_stats (or in the session's role).
	Hidden bool
	// Gone is true when pg_locks still listed the backend but
	// pg_stat_activity no longer did: it exited while the query ran.
	Gone bool
	// LeaseBound is, for the lease session of a leasectl lease, the bound
	// its lease mark records: how long it may hold a key idle without a
	// term of its own before it is overdue (see [TakeMark]). It is zero
	// for every other session: a worker that elects itself with its own
	// SQL, or a leasectl from before the mark.
	LeaseBound time.Duration
}

// PreparedXact is a prepared transaction (PREPARE TRANSACTION) that holds
// transaction-level advisory locks until COMMIT PREPARED or ROLLBACK
// PREPARED: no backend holds them, and no connection loss releases them.
type PreparedXact struct {
	// GID is the transaction's global identifier, as given to PREPARE
	// TRANSACTION.
	GID string
	// PreparedAt is when it was prepared.
	PreparedAt time.Time
	// Owner is the role that prepared it.
	Owner string
}

// Idle reports how long s has been idle at now: for a session whose state
// starts with "idle", the time since its last state change; for a prepared
// transaction, the time since it was prepared. ok is false when the server
// did not say (hidden, gone) or the session is not idle.
func (s Session) Idle(now time.Time) (d time.Duration, ok bool) {
	switch {
	case s.Prepared != nil && !s.Prepared.PreparedAt.IsZero():
		return max(now.Sub(s.Prepared.PreparedAt), 0), true
	case strings.HasPrefix(s.State, "idle") && !s.StateChange.IsZero():
		return max(now.Sub(s.StateChange), 0), true
	}
	return 0, false
}

// Stale reports whether s has been idle for longer than after at now. A
// leader heartbeats on its lease session, so a holder idle for longer than a
// few heartbeat periods is hung, or the lock is stranded on a pooled server
// connection whose client left (or held by a forgotten prepared
// transaction). A session whose state is hidden is never called stale.
func (s Session) Stale(now time.Time, after time.Duration) bool {
	d, ok := s.Idle(now)
	return ok && d > after
}

// Waited reports how long waiter s has waited at now; ok is false when the
// server does not say (holders, PostgreSQL before 14).
func (s Session) Waited(now time.Time) (d time.Duration, ok bool) {
	if s.Granted || s.WaitStart.IsZero() {
		return 0, false
	}
	return max(now.Sub(s.WaitStart), 0), true
}

// KeyLocks are the holders and waiters of one advisory key.
type KeyLocks struct {
	Key Key
	// Holders hold the key: one session for an exclusive lock, possibly
	// several for shared locks. A session that took the key several times
	// appears once (pg_locks shows stacked holds as one row).
	Holders []Session
	// Waiters are blocked in pg_advisory_lock for the key, longest waiting
	// first where the server says.
	Waiters []Session
}

// Held reports whether anyone holds the key.
func (l KeyLocks) Held() bool { return len(l.Holders) > 0 }

// KeyState is the summary state of a key: held or free.
type KeyState string

// The states of a key, as `leasectl who` prints them.
const (
	Held KeyState = "HELD"
	Free KeyState = "FREE"
)

// State says whether the key is held; len(Waiters) says how many wait.
func (l KeyLocks) State() KeyState {
	if l.Held() {
		return Held
	}
	return Free
}

// Holder returns the holder of the key (the first one, for shared locks),
// and false when the key is free. Forced failover uses its PID and
// BackendStart to terminate exactly that backend.
func (l KeyLocks) Holder() (Session, bool) {
	if len(l.Holders) == 0 {
		return Session{}, false
	}
	return l.Holders[0], true
}

// Snapshot is what one query saw of the advisory locks of the current
// database.
type Snapshot struct {
	// Now is the server's clock at the query (now()); ages and idle times
	// are measured against it, so the client's clock does not matter.
	Now time.Time
	// Keys are the keys with at least one holder or waiter, ordered by form
	// and key.
	Keys []KeyLocks
	// Drained are the sessions that hold the drained mark ([DrainedMark]):
	// the lease sessions of group runs that were drained and are still
	// connected. Every reading returns them, whatever its filter.
	Drained []Session
}

// Find returns the holders and waiters of k; a free key yields an empty
// KeyLocks for k.
func (s *Snapshot) Find(k Key) KeyLocks {
	i, ok := slices.BinarySearchFunc(s.Keys, k, func(l KeyLocks, k Key) int { return compareKeys(l.Key, k) })
	if ok {
		return s.Keys[i]
	}
	return KeyLocks{Key: k}
}

func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Form, b.Form); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// Filter says which advisory locks [Read] returns.
type Filter struct {
	// All returns every advisory lock of the current database; Keys is
	// then ignored.
	All bool
	// Keys are the keys to return when All is false.
	Keys []Key
	// Presence also returns the presence lock ([Key.Presence]) of each
	// bigint key of Keys: the group runs that serve its role, which
	// [Snapshot.ByRole] shows as its stand-bys.
	Presence bool
}

// Querier runs a query: a *pgx.Conn, a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// holdersSQL reads the advisory locks of the current database, one row per
// holder or waiter, in one round trip: pg_locks LEFT JOIN pg_stat_activity
// and, for a lock without pid, the prepared transaction that holds it,
// found through its own transactionid lock, which carries the same
// virtualtransaction (that second look at pg_locks only runs when
// prepared transactions exist: the join with an empty pg_prepared_xacts
// ends early). Parameters: $1 bool, every advisory lock; $2 bigint[], the
// bigint keys wanted (objsubid 1); $3 bigint[], the two-int4 keys wanted
// (objsubid 2) as (k1 << 32) | k2. The lease marks of the database's
// sessions come with any selection (see [TakeMark]). The outer join on now() yields one row
// with NULL key columns when nothing matches, so the server's clock always
// comes back. waitstart is read through to_jsonb so that the query also
// runs on servers older than PostgreSQL 14, which lack the column.
const holdersSQL = `WITH px AS (
  SELECT t.virtualtransaction, p.gid, p.prepared, p.owner
  FROM pg_prepared_xacts p
  JOIN pg_locks t ON t.locktype = 'transactionid' AND t.transactionid = p.transaction AND t.pid IS NULL AND t.granted
)
SELECT q.now, k.objsubid, k.key, k.mode, k.granted, k.pid, k.waitstart,
       k.gid, k.prepared, k.owner,
       k.activity_pid, k.usename, k.application_name, k.client_addr, k.client_port,
       k.backend_start, k.state, k.state_change
FROM (SELECT now() AS now) q
LEFT JOIN (
  SELECT l.objsubid, (l.classid::bigint << 32) | l.objid::bigint AS key, l.mode, l.granted, l.pid,
         CASE WHEN NOT l.granted THEN (to_jsonb(l) ->> 'waitstart')::timestamptz END AS waitstart,
         px.gid, px.prepared, px.owner,
         a.pid AS activity_pid, a.usename, a.application_name, host(a.client_addr) AS client_addr, a.client_port,
         a.backend_start, a.state, a.state_change
  FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  LEFT JOIN px ON l.pid IS NULL AND px.virtualtransaction = l.virtualtransaction
  WHERE l.locktype = 'advisory' AND l.objsubid IN (1, 2)
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ($1::bool
         OR (l.objsubid = 1 AND (l.classid::bigint << 32) | l.objid::bigint = ANY ($2::bigint[]))
         OR (l.objsubid = 2 AND (l.classid::bigint << 32) | l.objid::bigint = ANY ($3::bigint[]))
         OR (l.objsubid = 2 AND l.classid = ` + markClassSQL + ` AND l.mode = 'ShareLock' AND l.granted))
) k ON true
ORDER BY k.objsubid, k.key, k.granted DESC, k.waitstart NULLS LAST, k.pid NULLS FIRST`

// holdersParamOIDs are the types of holdersSQL's parameters.
var holdersParamOIDs = []uint32{pgtype.BoolOID, pgtype.Int8ArrayOID, pgtype.Int8ArrayOID}

// binary is the format codes of three parameters, or of every result
// column (one code).
var binary = []int16{pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode}

// Query returns the statement [Read] runs for f and its parameters: what a
// benchmark hands to psql to compare like with like.
func (f Filter) Query() (sql string, args []any) {
	bigints, pairs := []int64{}, []int64{}
	for _, k := range f.Keys {
		if k.Form == Pair {
			pairs = append(pairs, k.ID)
		} else {
			bigints = append(bigints, k.ID)
			if f.Presence {
				pairs = append(pairs, k.Presence().ID)
			}
		}
	}
	return holdersSQL, []any{f.All, bigints, pairs}
}

// Read returns the holders and waiters of the advisory locks that f selects
// in the current database, in one query (one round trip). Advisory locks are per
// database: a key held in another database is a different lock and is not
// returned. On a standby the locks are the standby's own. The lease marks
// are not keys of the snapshot: each marks its sessions' LeaseBound.
//
// The statement goes out as pgx's exec mode for poolers sends it (one
// Parse, Bind, Execute and Sync: no statement outlives the round trip), but
// through pgconn, so that the rows come back in binary: that mode takes
// every column as text, and thousands of timestamps are costly to format
// and to parse.
func Read(ctx context.Context, conn *pgx.Conn, f Filter) (*Snapshot, error) {
	sql, args := f.Query()
	params := make([][]byte, len(args))
	for i, a := range args {
		var err error
		if params[i], err = conn.TypeMap().Encode(holdersParamOIDs[i], pgtype.BinaryFormatCode, a, nil); err != nil {
			return nil, fmt.Errorf("read advisory locks from pg_locks: %w", err)
		}
	}
	rows := pgx.RowsFromResultReader(conn.TypeMap(),
		conn.PgConn().ExecParams(ctx, sql, params, holdersParamOIDs, binary[:len(args)], binary[:1]))
	defer rows.Close()
	snap := &Snapshot{}
	// pgtype values, not pointers: with 10,000 locks the reflection behind
	// scanning into **T is a good part of the client's time. They are
	// declared once, not per row: passed to Scan they live on the heap, and
	// every row overwrites every one of them (NULL sets Valid false).
	var (
		objsubid                           pgtype.Int2
		key                                pgtype.Int8
		pid, activityPID, clientPort       pgtype.Int4
		granted                            pgtype.Bool
		waitStart, prepared                pgtype.Timestamptz
		backendStart, stateChange          pgtype.Timestamptz
		mode, gid, owner, user, app, state pgtype.Text
		client                             pgtype.Text
	)
	dest := []any{&snap.Now, &objsubid, &key, &mode, &granted, &pid, &waitStart,
		&gid, &prepared, &owner,
		&activityPID, &user, &app, &client, &clientPort,
		&backendStart, &state, &stateChange}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read advisory locks from pg_locks: %w", err)
		}
		if !key.Valid {
			continue // the lone row of the outer join: no lock matched
		}
		s := Session{
			PID:          pid.Int32,
			Granted:      granted.Bool,
			Shared:       mode.String == "ShareLock",
			User:         user.String,
			Application:  app.String,
			ClientAddr:   client.String,
			ClientPort:   clientPort.Int32,
			BackendStart: backendStart.Time,
			State:        state.String,
			StateChange:  stateChange.Time,
			WaitStart:    waitStart.Time,
			// Every visible backend has a start time; NULL means withheld.
			Hidden: activityPID.Valid && !backendStart.Valid,
			Gone:   pid.Valid && !activityPID.Valid,
		}
		if !pid.Valid {
			s.Prepared = &PreparedXact{GID: gid.String, PreparedAt: prepared.Time, Owner: owner.String}
			s.User = s.Prepared.Owner
		}
		k := Key{Form: KeyForm(objsubid.Int16), ID: key.Int64}
		if n := len(snap.Keys); n == 0 || snap.Keys[n-1].Key != k {
			snap.Keys = append(snap.Keys, KeyLocks{Key: k})
		}
		l := &snap.Keys[len(snap.Keys)-1]
		if s.Granted {
			l.Holders = append(l.Holders, s)
		} else {
			l.Waiters = append(l.Waiters, s)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read advisory locks from pg_locks: %w", err)
	}
	if snap.Now.IsZero() {
		snap.Now = time.Now()
	}
	snap.takeMarks()
	return snap, nil
}

// Lease is one line of `leasectl who`: a key, the role it belongs to, and
// who holds and awaits it.
type Lease struct {
	// Role is the role name of the key in the role map; empty for a key
	// that no role uses (and for every two-int4 key).
	Role string
	// Requested is true for the keys asked for, false for the other locked
	// keys that Leases added.
	Requested bool
	KeyLocks
	// Present are the sessions that hold the key's presence lock
	// ([Key.Presence]) in shared mode: the lease sessions of the group runs
	// (run --procfile) that serve the role, its leader among them when a
	// group leads it. Empty for single-role runs, which hold no presence
	// lock, and for a key in the two-int4 form.
	Present []Session
	// StandBys are the group stand-bys: the Present sessions that neither
	// hold the key nor queue for it. A group's stand-bys poll for the key
	// (pg_try_advisory_lock) instead of queueing in pg_locks, so they are
	// not among Waiters; they wait for the role all the same.
	StandBys []Session
	// PresenceOf is set on a line that is itself a presence lock (who
	// --all): the role whose presence lock it is. Its Holders, the lock's,
	// are then also its Present sessions: the replicas present for that
	// role, not holders of any lease.
	PresenceOf *RoleRef
	// FenceOf is set on a line that is a role's stop fence (who --all): the
	// two-int4 form of a role key's 64 bits ([Key.Fence]), held by a
	// leader's fence session while its program runs.
	FenceOf *RoleRef
}

// WaiterCount is how many sessions wait for the key: those queued in
// pg_locks (Waiters) and a group's stand-bys (StandBys).
func (l Lease) WaiterCount() int { return len(l.Waiters) + len(l.StandBys) }

// LedByGroup reports whether the key's holder is the lease session of a
// group run: it holds the key's presence lock too. Ending that session
// (pg_terminate_backend) moves every role the group leads, not this one
// alone.
func (l Lease) LedByGroup() bool {
	h, ok := l.Holder()
	return ok && h.Prepared == nil && slices.ContainsFunc(l.Present, func(p Session) bool { return p.PID == h.PID })
}

// Health is the verdict on one lease: whether exactly one live leader
// holds it. It is the one definition that `who --check` and `verify`'s
// one_leader both gate on.
type Health int

const (
	// Healthy: one session holds the key exclusively, and it is not stale
	// (or its state is hidden from this role: unknown, not proven stale).
	Healthy Health = iota
	// NoHolder: nobody holds the key; no replica leads the role.
	NoHolder
	// StaleHolder: the one holder has been idle longer than the threshold:
	// a hung leader, or a lock stranded on a pooled server connection.
	StaleHolder
	// SharedHolders: the key is held in shared mode
	// (pg_advisory_lock_shared), by one session or several. A lease's
	// leader holds its key alone; a shared hold lets others in.
	SharedHolders
	// PreparedHolder: a prepared transaction holds the key. No session, so
	// no worker, leads until it is committed or rolled back.
	PreparedHolder
)

// String is the health's name in `who -o json`: ok, no_holder, stale,
// shared or prepared.
func (h Health) String() string {
	switch h {
	case Healthy:
		return "ok"
	case NoHolder:
		return "no_holder"
	case StaleHolder:
		return "stale"
	case SharedHolders:
		return "shared"
	case PreparedHolder:
		return "prepared"
	}
	return "Health(" + strconv.Itoa(int(h)) + ")"
}

// Stale reports whether the lease is held and every holder has been idle
// longer than after: nobody alive is leading.
func (l Lease) Stale(now time.Time, after time.Duration) bool {
	if !l.Held() {
		return false
	}
	for _, h := range l.Holders {
		if !h.Stale(now, after) {
			return false
		}
	}
	return true
}

// Health says whether the lease has exactly one live leader at now. A
// prepared transaction among the holders wins over shared mode: it is what
// must be resolved (ROLLBACK PREPARED) before anyone can lead.
func (l Lease) Health(now time.Time, staleAfter time.Duration) Health {
	if !l.Held() {
		return NoHolder
	}
	shared := false
	for _, h := range l.Holders {
		if h.Prepared != nil {
			return PreparedHolder
		}
		shared = shared || h.Shared
	}
	switch {
	case shared:
		return SharedHolders
	case l.Stale(now, staleAfter):
		return StaleHolder
	}
	return Healthy
}

// SharedDetail describes a lease held in shared mode (SharedHolders).
func (l Lease) SharedDetail() string {
	pids := make([]string, 0, len(l.Holders))
	for _, h := range l.Holders {
		pids = append(pids, strconv.Itoa(int(h.PID)))
	}
	who := "1 session holds"
	if len(l.Holders) > 1 {
		who = strconv.Itoa(len(l.Holders)) + " sessions hold"
	}
	return fmt.Sprintf("%s it in shared mode (pid %s): a lease has exactly one holder, which holds its key alone", who, strings.Join(pids, ", "))
}

// PreparedDetail describes a lease held by a prepared transaction
// (PreparedHolder).
func (l Lease) PreparedDetail() string {
	for _, h := range l.Holders {
		if h.Prepared != nil {
			return fmt.Sprintf("held by prepared transaction %q, not by a worker (ROLLBACK PREPARED releases it)", h.Prepared.GID)
		}
	}
	return ""
}

// ByRole lays the snapshot out as `leasectl who` shows it: first one line
// per key of want, in that order, free ones included; then, when others is
// true, every other locked key that no role uses, ordered by form and key.
// roles maps each bigint role key to its role name (the role map's
// keys.File.NamesByKey); each line is named after its key's role.
//
// A bigint line also gets the sessions present for its role (Present,
// StandBys) from the key's presence lock, where the snapshot has it
// ([Filter.Presence], or [Filter.All]). With others, a presence lock
// ([Snapshot.PresenceRole]) is a line of its own, marked PresenceOf, unless
// it is the presence lock of a role that is not shown.
func (s *Snapshot) ByRole(roles map[int64]string, want []Key, others bool) []Lease {
	names := make(map[Key]string, len(roles))
	for k, name := range roles {
		names[BigintKey(k)] = name
	}
	n := len(want)
	if others {
		n += len(s.Keys) // every line at once: growing a slice of 10,000 leases copies it over and over
	}
	out := make([]Lease, 0, n)
	seen := make(map[Key]bool, len(want))
	for _, k := range want {
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, s.present(Lease{Role: names[k], Requested: true, KeyLocks: s.Find(k)}))
	}
	if others {
		for _, l := range s.Keys {
			if _, known := names[l.Key]; known || seen[l.Key] {
				continue
			}
			if rk, ok := s.PresenceRole(l, roles); ok {
				if _, known := names[rk]; known && !seen[rk] {
					continue // the presence of a role not shown, as its key is not
				}
				out = append(out, Lease{KeyLocks: l, Present: l.Holders, PresenceOf: &RoleRef{Key: rk, Role: names[rk]}})
				continue
			}
			if l.Key.Form == Pair {
				if name, ok := names[BigintKey(l.Key.ID)]; ok {
					out = append(out, Lease{KeyLocks: l, FenceOf: &RoleRef{Key: BigintKey(l.Key.ID), Role: name}})
					continue
				}
			}
			out = append(out, s.present(Lease{KeyLocks: l}))
		}
	}
	return out
}

// present fills in l's Present and StandBys from the presence lock of its
// key.
func (s *Snapshot) present(l Lease) Lease {
	if l.Key.Form != Bigint {
		return l
	}
	p := s.Find(l.Key.Presence())
	if !sharedOnly(p) {
		return l
	}
	l.Present = p.Holders
	for _, h := range p.Holders {
		claims := func(c Session) bool { return c.PID == h.PID }
		if !slices.ContainsFunc(l.Holders, claims) && !slices.ContainsFunc(l.Waiters, claims) {
			l.StandBys = append(l.StandBys, h)
		}
	}
	return l
}

// AnyHidden reports whether the server withheld some session's details
// from this role.
func AnyHidden(leases []Lease) bool {
	for _, l := range leases {
		for _, s := range slices.Concat(l.Holders, l.Waiters, l.Present) {
			if s.Hidden {
				return true
			}
		}
	}
	return false
}

// RevealGrant is the statement that lets role see other roles' sessions,
// whose details the server withholds otherwise (see Session.Hidden).
func RevealGrant(role string) string { return grantTo("pg_read_all_stats", role) }

// grantTo is the statement that grants the predefined role privilege to
// role, for the user to run. The role name is always quoted: names that
// need no quotes in most places can still be keywords (a role named user
// would read as a syntax error unquoted).
func grantTo(privilege, role string) string {
	return "GRANT " + privilege + " TO " + pgx.Identifier{role}.Sanitize()
}

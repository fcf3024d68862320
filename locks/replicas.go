package locks

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// Replicas: the processes that serve roles, as pg_locks shows them. A group
// run (leasectl run --procfile) runs many roles in one process per replica
// over two sessions that share one application_name: a lease session, which
// holds the key of every role the replica leads (exclusive) and the presence
// lock of every role it serves (shared, [Key.Presence]), and a stop fence
// session, which holds the fence ([Key.Fence]) of each role it leads while
// that role's program runs. A group's stand-bys poll for the keys rather
// than queue for them, so only the presence locks show that they wait. A
// single-role run (run --role) holds or queues for its one key, and its
// fence session's name ends in " fence".

// RoleRef names a role by its key, and by its name in the role map where it
// has one.
type RoleRef struct {
	Key Key
	// Role is the role's name; empty for a key of no role.
	Role string
}

// Name is how messages name the role: its name, else "key K".
func (r RoleRef) Name() string {
	return RoleName(r.Role, r.Key)
}

// sharedOnly reports whether l is held, and only in shared mode by
// sessions (a presence lock is never held otherwise).
func sharedOnly(l KeyLocks) bool {
	if len(l.Holders) == 0 {
		return false
	}
	for _, h := range l.Holders {
		if !h.Shared || h.Prepared != nil || h.PID == 0 {
			return false
		}
	}
	return true
}

// presenceHigh is the high half of the presence lock of a bigint key from 0
// to 2^32-1 (the bytes "pres"), as keys are usually written.
const presenceHigh = uint32(uint64(PresenceMask) >> 32)

// PresenceRole says whether l, a lock of the snapshot, is the presence lock
// of a role, and of which role key. Any two-int4 key is the presence lock
// of some bigint key ([PresenceOf]); l is taken for one when it is held in
// shared mode only and that key is a role of roles (the role map's
// NamesByKey), is from 0 to 2^32-1 (its high half is then the bytes
// "pres"), or is held by one of l's holders (a group's leader).
func (s *Snapshot) PresenceRole(l KeyLocks, roles map[int64]string) (Key, bool) {
	rk, ok := PresenceOf(l.Key)
	if !ok || !sharedOnly(l) {
		return Key{}, false
	}
	if _, known := roles[rk.ID]; known {
		return rk, true
	}
	if c, _ := l.Key.LockTag(); c == presenceHigh {
		return rk, true
	}
	for _, h := range s.Find(rk).Holders {
		if slices.ContainsFunc(l.Holders, func(p Session) bool { return p.PID == h.PID }) {
			return rk, true
		}
	}
	return Key{}, false
}

// Replica is one process that serves roles, by its lease session.
type Replica struct {
	// Session is the lease session. Its lock fields (Granted, Shared,
	// WaitStart) are cleared: they were those of one of its locks.
	Session Session
	// Group is true for a group run: the session holds presence locks, or
	// the drained mark.
	Group bool
	// Drained is true for a group run that was drained (leasectl failover
	// --replica): its session holds the drained mark ([DrainedMark]), and
	// it takes no role until it restarts; it is still connected.
	Drained bool
	// Leads are the roles whose keys the session holds in exclusive mode,
	// in the snapshot's key order.
	Leads []RoleRef
	// Waits are the roles it waits for: a group's, those it is present for
	// and does not lead; a single-role run's, the key it queues for.
	Waits []RoleRef
	// Fence is the replica's stop fence session, when the snapshot shows
	// it holding the fence of a role the replica leads: a session of the
	// same application_name (with " fence" after it, for a single-role
	// run). Nil otherwise.
	Fence *Session
}

// Host is the host of the replica's application_name: the text after its
// last '@' (leasectl run NAME@HOST#PID, lease.DefaultApplicationName),
// without the process id ("#" and digits) that ends a default name; ""
// when it has no '@'.
func (r Replica) Host() string {
	host, _ := HostOf(r.Session.Application)
	return host
}

// HostOf splits an application_name of the form NAME@HOST#PID (the
// default of leasectl run and the lease package) or NAME@HOST into its
// host and its process id ("" when it ends in none): the text after the
// last '@', and the digits after a '#' that end it. A host name holds
// neither '@' nor '#'. host is "" when the name has no '@'.
func HostOf(application string) (host, pid string) {
	i := strings.LastIndexByte(application, '@')
	if i < 0 {
		return "", ""
	}
	host = application[i+1:]
	if j := strings.LastIndexByte(host, '#'); j >= 0 && j+1 < len(host) && strings.Trim(host[j+1:], "0123456789") == "" {
		host, pid = host[:j], host[j+1:]
	}
	return host, pid
}

// Matches reports whether name names the replica: its application_name
// exactly, the host after the last '@' in it ([Replica.Host]: every
// replica on that host), or that host with the replica's process id
// (HOST#PID).
func (r Replica) Matches(name string) bool {
	if name == "" {
		return false
	}
	host, pid := HostOf(r.Session.Application)
	return r.Session.Application == name || host == name || (pid != "" && host+"#"+pid == name)
}

// MatchReplicas returns the replicas of rs that name names
// ([Replica.Matches]), in their order.
func MatchReplicas(rs []Replica, name string) []Replica {
	var out []Replica
	for _, r := range rs {
		if r.Matches(name) {
			out = append(out, r)
		}
	}
	return out
}

// Leading reports whether the replica leads k.
func (r Replica) Leading(k Key) bool {
	return slices.ContainsFunc(r.Leads, func(l RoleRef) bool { return l.Key == k })
}

// Replicas are the processes that serve roles, as the snapshot shows them,
// ordered by application_name and pid: every session that holds a presence
// lock ([Snapshot.PresenceRole]), a group replica; every session that holds
// the drained mark, a drained group replica (Drained), which serves no
// role; and every other session that holds a role's key of roles in
// exclusive mode or queues for it, a single-role run (or a worker of its
// own). A snapshot read with [Filter.All] shows them all; one read for some
// keys with [Filter.Presence], those that serve them, and the drained ones.
func (s *Snapshot) Replicas(roles map[int64]string) []Replica {
	byPID := map[int32]*Replica{}
	var order []int32
	replica := func(c Session) *Replica {
		if r, ok := byPID[c.PID]; ok {
			return r
		}
		c.Granted, c.Shared, c.WaitStart = false, false, time.Time{}
		r := &Replica{Session: c}
		byPID[c.PID] = r
		order = append(order, c.PID)
		return r
	}
	// The groups: who is present for which role.
	present := map[int32]map[Key]bool{}
	for _, l := range s.Keys {
		rk, ok := s.PresenceRole(l, roles)
		if !ok {
			continue
		}
		for _, h := range l.Holders {
			replica(h).Group = true
			if present[h.PID] == nil {
				present[h.PID] = map[Key]bool{}
			}
			present[h.PID][rk] = true
		}
	}
	// What each leads and queues for.
	for _, l := range s.Keys {
		if l.Key.Form != Bigint {
			continue
		}
		_, known := roles[l.Key.ID]
		ref := RoleRef{Key: l.Key, Role: roles[l.Key.ID]}
		for _, h := range l.Holders {
			if h.Shared || h.Prepared != nil || h.PID == 0 || !(known || present[h.PID][l.Key]) {
				continue
			}
			r := replica(h)
			r.Leads = append(r.Leads, ref)
		}
		for _, w := range l.Waiters {
			if w.Prepared != nil || w.PID == 0 || !(known || present[w.PID][l.Key]) {
				continue
			}
			r := replica(w)
			r.Waits = append(r.Waits, ref)
		}
	}
	// The drained groups, still connected: while their work stops they
	// may still lead roles.
	for _, d := range s.Drained {
		r := replica(d)
		r.Group, r.Drained = true, true
	}
	// A group's stand-by roles: present for, neither led nor queued for.
	for _, l := range s.Keys {
		rk, ok := s.PresenceRole(l, roles)
		if !ok {
			continue
		}
		for _, h := range l.Holders {
			r := byPID[h.PID]
			if !r.Leading(rk) && !slices.ContainsFunc(r.Waits, func(w RoleRef) bool { return w.Key == rk }) {
				r.Waits = append(r.Waits, RoleRef{Key: rk, Role: roles[rk.ID]})
			}
		}
	}
	out := make([]Replica, 0, len(order))
	for _, pid := range order {
		r := byPID[pid]
		slices.SortFunc(r.Waits, func(a, b RoleRef) int { return compareKeys(a.Key, b.Key) })
		r.Fence = s.fenceOf(r)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(a.Session.Application, b.Session.Application), cmp.Compare(a.Session.PID, b.Session.PID))
	})
	return out
}

// fenceOf finds r's stop fence session: another session of its name that
// holds the fence of a role r leads.
func (s *Snapshot) fenceOf(r *Replica) *Session {
	name := r.Session.Application
	if !r.Group {
		name += " fence"
	}
	for _, l := range r.Leads {
		for _, h := range s.Find(l.Key.Fence()).Holders {
			if h.PID != r.Session.PID && !h.Shared && h.Application == name {
				h.Granted, h.WaitStart = false, time.Time{}
				return &h
			}
		}
	}
	return nil
}

// ErrNoReplica means no replica has the name asked for: there is nothing
// to fail over.
var ErrNoReplica = errkind.New(errkind.CheckFailed, "nothing to fail over")

// Drain is what `failover --replica` acts on, as it was looked up: the
// server, and the replicas of one name with the leases of the roles they
// lead. An operator confirms it before [FailoverAll] moves them.
type Drain struct {
	// Server is the server that answered; never a standby.
	Server dbconn.ServerInfo
	// ViaProxy: the connection goes through a pooler or proxy (see
	// Target.ViaProxy).
	ViaProxy bool
	// Now is the server's clock at the lookup.
	Now time.Time
	// Name is the name asked for.
	Name string
	// Replicas are the replicas of that name ([Replica.Matches]), in the
	// order of Seen.
	Replicas []DrainReplica
	// Seen are all the replicas the lookup saw.
	Seen []Replica
}

// DrainReplica is one replica to move every role off, with a Target for
// each role it leads.
type DrainReplica struct {
	Replica
	Targets []*Target
}

// Targets are the targets of every replica of the drain, in order.
func (d *Drain) Targets() []*Target {
	var out []*Target
	for _, r := range d.Replicas {
		out = append(out, r.Targets...)
	}
	return out
}

// FindDrain looks up the server and the replicas that name names
// ([Replica.Matches]) in one connection, from one reading of every advisory
// lock of the database; roles name the keys after their roles. It refuses a
// standby ([ErrStandby]) and, when no replica has that name, says which
// ones it saw ([ErrNoReplica]). Each role a matched replica leads becomes a
// [Target] (see [NewTarget]), with Group set for a group's.
func FindDrain(ctx context.Context, conn *pgx.Conn, name string, roles map[int64]string) (*Drain, error) {
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	if server.InRecovery {
		return nil, fmt.Errorf("refusing to fail over replica %q: %w, whose advisory locks are its own; terminating a backend there fences nothing on the primary (point the DSN at the primary)", name, ErrStandby)
	}
	snap, err := Read(ctx, conn, Filter{All: true})
	if err != nil {
		return nil, err
	}
	d := &Drain{Server: server, ViaProxy: conn.PgConn().PID() != server.BackendPID, Now: snap.Now, Name: name, Seen: snap.Replicas(roles)}
	for _, r := range MatchReplicas(d.Seen, name) {
		dr := DrainReplica{Replica: r}
		for _, l := range r.Leads {
			t, err := NewTarget(server, snap.ByRole(roles, []Key{l.Key}, false)[0], snap.Now)
			if err != nil {
				return nil, err
			}
			t.ViaProxy = d.ViaProxy
			if r.Group {
				t.Group = &dr.Replica
			}
			dr.Targets = append(dr.Targets, t)
		}
		d.Replicas = append(d.Replicas, dr)
	}
	if len(d.Replicas) == 0 {
		return nil, d.noMatch()
	}
	return d, nil
}

// noMatch says that no replica has d's name, and which ones there are.
func (d *Drain) noMatch() error {
	if len(d.Seen) == 0 {
		return fmt.Errorf("%w: no replica is named %q, and no replica serves a role in database %s (no session holds or waits for a role's key, or holds a presence lock)", ErrNoReplica, d.Name, d.Server.Database)
	}
	seen := make([]string, len(d.Seen))
	for i, r := range d.Seen {
		seen[i] = fmt.Sprintf("%q (pid %d)", r.Session.Application, r.Session.PID)
	}
	return fmt.Errorf("%w: no replica is named %q (by its application_name, the host after the last '@' in it, or HOST#PID); the replicas seen: %s", ErrNoReplica, d.Name, strings.Join(seen, ", "))
}

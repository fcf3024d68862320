package locks

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/dbconn"
)

// Name is how messages name the lease: its role, else "key K".
func (l Lease) Name() string {
	if l.Role != "" {
		return l.Role
	}
	return "key " + l.Key.String()
}

// Describe names a session in one line, "pid 6330 (poller-a,
// 10.0.4.17:54646)", leaving out what the server withheld.
func (s Session) Describe() string {
	if s.Prepared != nil {
		return fmt.Sprintf("prepared transaction %q", s.Prepared.GID)
	}
	var about []string
	if s.Application != "" {
		about = append(about, s.Application)
	}
	if s.ClientAddr != "" {
		about = append(about, net.JoinHostPort(s.ClientAddr, strconv.Itoa(int(s.ClientPort))))
	}
	out := "pid " + strconv.Itoa(int(s.PID))
	if len(about) > 0 {
		out += " (" + strings.Join(about, ", ") + ")"
	}
	return out
}

// Target is what a forced failover acts on, as it was looked up: the
// server, and the key with its holder and waiters. An operator confirms it
// before [Target.Failover] terminates the holder.
type Target struct {
	// Server is the server that answered; never a standby.
	Server dbconn.ServerInfo
	// ViaProxy is true when the connection reaches the server through a
	// pooler or proxy: the backend pid the server reports differs from the
	// one the connection was given at startup. The holders are then most
	// likely the pooler's server connections too, and terminating one ends
	// that server connection, not the worker's own client connection.
	ViaProxy bool
	// Lease is the key, its role and its holders and waiters.
	Lease Lease
	// Holder is the session to terminate.
	Holder Session
	// Now is the server's clock at the lookup, for the holder's ages.
	Now time.Time
}

// FindTarget looks up the server and the holder of key in one connection;
// roles name the key after its role. It refuses what a forced failover
// cannot or must not act on (see [NewTarget]).
func FindTarget(ctx context.Context, conn *pgx.Conn, key Key, roles []Role) (*Target, error) {
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	snap, err := Read(ctx, conn, Filter{Keys: []Key{key}})
	if err != nil {
		return nil, err
	}
	t, err := NewTarget(server, snap.Leases(roles, []Key{key}, false)[0], snap.Now)
	if err != nil {
		return nil, err
	}
	t.ViaProxy = conn.PgConn().PID() != server.BackendPID
	return t, nil
}

// NewTarget decides whether lease, as read from server at now, can be
// failed over: the server must be a primary (a standby's locks fence
// nothing), the key must be held ([ErrNoHolder]) by exactly one backend
// ([ErrNotALease] for shared holders and prepared transactions), and that
// backend must not be the one answering (through a transaction pooler it
// can be: [ErrOwnSession]).
func NewTarget(server dbconn.ServerInfo, lease Lease, now time.Time) (*Target, error) {
	name := lease.Name()
	h, held := lease.Holder()
	switch {
	case server.InRecovery:
		return nil, fmt.Errorf("refusing to fail over %s: %w, whose advisory locks are its own; terminating a backend there fences nothing on the primary (point the DSN at the primary)", name, ErrStandby)
	case !held:
		return nil, fmt.Errorf("%w: nobody holds %s (key %s)", ErrNoHolder, name, lease.Key)
	case len(lease.Holders) > 1:
		return nil, fmt.Errorf("%s is held by %d sessions in shared mode, which no lease does: %w; nothing to fail over", name, len(lease.Holders), ErrNotALease)
	case h.Prepared != nil:
		return nil, fmt.Errorf("%s is held by prepared transaction %q, which has no backend to terminate (%w); ROLLBACK PREPARED '%s' releases it",
			name, h.Prepared.GID, ErrNotALease, h.Prepared.GID)
	case uint32(h.PID) == server.BackendPID:
		return nil, fmt.Errorf("refusing to terminate pid %d, which holds %s: %w (a pooler lent it to leasectl); connect to the server directly, not through the pooler",
			h.PID, name, ErrOwnSession)
	}
	return &Target{Server: server, Lease: lease, Holder: h, Now: now}, nil
}

// FailoverOptions configure [Target.Failover].
type FailoverOptions struct {
	// TerminateTimeout is how long pg_terminate_backend waits for the
	// holder's backend to exit; it also bounds each read. Default 5s.
	TerminateTimeout time.Duration
	// Wait is how long to wait for a new holder after the termination.
	// Default 15s.
	Wait time.Duration
	// Poll is the pause between reads while waiting; default 10ms.
	Poll time.Duration
}

// Failover is what [Target.Failover] did.
type Failover struct {
	Target *Target
	// Termination is the holder's termination.
	Termination Termination
	// Takeover is the new holder; nil when none took over in time.
	Takeover *Takeover
}

// Failover terminates the target's holder ([Terminate], which re-checks it
// atomically) and waits for another session to take the key
// ([AwaitTakeover]). When the termination fails nothing was terminated and
// the result is nil. When it succeeded but no session took over within
// o.Wait, the result describes the termination and the error wraps
// [ErrNoTakeover].
func (t *Target) Failover(ctx context.Context, q Querier, o FailoverOptions) (*Failover, error) {
	if o.TerminateTimeout <= 0 {
		o.TerminateTimeout = 5 * time.Second
	}
	if o.Wait <= 0 {
		o.Wait = 15 * time.Second
	}
	term, err := Terminate(ctx, q, t.Lease.Key, t.Holder, o.TerminateTimeout)
	if err != nil {
		return nil, fmt.Errorf("fail over %s: %w", t.Lease.Name(), err)
	}
	res := &Failover{Target: t, Termination: term}
	tk, err := AwaitTakeover(ctx, q, t.Lease.Key, t.Holder, term, AwaitOptions{
		Within: o.Wait, Poll: o.Poll, ReadTimeout: o.TerminateTimeout,
	})
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.Lease.Name(), err)
	}
	res.Takeover = &tk
	return res, nil
}

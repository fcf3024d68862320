package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/dbconn"
)

// Name is how messages name the lease: its role, else "key K".
func (l RoleLocks) Name() string {
	if l.Role != "" {
		return l.Role
	}
	return "key " + l.Key.String()
}

// Describe names a session in one line, "pid 6330 (poller-a,
// 10.0.4.17:54646)", leaving out what the server withheld.
func (s Claimant) Describe() string {
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
	// Locks are the key, its role and its holders and waiters.
	Locks RoleLocks
	// Holder is the session to terminate.
	Holder Claimant
	// Now is the server's clock at the lookup, for the holder's ages.
	Now time.Time
}

// FindTarget looks up the server and the holder of key in one connection;
// roles name the key after its role. It refuses what a forced failover
// cannot or must not act on (see [NewTarget]).
func FindTarget(ctx context.Context, conn *pgx.Conn, key Key, roles map[int64]string) (*Target, error) {
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	snap, err := Read(ctx, conn, Filter{Keys: []Key{key}})
	if err != nil {
		return nil, err
	}
	t, err := NewTarget(server, snap.ByRole(roles, []Key{key}, false)[0], snap.Now)
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
func NewTarget(server dbconn.ServerInfo, lease RoleLocks, now time.Time) (*Target, error) {
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
	return &Target{Server: server, Locks: lease, Holder: h, Now: now}, nil
}

// FailoverOptions configure [Target.Failover].
type FailoverOptions struct {
	// TerminateTimeout is how long pg_terminate_backend waits for the
	// holder's backend to exit; it also bounds each read, and how long the
	// leader has to answer a request to step down. Default 5s.
	TerminateTimeout time.Duration
	// Wait is how long to wait for a new holder once the key is free (after
	// the leader stepped down, or after the termination). Default 15s.
	Wait time.Duration
	// Poll is the pause between reads while waiting; default 10ms.
	Poll time.Duration
	// Force terminates the holder at once, without asking it to step down.
	Force bool
}

// The ways a failover went.
const (
	// PathGraceful: the leader stepped down on request (see ResignRequest),
	// stopping its work before it released the key.
	PathGraceful = "graceful"
	// PathTerminate: the holder's backend was terminated, at once (Force)
	// or because it did not answer the request to step down.
	PathTerminate = "terminate"
)

// Resignation is the request to step down and its answer.
type Resignation struct {
	// Sent is when the request was sent (the client's clock); ServerStart
	// the server's clock at the start of the statement that sent it.
	Sent, ServerStart time.Time
	// Answered: the leader acknowledged within the timeout; AnswerTook is
	// how long that took, and Ack the answer.
	Answered   bool
	AnswerTook time.Duration
	Ack        ResignAck
	// Released: the leader released the key; ReleaseTook is how long after
	// the request it was seen free or held by another session.
	Released    bool
	ReleaseTook time.Duration
	// Fallback says why the failover went on to terminate the holder
	// anyway; empty when it did not.
	Fallback string
}

// Failover is what [Target.Failover] did.
type Failover struct {
	Target *Target
	// Path is PathGraceful or PathTerminate.
	Path string
	// Resign is the request to step down; nil with Force.
	Resign *Resignation
	// Termination is the holder's termination; nil on the graceful path.
	Termination *Termination
	// Takeover is the new holder; nil when none took over in time.
	Takeover *Takeover
}

// WaitedFrom is when the wait for a new holder began, on the client's
// clock: when the key was seen released after the leader stepped down
// (PathGraceful), or when the termination returned (PathTerminate). The
// wait lasts FailoverOptions.Wait from then.
func (f *Failover) WaitedFrom() time.Time {
	if f.Termination != nil {
		return f.Termination.Returned()
	}
	if rs := f.Resign; rs != nil && rs.Released {
		return rs.Sent.Add(rs.ReleaseTook)
	}
	return time.Time{}
}

// Origin is the server's clock at the start of the statement that asked
// the leader to step down (PathGraceful) or that terminated it
// (PathTerminate): what the takeover time is measured from.
func (f *Failover) Origin() time.Time {
	if f.Termination != nil {
		return f.Termination.ServerStart
	}
	if f.Resign != nil {
		return f.Resign.ServerStart
	}
	return time.Time{}
}

// Failover moves the target's lease to a stand-by. Unless o.Force, it first
// asks the leader to step down (the leader's lease session LISTENs for it:
// see ResignRequest) and waits up to o.TerminateTimeout for its answer and
// then for the key to be released, as long as the leader said its work may
// take to stop. A leader that does not answer, or does not release the key
// in that time, is terminated ([Terminate], which re-checks it atomically),
// as it is at once with o.Force. Then it waits up to o.Wait for another
// session to take the key ([AwaitTakeover]).
//
// When nothing was done (the request could not be sent and the termination
// failed, or the holder changed), the result is nil. When the key was
// released but no session took over within o.Wait, the result describes
// what was done and the error wraps [ErrNoTakeover].
func (t *Target) Failover(ctx context.Context, conn *pgx.Conn, o FailoverOptions) (*Failover, error) {
	if o.TerminateTimeout <= 0 {
		o.TerminateTimeout = 5 * time.Second
	}
	if o.Wait <= 0 {
		o.Wait = 15 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	res := &Failover{Target: t}
	if !o.Force {
		res.Resign = &Resignation{}
		tk, err := t.resign(ctx, conn, o, res.Resign)
		switch {
		case err == nil:
			res.Path, res.Takeover = PathGraceful, &tk
			return res, nil
		case res.Resign.Released:
			res.Path = PathGraceful
			return res, fmt.Errorf("%s: %w", t.Locks.Name(), err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		res.Resign.Fallback = err.Error()
	}
	res.Path = PathTerminate
	term, err := Terminate(ctx, conn, t.Locks.Key, t.Holder, o.TerminateTimeout)
	if err != nil {
		return nil, fmt.Errorf("fail over %s: %w", t.Locks.Name(), err)
	}
	res.Termination = &term
	tk, err := AwaitTakeover(ctx, conn, t.Locks.Key, t.Holder, term, AwaitOptions{
		Within: o.Wait, Poll: o.Poll, ReadTimeout: o.TerminateTimeout,
	})
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.Locks.Name(), err)
	}
	res.Takeover = &tk
	return res, nil
}

// resign asks the holder to step down and waits for its answer, for the
// key's release and for a new holder. Its error says why the failover
// should terminate instead (wrapping ErrNoResignAnswer), unless rs.Released:
// then the key was released and only the takeover failed.
func (t *Target) resign(ctx context.Context, conn *pgx.Conn, o FailoverOptions, rs *Resignation) (Takeover, error) {
	if t.Locks.Key.Form != Bigint {
		return Takeover{}, fmt.Errorf("%w: leases hold bigint keys, and %s is in the two-int4 form", ErrNoResignAnswer, t.Locks.Key)
	}
	key := t.Locks.Key.ID
	id, err := nonce()
	if err != nil {
		return Takeover{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.TerminateTimeout)
	defer cancel()
	if err := Listen(rctx, conn, ResignedChannel(key)); err != nil {
		return Takeover{}, fmt.Errorf("%w: %v", ErrNoResignAnswer, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.TerminateTimeout)
		defer cancel()
		_, _ = conn.Exec(uctx, "UNLISTEN "+pgx.Identifier{ResignedChannel(key)}.Sanitize())
	}()
	payload, err := json.Marshal(ResignRequest{PID: uint32(t.Holder.PID), ID: id})
	if err != nil {
		return Takeover{}, err
	}
	rs.Sent = time.Now()
	if err := conn.QueryRow(rctx, "SELECT statement_timestamp() FROM (SELECT pg_notify($1, $2)) n", ResignChannel(key), string(payload)).Scan(&rs.ServerStart); err != nil {
		return Takeover{}, fmt.Errorf("%w: send the request: %v", ErrNoResignAnswer, err)
	}
	// The answer: a notification on the resigned channel with our id.
	for {
		n, err := conn.WaitForNotification(rctx)
		if err != nil {
			if ctx.Err() != nil {
				return Takeover{}, ctx.Err()
			}
			if rctx.Err() != nil && !conn.IsClosed() {
				return Takeover{}, fmt.Errorf("%w within %s (an older leasectl, or a hung leader)", ErrNoResignAnswer, o.TerminateTimeout)
			}
			return Takeover{}, fmt.Errorf("%w: %v", ErrNoResignAnswer, err)
		}
		if n.Channel != ResignedChannel(key) {
			continue
		}
		if ack, err := ParseResignAck(n.Payload); err == nil && ack.ID == id {
			rs.Answered, rs.AnswerTook, rs.Ack = true, time.Since(rs.Sent), ack
			break
		}
	}
	// The leader stops its work, then releases the key: allow it the stop
	// time it announced, plus the timeout, and then o.Wait for a stand-by.
	releaseBy := rs.Sent.Add(time.Duration(rs.Ack.StopTimeoutMS)*time.Millisecond + o.TerminateTimeout)
	var takeoverBy time.Time
	f := Filter{Keys: []Key{t.Locks.Key}}
	for polls := 1; ; polls++ {
		rctx, cancel := context.WithTimeout(ctx, o.TerminateTimeout)
		snap, err := Read(rctx, conn, f)
		cancel()
		if err != nil {
			if rs.Released {
				return Takeover{}, fmt.Errorf("wait for a new holder of key %s: %w", t.Locks.Key, err)
			}
			return Takeover{}, fmt.Errorf("%w: watch the key: %v", ErrNoResignAnswer, err)
		}
		seen := time.Now()
		held := false
		for _, h := range snap.Find(t.Locks.Key).Holders {
			if IsTakeover(t.Holder, h) {
				if !rs.Released {
					rs.Released, rs.ReleaseTook = true, seen.Sub(rs.Sent)
				}
				after, server := measureTakeover(Termination{Sent: rs.Sent, ServerStart: rs.ServerStart}, h, seen)
				return Takeover{Holder: h, After: after, ByServerClock: server, Now: snap.Now, Polls: polls}, nil
			}
			held = true
		}
		switch {
		case !held && !rs.Released:
			rs.Released, rs.ReleaseTook = true, seen.Sub(rs.Sent)
			takeoverBy = seen.Add(o.Wait)
		case held && rs.Released:
			return Takeover{}, fmt.Errorf("%w: pid %d stepped down, but no other session was waiting, and it took the key back", ErrNoTakeover, t.Holder.PID)
		case !rs.Released && !seen.Before(releaseBy):
			return Takeover{}, fmt.Errorf("%w: pid %d answered, but still held the key %s after the request (its announced stop time plus the terminate timeout)", ErrNoResignAnswer, t.Holder.PID, releaseBy.Sub(rs.Sent).Round(time.Millisecond))
		case rs.Released && !seen.Before(takeoverBy):
			return Takeover{}, fmt.Errorf("key %s: %w within %s of pid %d stepping down", t.Locks.Key, ErrNoTakeover, o.Wait, t.Holder.PID)
		}
		select {
		case <-ctx.Done():
			return Takeover{}, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

// nonce is a request id.
func nonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

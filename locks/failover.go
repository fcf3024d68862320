package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
)

// Name is how messages name the lease: its role, else "key K"; a presence
// lock's line, "presence of ROLE".
func (l Lease) Name() string {
	switch {
	case l.PresenceOf != nil:
		return "presence of " + l.PresenceOf.Name()
	case l.FenceOf != nil:
		return "fence of " + l.FenceOf.Name()
	}
	return RoleName(l.Role, l.Key)
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
	// Locks are the key, its role and its holders and waiters.
	Locks Lease
	// Holder is the session to terminate.
	Holder Session
	// Now is the server's clock at the lookup, for the holder's ages.
	Now time.Time
	// Group is set when the holder is the lease session of a group run
	// (it holds the key's presence lock): the replica, with every role it
	// leads and waits for. Ending that session moves every role it leads at
	// once, so [Target.Failover] terminates it only with Force. Nil for any
	// other holder.
	Group *Replica
}

// FindTarget looks up the server and the holder of key in one connection;
// roles name the key after its role. It refuses what a forced failover
// cannot or must not act on (see [NewTarget]).
func FindTarget(ctx context.Context, conn *pgx.Conn, key Key, roles map[int64]string) (*Target, error) {
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	snap, err := Read(ctx, conn, Filter{Keys: []Key{key}, Presence: true})
	if err != nil {
		return nil, err
	}
	t, err := NewTarget(server, snap.ByRole(roles, []Key{key}, false)[0], snap.Now)
	if err != nil {
		return nil, err
	}
	t.ViaProxy = conn.PgConn().PID() != server.BackendPID
	if t.Locks.LedByGroup() {
		// Which other roles it leads: every lock of the database, once.
		all, err := Read(ctx, conn, Filter{All: true})
		if err != nil {
			return nil, err
		}
		for _, r := range all.Replicas(roles) {
			if r.Session.PID == t.Holder.PID && r.Group {
				t.Group = &r
			}
		}
	}
	return t, nil
}

// OtherLeads are the roles that the target's holder leads besides the
// target's, when it is a group's lease session (Group); nil otherwise.
func (t *Target) OtherLeads() []RoleRef {
	if t.Group == nil {
		return nil
	}
	var out []RoleRef
	for _, l := range t.Group.Leads {
		if l.Key != t.Locks.Key {
			out = append(out, l)
		}
	}
	return out
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
	// Drain sets Drain on the requests to step down (ResignRequest): a
	// group run steps down from every role it leads and takes no roles
	// until it restarts (failover --replica).
	Drain bool
}

func (o FailoverOptions) withDefaults() FailoverOptions {
	if o.TerminateTimeout <= 0 {
		o.TerminateTimeout = timing.DefaultTimeout
	}
	if o.Wait <= 0 {
		o.Wait = timing.DefaultTakeoverWait
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	return o
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
// as it is at once with o.Force; but a group's lease session (Group) is
// terminated only with o.Force, since that moves every role it leads, and
// without it the error wraps [ErrNoResignAnswer]. Then it waits up to
// o.Wait for another session to take the key ([AwaitTakeover]).
//
// When nothing was done (the request could not be sent and the termination
// failed, or the holder changed), the result is nil. When the key was
// released but no session took over within o.Wait, the result describes
// what was done and the error wraps [ErrNoTakeover].
func (t *Target) Failover(ctx context.Context, conn *pgx.Conn, o FailoverOptions) (*Failover, error) {
	res, errs := FailoverAll(ctx, conn, []*Target{t}, o)
	return res[0], errs[0]
}

// FailoverAll moves the leases of targets, each as [Target.Failover] does
// for one, but all at once: it asks every holder to step down from every
// key first (with o.Drain a group run then steps down from every role it
// leads), then waits for all the keys together, so that each takeover is
// measured from its own request while the others go on. A holder that must
// be terminated is terminated once, for all its keys ([Terminate] guarded by
// one of them), and then the takeover of each of its keys is awaited
// ([AwaitTakeover]). The results and errors are those of each target, in
// order; a nil result means nothing was done for it.
func FailoverAll(ctx context.Context, conn *pgx.Conn, targets []*Target, o FailoverOptions) ([]*Failover, []error) {
	o = o.withDefaults()
	n := len(targets)
	res, errs := make([]*Failover, n), make([]error, n)
	var kill []int // the targets whose holders are to be terminated
	for i, t := range targets {
		res[i] = &Failover{Target: t}
	}
	if o.Force {
		for i := range targets {
			kill = append(kill, i)
		}
	} else {
		rss := make([]*Resignation, n)
		for i := range targets {
			res[i].Resign = &Resignation{}
			rss[i] = res[i].Resign
		}
		tks, rerrs := resignAll(ctx, conn, targets, rss, o)
		for i, t := range targets {
			switch err := rerrs[i]; {
			case err == nil:
				res[i].Path, res[i].Takeover = PathGraceful, &tks[i]
			case rss[i].Released:
				res[i].Path, errs[i] = PathGraceful, fmt.Errorf("%s: %w", t.Locks.Name(), err)
			case ctx.Err() != nil:
				res[i], errs[i] = nil, ctx.Err()
			case t.Group != nil:
				res[i], errs[i] = nil, t.groupRefusal(err)
			default:
				rss[i].Fallback = err.Error()
				kill = append(kill, i)
			}
		}
	}
	if len(kill) == 0 {
		return res, errs
	}
	// One termination per holder, for all its keys.
	var await []int
	terms := make([]Termination, n)
	for len(kill) > 0 {
		i := kill[0]
		same := func(j int) bool { return !IsTakeover(targets[i].Holder, targets[j].Holder) }
		var group, rest []int
		for _, j := range kill {
			if same(j) {
				group = append(group, j)
			} else {
				rest = append(rest, j)
			}
		}
		kill = rest
		for g, j := range group {
			t := targets[j]
			res[j].Path = PathTerminate
			term, err := Terminate(ctx, conn, t.Locks.Key, t.Holder, o.TerminateTimeout)
			if errors.Is(err, ErrHolderChanged) && g < len(group)-1 {
				// It let go of this key: guard the termination by the next.
				res[j], errs[j] = nil, fmt.Errorf("fail over %s: %w", t.Locks.Name(), err)
				continue
			}
			if err != nil {
				for _, k := range group[g:] {
					res[k], errs[k] = nil, fmt.Errorf("fail over %s: %w", targets[k].Locks.Name(), err)
				}
				break
			}
			for _, k := range group[g:] {
				res[k].Path, res[k].Termination, terms[k] = PathTerminate, &term, term
				await = append(await, k)
			}
			break
		}
	}
	// The keys of one holder go free together: waiting for them in turn,
	// each against the same deadline from its termination, loses nothing.
	for _, i := range await {
		t := targets[i]
		tk, err := AwaitTakeover(ctx, conn, t.Locks.Key, t.Holder, terms[i], AwaitOptions{
			Within: o.Wait, Poll: o.Poll, ReadTimeout: o.TerminateTimeout,
		})
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", t.Locks.Name(), err)
			continue
		}
		res[i].Takeover = &tk
	}
	return res, errs
}

// groupRefusal is why a group's lease session that did not step down (err)
// is not terminated without Force.
func (t *Target) groupRefusal(err error) error {
	also := ""
	if others := t.OtherLeads(); len(others) > 0 {
		names := make([]string, len(others))
		for i, r := range others {
			names[i] = r.Name()
		}
		also = ", which also leads " + strings.Join(names, ", ") + ","
	}
	return fmt.Errorf("%s: %w; pid %d is the lease session of group replica %q%s and terminating it would move every role it leads at once: nothing was terminated (a forced failover, --force, does that)",
		t.Locks.Name(), err, t.Holder.PID, t.Group.Session.Application, also)
}

// ask is one request to step down: to the lease session pid, on the resign
// channel of key.
type ask struct {
	key int64
	pid int32
	id  string
	rs  *Resignation
	err error
}

// askAll sends each request of asks (with drain, as a drain) and waits up to
// timeout for their answers: each gets its answer in rs, or its err
// (wrapping ErrNoResignAnswer, or ctx's error).
func askAll(ctx context.Context, conn *pgx.Conn, asks []*ask, drain bool, timeout time.Duration) {
	pending := 0
	for _, a := range asks {
		if a.err != nil {
			continue
		}
		if a.id, a.err = nonce(); a.err == nil {
			pending++
		}
	}
	fail := func(err error) {
		for _, a := range asks {
			if a.err == nil && !a.rs.Answered {
				a.err = err
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var listening []string
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		for _, ch := range listening {
			_, _ = conn.Exec(uctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize())
		}
	}()
	for _, a := range asks {
		if ch := ResignedChannel(a.key); a.err == nil && !slices.Contains(listening, ch) {
			if err := Listen(rctx, conn, ch); err != nil {
				fail(fmt.Errorf("%w: %v", ErrNoResignAnswer, err))
				return
			}
			listening = append(listening, ch)
		}
	}
	for _, a := range asks {
		if a.err != nil {
			continue
		}
		payload, err := json.Marshal(ResignRequest{PID: uint32(a.pid), ID: a.id, Drain: drain})
		if err != nil {
			a.err, pending = err, pending-1
			continue
		}
		a.rs.Sent = time.Now()
		if err := conn.QueryRow(rctx, "SELECT statement_timestamp() FROM (SELECT pg_notify($1, $2)) n", ResignChannel(a.key), string(payload)).Scan(&a.rs.ServerStart); err != nil {
			a.err, pending = fmt.Errorf("%w: send the request: %v", ErrNoResignAnswer, err), pending-1
		}
	}
	// The answers: notifications on the resigned channels with our ids.
	for pending > 0 {
		n, err := conn.WaitForNotification(rctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				fail(ctx.Err())
			case rctx.Err() != nil && !conn.IsClosed():
				fail(fmt.Errorf("%w within %s (an older leasectl, or a hung leader)", ErrNoResignAnswer, timeout))
			default:
				fail(fmt.Errorf("%w: %v", ErrNoResignAnswer, err))
			}
			return
		}
		ack, err := ParseResignAck(n.Payload)
		if err != nil {
			continue
		}
		for _, a := range asks {
			if a.err == nil && !a.rs.Answered && ack.ID == a.id && n.Channel == ResignedChannel(a.key) {
				a.rs.Answered, a.rs.AnswerTook, a.rs.Ack = true, time.Since(a.rs.Sent), ack
				pending--
			}
		}
	}
}

// AskToDrain asks the group replica whose lease session is pid to drain (a
// ResignRequest with Drain, on the resign channel of key, a role it is
// present for) and waits up to timeout for its answer: for a replica that
// leads no role, so that it takes none until it restarts. The error wraps
// ErrNoResignAnswer when it did not answer.
func AskToDrain(ctx context.Context, conn *pgx.Conn, key Key, pid int32, timeout time.Duration) (Resignation, error) {
	var rs Resignation
	a := &ask{key: key.ID, pid: pid, rs: &rs}
	if key.Form != Bigint {
		return rs, fmt.Errorf("%w: leases hold bigint keys, and %s is in the two-int4 form", ErrNoResignAnswer, key)
	}
	askAll(ctx, conn, []*ask{a}, true, timeout)
	return rs, a.err
}

// resignAll asks each target's holder to step down and waits for its
// answer, for the key's release and for a new holder, all at once. The
// error of each says why its failover should terminate instead (wrapping
// ErrNoResignAnswer), unless its rss[i].Released: then the key was released
// and only the takeover failed.
func resignAll(ctx context.Context, conn *pgx.Conn, ts []*Target, rss []*Resignation, o FailoverOptions) ([]Takeover, []error) {
	n := len(ts)
	tks, errs := make([]Takeover, n), make([]error, n)
	asks := make([]*ask, n)
	for i, t := range ts {
		asks[i] = &ask{key: t.Locks.Key.ID, pid: t.Holder.PID, rs: rss[i]}
		if t.Locks.Key.Form != Bigint {
			asks[i].err = fmt.Errorf("%w: leases hold bigint keys, and %s is in the two-int4 form", ErrNoResignAnswer, t.Locks.Key)
		}
	}
	askAll(ctx, conn, asks, o.Drain, o.TerminateTimeout)
	// Each leader stops its work, then releases its key: allow it the stop
	// time it announced, plus the timeout, and then o.Wait for a stand-by.
	pending := 0
	releaseBy, takeoverBy := make([]time.Time, n), make([]time.Time, n)
	var keys []Key
	for i, a := range asks {
		if errs[i] = a.err; a.err == nil {
			pending++
			rs := rss[i]
			releaseBy[i] = rs.Sent.Add(time.Duration(rs.Ack.StopTimeoutMS)*time.Millisecond + o.TerminateTimeout)
			keys = append(keys, ts[i].Locks.Key)
		}
	}
	f := Filter{Keys: keys}
	for polls := 1; pending > 0; polls++ {
		rctx, cancel := context.WithTimeout(ctx, o.TerminateTimeout)
		snap, err := Read(rctx, conn, f)
		cancel()
		seen := time.Now()
		for i, t := range ts {
			if errs[i] != nil || tks[i].Polls > 0 {
				continue
			}
			done := func(err error) { errs[i], pending = err, pending-1 }
			rs := rss[i]
			if err != nil {
				if rs.Released {
					done(fmt.Errorf("wait for a new holder of key %s: %w", t.Locks.Key, err))
				} else {
					done(fmt.Errorf("%w: watch the key: %v", ErrNoResignAnswer, err))
				}
				continue
			}
			held, took := false, false
			for _, h := range snap.Find(t.Locks.Key).Holders {
				if IsTakeover(t.Holder, h) {
					if !rs.Released {
						rs.Released, rs.ReleaseTook = true, seen.Sub(rs.Sent)
					}
					after, server := measureTakeover(Termination{Sent: rs.Sent, ServerStart: rs.ServerStart}, h, seen)
					tks[i] = Takeover{Holder: h, After: after, ByServerClock: server, Now: snap.Now, Polls: polls}
					pending--
					took = true
					break
				}
				held = true
			}
			switch {
			case took:
			case !held && !rs.Released:
				rs.Released, rs.ReleaseTook = true, seen.Sub(rs.Sent)
				takeoverBy[i] = seen.Add(o.Wait)
			case held && rs.Released:
				done(fmt.Errorf("%w: pid %d stepped down, but no other session was waiting, and it took the key back", ErrNoTakeover, t.Holder.PID))
			case !rs.Released && !seen.Before(releaseBy[i]):
				done(fmt.Errorf("%w: pid %d answered, but still held the key %s after the request (its announced stop time plus the terminate timeout)", ErrNoResignAnswer, t.Holder.PID, releaseBy[i].Sub(rs.Sent).Round(time.Millisecond)))
			case rs.Released && !seen.Before(takeoverBy[i]):
				done(fmt.Errorf("key %s: %w within %s of pid %d stepping down", t.Locks.Key, ErrNoTakeover, o.Wait, t.Holder.PID))
			}
		}
		if pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for i := range ts {
				if errs[i] == nil && tks[i].Polls == 0 {
					errs[i] = ctx.Err()
				}
			}
			return tks, errs
		case <-time.After(o.Poll):
		}
	}
	return tks, errs
}

// nonce is a request id.
func nonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

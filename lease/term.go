package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// The durable term. Each leadership is a term, recorded in the lease's own
// database (package internal/term): it begins once the new leader holds the
// key and its fence, before work starts, and ends once work (and, for a
// program, everything it started) is gone. The record outlives sessions:
// when the server ends every session of a leader at once, the next leader
// finds the previous term not ended and waits until its holder records the
// end (it does as soon as it can reach the server again) or until the
// term's deadline has passed (timing.Lease.TermDeadline).

// heldTerm is the term this runner holds while it leads.
type heldTerm struct {
	id    string
	epoch int64
}

// termChange is what a change to Leading says of the new term.
type termChange struct {
	epoch      int64
	leaderless time.Duration
}

// pendingEnd is a term of this runner whose end could not be recorded yet:
// its sessions were gone. at is when its work was gone.
type pendingEnd struct {
	id     string
	epoch  int64
	reason string
	at     time.Time
}

// checkRecord says whether the term record is usable on s, creating it when
// it is missing and the role may. When it is not, it logs once per connect
// what a lease without it does not cover, and the command that fixes it.
func (r *runner) checkRecord(ctx context.Context, s *sessions) bool {
	st, err := term.Ensure(ctx, s.main)
	if err == nil && st == term.Ready {
		return true
	}
	if r.cfg.Fencing {
		return false // connect refuses, and says why
	}
	const uncovered = "without the term record, a server restart or the end of every session of the leader at once can overlap two leaders' work, and a frozen holder is not evicted"
	var ce *term.CreateError
	switch {
	case errors.As(err, &ce) && ce.Denied():
		r.log.Warn("the term record (schema leasectl) is missing, and this role may not create it; "+uncovered+"; run `leasectl fence init` as a role that may (or --print-sql for your migrations)", "err", err.Error())
	case err != nil:
		r.log.Warn("cannot use the term record (schema leasectl); "+uncovered, "err", err.Error())
	case st == term.NoPrivilege || st == term.ReadOnly:
		r.log.Warn("the term record (schema leasectl) exists, but this role may not read and write it; " + uncovered + "; as the schema's owner, run: " + term.GrantSQL(s.info.User))
	default:
		r.log.Warn("the term record (schema leasectl) is missing; " + uncovered + "; run `leasectl fence init`")
	}
	return false
}

// recordPending records the end of a term that this runner lost with its
// sessions, on conn: the next leader may be waiting for it.
func (r *runner) recordPending(ctx context.Context, conn *pgx.Conn) {
	p := r.pendingEnd
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	open, err := term.End(ctx, conn, r.cfg.Key, p.id, p.reason, time.Since(p.at))
	if err != nil {
		r.log.Warn("cannot record the end of the lost term yet; retrying on the next connection", "epoch", p.epoch, "err", err.Error())
		return
	}
	r.pendingEnd = nil
	if open {
		r.log.Info("recorded the end of the term", "epoch", p.epoch, "reason", p.reason, "ended_ago", time.Since(p.at).Round(time.Millisecond))
	}
}

// endTerm records the end of the held term, with work gone, on whichever
// of s's sessions still works: before the key and fence are released, or
// after a loss. What cannot be recorded now stays pending for the next
// connection.
func (r *runner) endTerm(s *sessions, reason string) {
	h := r.held
	if h == nil {
		return
	}
	r.held = nil
	r.pendingEnd = &pendingEnd{id: h.id, epoch: h.epoch, reason: reason, at: time.Now()}
	for _, c := range []*pgx.Conn{s.main, s.fenceConn} {
		if r.pendingEnd != nil && c != nil && !c.IsClosed() {
			r.recordPending(context.Background(), c)
		}
	}
}

// recordPendingOnExit records a pending end on a connection of its own when
// Run returns without having been able to: the next leader would otherwise
// wait for the term's deadline.
func (r *runner) recordPendingOnExit() {
	if r.pendingEnd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.HeartbeatTimeout)
	defer cancel()
	conn, _, err := r.open(ctx, r.mainCfg)
	if err != nil {
		r.log.Warn("cannot record the end of the term before exiting; the next leader waits for its deadline", "epoch", r.pendingEnd.epoch, "err", err.Error())
		return
	}
	defer conn.Close(context.Background())
	r.recordPending(ctx, conn)
}

// previous is what awaitPrevious found of the term before the new one.
type previous struct {
	term term.Term
	ok   bool // there was one
}

// awaitPrevious waits, holding the key and the fence, until the previous
// term has ended or its deadline has passed. Meanwhile it proves its hold
// every second, and wakes at once when the previous holder records the
// end (a notification on the term channel). first, when not nil, is a
// reading of the term taken since the grant (seize), with the
// notifications drained before it: the first look uses it.
func (r *runner) awaitPrevious(ctx context.Context, s *sessions, first *term.Reading) (previous, error) {
	logged := false
	for {
		var t term.Term
		var now time.Time
		var ok bool
		if first != nil {
			t, now, ok = first.Term, first.Now, first.OK
			first = nil
		} else {
			// Drained before the reading, never after it: a
			// notification of the end that arrives with the reading's
			// reply (recorded just after it) must wake the wait below at
			// once.
			r.drainNotes()
			qctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
			var err error
			t, now, ok, err = term.Current(qctx, s.main, r.cfg.Key)
			cancel()
			if err != nil {
				return previous{}, err
			}
		}
		if r.cfg.afterTermRead != nil {
			r.cfg.afterTermRead(s.main)
		}
		if !ok || !t.Live() {
			return previous{term: t, ok: ok}, nil
		}
		if p := r.pendingEnd; p != nil && p.id == t.ID {
			// Our own term, whose end could not be recorded: our work is
			// gone.
			r.recordPending(ctx, s.main)
			continue
		}
		deadline := t.Deadline()
		if !now.Before(deadline) {
			attrs := []any{"previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder), "deadline", deadline.Format(time.RFC3339Nano)}
			if logged {
				r.log.Warn("the previous term's holder did not record its end by the term's deadline; beginning a new term", attrs...)
			} else {
				r.log.Warn("the previous term never recorded its end, and its deadline has passed (its holder died, or stopped renewing); beginning a new term", attrs...)
			}
			return previous{term: t, ok: true}, nil
		}
		if !logged {
			logged = true
			r.log.Info("holding the key; waiting for the previous term to end (its holder stops its work and records it), at most until its deadline",
				"backend_pid", s.info.BackendPID, "previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder),
				"deadline", deadline.Format(time.RFC3339Nano), "wait_at_most", deadline.Sub(now).Round(time.Millisecond))
		}
		if err := r.watch(ctx, s.main, time.Now().Add(min(cmp.Or(r.cfg.termPoll, time.Second), deadline.Sub(now)))); err != nil {
			return previous{}, err
		}
		if ctx.Err() != nil {
			return previous{}, context.Cause(ctx)
		}
		if err := r.prove(s.main, r.key, s.info, nil); err != nil {
			return previous{}, fmt.Errorf("heartbeat while waiting for the previous term to end: %w", err)
		}
		r.markAlive()
	}
}

// beginTerm records the new term on the lease session.
func (r *runner) beginTerm(ctx context.Context, s *sessions) (term.Started, error) {
	b, err := r.newTerm(s)
	if err != nil {
		return term.Started{}, err
	}
	// Not cancelled with ctx (Start bounds itself): a stop that arrives
	// while the term is being begun must not leave a term the server
	// recorded and this runner does not know it holds, which the next
	// leader would wait for until its deadline.
	st, err := term.Start(context.WithoutCancel(ctx), s.main, b)
	r.begun(b, st, err)
	return st, err
}

// begun records the outcome of beginning term b: held, or, on an error,
// pending its end (the server may have recorded it before the error, a
// connection lost at the commit), as soon as a connection allows.
func (r *runner) begun(b term.Begin, st term.Started, err error) {
	if err != nil {
		r.pendingEnd = &pendingEnd{id: b.ID, reason: term.SessionLost, at: time.Now()}
		return
	}
	r.held = &heldTerm{id: b.ID, epoch: st.Epoch}
}

// newTerm is what a term this runner begins on s records.
func (r *runner) newTerm(s *sessions) (term.Begin, error) {
	id, err := term.NewID()
	if err != nil {
		return term.Begin{}, err
	}
	host, _ := os.Hostname()
	return term.Begin{
		Key: r.cfg.Key, Role: r.cfg.Role, ID: id, Keep: r.cfg.HistoryKeep,
		Holder: term.Holder{Host: host, OSPID: os.Getpid(), FenceBackendPID: s.fenceInfo.BackendPID,
			Application: r.mainCfg.RuntimeParams["application_name"]},
		Timing:    r.cfg.timing(),
		FenceWait: r.cfg.HeartbeatTimeout,
		Timeout:   r.cfg.HeartbeatTimeout,
		OnFenced: func(pids []int32, err error) {
			if err != nil {
				r.log.Error("fenced transactions of the previous term are still open, and their sessions could not be ended; the new term waits (the same role, or pg_signal_backend, may end them)", "err", err.Error())
				return
			}
			r.log.Warn("ended the sessions of fenced transactions of the previous term that were still open: they do not commit", "pids", fmt.Sprint(pids))
		},
	}, nil
}

// describeHolder names a term's holder in a log line.
func describeHolder(h term.Holder) string {
	return fmt.Sprintf("%s pid %d (backend %d)", h.Host, h.OSPID, h.BackendPID)
}

// leaderless is how long the role had no term before one that began at
// began, after prev.
func leaderless(prev previous, began time.Time) time.Duration {
	if !prev.ok {
		return 0
	}
	end := prev.term.Ended
	if end.IsZero() {
		end = prev.term.Renewed // it ended at its last renewal
	}
	return max(began.Sub(end), 0)
}

// errTermEnded fails a heartbeat whose renewal found the term ended.
var errTermEnded = errors.New("the term is no longer live in the term record (another replica ended it)")

// evictStale is a stand-by's check, after each wait in the lock queue, that
// the key's holder shows signs of life. A holder whose term has gone
// unrenewed for longer than a live holder ever lets it (term.StandingStale),
// or a lease that has held the key idle for longer than its bound without
// beginning a term of its own (term.StandingOverdue: a frozen stand-by the
// server granted the key), has its sessions ended: the next stand-by takes
// over under the term's rules. A holder that is not a lease of leasectl
// (term.StandingOther: a worker with its own SQL, during a rolling deploy)
// leads by holding the key, and is left alone.
func (r *runner) evictStale(ctx context.Context, s *sessions) {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	snap, err := locks.Read(qctx, s.main, locks.Filter{Keys: []locks.Key{r.key, r.fence}})
	if err != nil {
		r.log.Warn("cannot check the key's holder", "err", err.Error())
		return
	}
	holder, held := snap.Find(r.key).Holder()
	if !held || holder.Prepared != nil || holder.PID == int32(s.info.BackendPID) {
		return
	}
	t, now, ok, err := term.Current(qctx, s.main, r.cfg.Key)
	if err != nil {
		r.log.Warn("cannot check the key's holder", "err", err.Error())
		return
	}
	type target struct {
		key locks.Key
		c   locks.Session
	}
	var why string
	targets := []target{{r.key, holder}}
	standing := term.Assess(t, ok, holder, held, now)
	switch standing {
	case term.StandingStale:
		why = fmt.Sprintf("its term %d was last renewed %s ago, longer than heartbeat interval + timeout + stop time (%s)",
			t.Epoch, now.Sub(t.Renewed).Round(time.Millisecond), t.Timing.Stopped())
		if f, ok := snap.Find(r.fence).Holder(); ok && uint32(f.PID) == t.Holder.FenceBackendPID {
			targets = append(targets, target{r.fence, f})
		}
	case term.StandingOverdue:
		idle, _ := holder.Idle(now)
		why = fmt.Sprintf("it has held the key idle for %s without beginning a term, longer than its heartbeat interval + timeout + stop time (%s)",
			idle.Round(time.Millisecond), holder.LeaseBound)
	default:
		return
	}
	for _, tg := range targets {
		_, err := locks.Terminate(qctx, s.main, tg.key, tg.c, r.cfg.HeartbeatTimeout)
		var pe *locks.PermissionError
		switch {
		case errors.As(err, &pe):
			if !r.evictDenied {
				r.evictDenied = true
				r.log.Error("the key's holder shows no sign of life, but this role may not end its session; waiting for it", "holder_pid", tg.c.PID, "why", why, "err", err.Error())
			}
			return
		case errors.Is(err, locks.ErrHolderChanged):
			return
		case err != nil:
			r.log.Warn("cannot end the session of the key's holder", "holder_pid", tg.c.PID, "err", err.Error())
			return
		}
		r.log.Warn("ended the session of a holder that shows no sign of life", "holder_pid", tg.c.PID, "holder", tg.c.Describe(), "why", why)
	}
	if standing == term.StandingStale {
		if err := term.MarkEvicted(qctx, s.main, r.cfg.Key, t.ID); err != nil {
			r.log.Warn("cannot mark the term evicted", "err", err.Error())
		}
	}
}

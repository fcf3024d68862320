package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// A group's leadership of each role: its stop fence, its term, its work,
// and how each role's work ends (step-down, resignation, drain).

// takeFences tries the stop fences of the roles whose keys are held here.
func (gr *group) takeFences(ctx context.Context) error {
	var want []locks.Key
	for _, m := range gr.members {
		if m.phase == holding {
			want = append(want, m.fence)
		}
	}
	if len(want) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	won, pid, server, err := locks.TryLockPairs(qctx, gr.s.fenceConn, want)
	if err != nil {
		return fmt.Errorf("stop fence session: %w", err)
	}
	if pid != gr.s.fenceInfo.BackendPID || !server.SameServer(gr.s.fenceInfo.Identity()) {
		return fmt.Errorf("stop fence session: its statement ran on backend pid %d of %s, not its own pid %d: something between client and server moves its statements", pid, server, gr.s.fenceInfo.BackendPID)
	}
	now := time.Now()
	for _, f := range won {
		m := gr.byKey[f.ID]
		m.phase, m.fencedAt = fenced, now
		m.nextTermCheck = now
	}
	for _, m := range gr.members {
		if m.phase == holding && !m.fenceLogged {
			m.fenceLogged = true
			m.r.log.Info("holding the key; waiting for the previous leader's work to stop (stop fence)", "backend_pid", gr.s.info.BackendPID)
		}
	}
	return nil
}

// begin begins a term, and starts work, for each role that holds its key
// and fence once the previous term has ended (or its deadline passed) and
// the takeover delay is over. The roles that are ready together (a
// replica's roles, after its death) read their previous terms in one
// statement and begin their terms in one round trip.
func (gr *group) begin(ctx context.Context) error {
	var due []*member
	for _, m := range gr.members {
		if m.phase != fenced {
			continue
		}
		now := time.Now()
		if d := gr.r.cfg.TakeoverDelay; d > 0 && now.Before(m.fencedAt.Add(d)) {
			if !m.termLogged {
				m.termLogged = true
				m.r.log.Info("holding the key before starting work", "backend_pid", gr.s.info.BackendPID, "takeover_delay", d)
			}
			continue
		}
		if !m.r.record {
			gr.start(ctx, m, term.Started{}, 0)
			continue
		}
		if !now.Before(m.nextTermCheck) {
			due = append(due, m)
		}
	}
	if len(due) == 0 {
		return nil
	}
	ready, err := gr.previousEnded(ctx, due)
	if err != nil || len(ready) == 0 {
		return err
	}
	return gr.beginTerms(ctx, ready)
}

// beginTerms begins the terms of ready, all at once, and starts their
// work. When that fails with the session still open, nothing began (one
// transaction), and each role tries on its own, as a single lease does.
func (gr *group) beginTerms(ctx context.Context, ready []*member) error {
	s := gr.s
	if len(ready) > 1 {
		bs := make([]term.Begin, len(ready))
		for i, m := range ready {
			b, err := m.r.newTerm(s)
			if err != nil {
				return err
			}
			bs[i] = b
		}
		// Not cancelled with ctx, as in a single lease's beginTerm.
		sts, err := term.StartAll(context.WithoutCancel(ctx), s.main, bs)
		if err == nil {
			for i, m := range ready {
				m.r.begun(bs[i], sts[i], nil)
				gr.start(ctx, m, sts[i], leaderless(m.prev, sts[i].Began))
			}
			return nil
		}
		if s.main.IsClosed() {
			for i, m := range ready {
				m.r.begun(bs[i], term.Started{}, err) // they may have begun
			}
			return fmt.Errorf("begin the terms: %w", err)
		}
		gr.r.log.Debug("cannot begin the terms together; beginning them one by one", "roles", len(ready), "err", err.Error())
	}
	for _, m := range ready {
		began, err := m.r.beginTerm(ctx, s)
		if err != nil {
			if ctx.Err() != nil || s.main.IsClosed() {
				return fmt.Errorf("begin a term: %w", err)
			}
			// This role only: give it up and try again later.
			m.r.log.Warn("cannot begin a term; releasing the key and trying again later", "err", err.Error())
			m.r.recordPending(ctx, gr.s.main) // in case the server recorded it after all
			gr.release(m, gr.r.cfg.RetryInterval)
			continue
		}
		gr.start(ctx, m, began, leaderless(m.prev, began.Began))
	}
	return nil
}

// previousEnded returns those of due whose previous term has ended or is
// past its deadline, reading them all in one statement. For the others it
// checks again after a quarter second, or at once when the term channel
// says their term ended.
func (gr *group) previousEnded(ctx context.Context, due []*member) ([]*member, error) {
	keys := make([]int64, len(due))
	for i, m := range due {
		keys[i] = m.Key
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	latest, now, err := term.Latest(qctx, gr.s.main, keys)
	cancel()
	if err != nil {
		return nil, err
	}
	var ready []*member
	for _, m := range due {
		t, ok := latest[m.Key]
		if gr.previousEndedOf(ctx, m, t, ok, now) {
			ready = append(ready, m)
		}
	}
	return ready, nil
}

// previousEndedOf says whether m's previous term t (ok: it has one), read
// at the server's time now, has ended or is past its deadline.
func (gr *group) previousEndedOf(ctx context.Context, m *member, t term.Term, ok bool, now time.Time) bool {
	m.prev = previous{term: t, ok: ok}
	if !ok || !t.Live() {
		return true
	}
	if p := m.r.pendingEnd; p != nil && p.id == t.ID {
		m.r.recordPending(ctx, gr.s.main) // our own: our work is gone
		return false
	}
	deadline := t.Deadline()
	if !now.Before(deadline) {
		m.r.log.Warn("the previous term never recorded its end, and its deadline has passed (its holder died, or stopped renewing); beginning a new term",
			"previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder), "deadline", deadline.Format(time.RFC3339Nano))
		return true
	}
	if !m.termLogged {
		m.termLogged = true
		m.r.log.Info("holding the key; waiting for the previous term to end (its holder stops its work and records it), at most until its deadline",
			"backend_pid", gr.s.info.BackendPID, "previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder),
			"deadline", deadline.Format(time.RFC3339Nano), "wait_at_most", deadline.Sub(now).Round(time.Millisecond))
	}
	m.nextTermCheck = time.Now().Add(min(250*time.Millisecond, deadline.Sub(now)))
	return false
}

// start runs m's work under the term began.
func (gr *group) start(ctx context.Context, m *member, began term.Started, gap time.Duration) {
	s := gr.s
	m.since = time.Now()
	sess := &Session{Role: m.Role, Key: m.Key, BackendPID: s.info.BackendPID, FenceBackendPID: s.fenceInfo.BackendPID,
		Since: m.since, Epoch: began.Epoch, conn: s.main, fence: s.fenceConn}
	if m.r.held != nil {
		sess.TermID = m.r.held.id
	}
	wctx, cancel := context.WithCancelCause(context.WithValue(ctx, sessionKey{}, sess))
	m.cancel, m.done, m.err, m.phase = cancel, make(chan struct{}), nil, leading
	m.r.leading = termChange{epoch: began.Epoch, leaderless: gap}
	attrs := []any{"fence_backend_pid", s.fenceInfo.BackendPID, "fence_wait", m.fencedAt.Sub(m.heldAt).Round(10 * time.Microsecond)}
	if m.r.held != nil {
		attrs = append(attrs, "epoch", began.Epoch)
	}
	m.r.setState(Leading, s.info.BackendPID, nil, attrs...)
	done := m.done
	go func() {
		defer close(done)
		m.err = m.Work(wctx)
		gr.poke()
	}()
}

// stop tells m to stop, for cause, recording reason with its term's end,
// and to stay away from the key for hold once stopped. A role that holds
// the key but has no work yet gives it up at once.
func (gr *group) stop(m *member, cause error, reason string, hold time.Duration) {
	switch m.phase {
	case holding, fenced:
		gr.release(m, hold)
	case leading:
		m.cancel(cause)
		m.phase, m.stopReason, m.stopCause, m.hold, m.stopAt, m.stopWarned = stopping, reason, cause, hold, time.Now(), false
	}
}

// release ends m's term (if any) and releases its fence and key; m stands
// by again after hold.
func (gr *group) release(m *member, hold time.Duration) {
	m.r.endTerm(gr.s, term.Released)
	if m.phase != holding {
		m.r.releaseFence(gr.s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	if _, err := locks.UnlockKey(ctx, gr.s.main, m.key); err != nil {
		m.r.log.Warn("unlock failed", "err", err.Error())
	}
	m.phase, m.notBefore = idle, time.Now().Add(hold)
}

// collect finishes the roles whose work returned: by itself (released;
// stood by again or ended, as Again says), or after being told to stop.
func (gr *group) collect(ctx context.Context) error {
	for _, m := range gr.members {
		if m.phase != leading && m.phase != stopping {
			continue
		}
		select {
		case <-m.done:
		default:
			if m.phase == stopping && !m.stopWarned && time.Since(m.stopAt) > gr.r.cfg.StopTimeout {
				m.stopWarned = true
				m.r.log.Error("work has not returned within StopTimeout after it was cancelled; still waiting", "stop_timeout", gr.r.cfg.StopTimeout)
			}
			continue
		}
		pid := gr.s.info.BackendPID
		if m.phase == stopping {
			m.r.endTerm(gr.s, m.stopReason)
			gr.release(m, m.hold)
			if m.stopCause == ErrResigned {
				m.r.log.Info("stepped down on request; standing by again", "backend_pid", pid)
			}
			m.r.quiet = true
			m.r.setState(StandingBy, pid, m.stopCause)
			m.r.quiet = m.stopCause == ErrResigned
			switch {
			case m.r.quiet:
			case m.stopCause == ErrDrained:
				// It does not stand by: the replica takes no role.
				m.r.log.Info("stepped down: drained; this replica takes no role until it restarts", "backend_pid", pid)
			default:
				m.r.log.Info("stepped down; standing by again", "backend_pid", pid, "why", m.stopCause.Error())
			}
			m.r.quiet = false
			continue
		}
		// Work returned by itself.
		delay, again := time.Duration(0), false
		if m.Again != nil {
			delay, again = m.Again(m.err)
		}
		gr.release(m, delay)
		if again {
			m.r.log.Info("work returned; standing by again", "backend_pid", pid, "after", delay)
			m.r.quiet = true
			m.r.setState(StandingBy, pid, nil)
			m.r.quiet = false
			continue
		}
		m.phase, m.result = ended, m.err
		m.r.setState(Stopped, pid, nil)
		if !gr.draining {
			qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
			err := locks.UnlockShared(qctx, gr.s.main, []locks.Key{m.presence})
			cancel()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// allEnded reports Run's result once every role has ended here.
func (gr *group) allEnded() (outcome, bool) {
	var errs []error
	for _, m := range gr.members {
		if m.phase != ended {
			return outcome{}, false
		}
		if m.result != nil {
			errs = append(errs, m.result)
		}
	}
	return outcome{final: true, err: errors.Join(errs...)}, true
}

// notes acts on the notifications that arrived: requests to step down, and
// ends of terms that a role here waits for.
func (gr *group) notes(ctx context.Context) error {
	pid := gr.s.info.BackendPID
	for {
		var n *pgconn.Notification
		select {
		case n = <-gr.r.notes:
		default:
			return nil
		}
		m := gr.byChan[n.Channel]
		if m == nil {
			continue
		}
		if n.Channel == term.Channel(m.Key) {
			m.nextTermCheck = time.Time{}
			continue
		}
		req, err := locks.ParseResignRequest(n.Payload)
		if err != nil {
			m.r.log.Warn("ignoring a malformed request to step down", "err", err.Error())
			continue
		}
		if req.PID != pid {
			continue
		}
		if req.Drain && !gr.draining {
			// Marked drained before it answers: who --replicas shows it
			// from then on, never holding nothing while connected.
			if err := gr.markDrained(ctx); err != nil {
				return err
			}
		}
		actx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
		err = locks.Notify(actx, gr.s.main, locks.ResignedChannel(m.Key), locks.ResignAck{PID: pid, ID: req.ID, StopTimeoutMS: gr.r.cfg.StopTimeout.Milliseconds()})
		cancel()
		if err != nil {
			return fmt.Errorf("answer the request to step down: %w", err)
		}
		if req.Drain {
			if err := gr.drain(ctx); err != nil {
				return err
			}
			continue
		}
		if m.phase == leading || m.phase == holding || m.phase == fenced {
			m.r.log.Info("asked to step down (leasectl failover): stopping work, then releasing the key", "backend_pid", pid)
			gr.stop(m, ErrResigned, term.SteppedDown, resignHold)
		}
	}
}

// drain steps down from every role and stops taking any (leasectl
// failover --replica): the replica leads nothing until it restarts. It
// stays connected, its lease session marked drained (markDrained), and
// gives up its presence locks, so that the other replicas share the roles
// among themselves.
func (gr *group) drain(ctx context.Context) error {
	if gr.draining {
		return nil
	}
	gr.draining = true
	gr.r.log.Warn("drained (leasectl failover --replica): stepping down from every role; this replica stays connected, shown as drained by leasectl who --replicas, and takes no role until it restarts", "leading", gr.count(holding, fenced, leading))
	var presence []locks.Key
	for _, m := range gr.members {
		if m.phase != ended {
			presence = append(presence, m.presence)
		}
		gr.stop(m, ErrDrained, term.SteppedDown, 0)
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	return locks.UnlockShared(qctx, gr.s.main, presence)
}

// markDrained takes the drained mark on the lease session (locks.DrainedMark):
// who --replicas shows the replica as drained while it is connected.
func (gr *group) markDrained(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	ok, err := locks.TakeDrainedMark(qctx, gr.s.main)
	if err != nil {
		return err
	}
	if !ok {
		gr.r.log.Warn("another session holds the drained mark exclusively (a key of someone else's in leasectl's range?): leasectl who --replicas will not show this drained replica", "mark_key", locks.DrainedMark.String())
	}
	return nil
}

// evict checks, for each role waiting here, that its holder shows signs of
// life (see runner.evictStale).
func (gr *group) evict(ctx context.Context) {
	if !gr.r.record || gr.draining {
		return
	}
	for _, m := range gr.members {
		if m.phase == idle {
			m.r.evictStale(ctx, gr.s)
		}
	}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// takeFence takes the stop fence on the fence session while the lease
// session holds the key: it is free unless the previous leader's work is
// still stopping, and then it is granted the moment that leader releases
// it. Meanwhile the lease session proves its hold every second. It returns
// how long it waited.
func (r *runner) takeFence(ctx context.Context, s *sessions) (time.Duration, error) {
	start := time.Now()
	slice := min(r.cfg.HeartbeatInterval, time.Second)
	for waited := false; ; waited = true {
		ok, err := r.waitLock(ctx, s.fenceConn, r.fence, slice)
		switch {
		case ctx.Err() != nil:
			return 0, context.Cause(ctx)
		case err != nil:
			return 0, fmt.Errorf("stop fence: %w", err)
		case ok:
			// The fence session holds the fence, and the lease session
			// still holds the key: one round trip.
			if err := r.prove(s.fenceConn, r.fence, s.fenceInfo, &locks.Hold{Key: r.key, PID: s.info.BackendPID}); err != nil {
				return 0, fmt.Errorf("stop fence: %w", err)
			}
			return time.Since(start), nil
		}
		if !waited {
			r.log.Info("holding the key; waiting for the previous leader's work to stop (stop fence)", "backend_pid", s.info.BackendPID)
		}
		if err := r.prove(s.main, r.key, s.info, nil); err != nil {
			return 0, fmt.Errorf("heartbeat while waiting for the stop fence: %w", err)
		}
		r.markAlive()
	}
}

// errNotProved marks a grant that the lease session's proof refused.
var errNotProved = errors.New("the lock was granted, but")

// seize is the first step of a new holder, the moment the server granted
// the key: it proves the grant on the lease session and, with the term
// record, reads the previous term in the same round trip, while the stop
// fence session makes its first attempt at the fence and proves it: two
// sessions, one round trip each, side by side (the fence is usually free
// by then: it goes with the old program, as the key does). When the
// fence is still held, takeFence waits for it, and the reading is
// dropped: it is read again once the fence is held.
func (r *runner) seize(ctx context.Context, s *sessions) (fenceWait time.Duration, first *term.Reading, err error) {
	start := time.Now()
	type try struct {
		ok  bool
		err error
	}
	tried := make(chan try, 1)
	go func() {
		ok, err := r.waitLock(ctx, s.fenceConn, r.fence, min(r.cfg.HeartbeatInterval, time.Second))
		if ok && err == nil {
			// The fence session holds the fence, and the lease session
			// still holds the key: one round trip.
			err = r.prove(s.fenceConn, r.fence, s.fenceInfo, &locks.Hold{Key: r.key, PID: s.info.BackendPID})
		}
		tried <- try{ok, err}
	}()
	r.drainNotes() // what arrives from now on counts for the reading
	reading, err := r.proveAndRead(s)
	f := <-tried
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("%w %w", errNotProved, err)
	case ctx.Err() != nil:
		return 0, nil, context.Cause(ctx)
	case f.err != nil:
		return 0, nil, fmt.Errorf("stop fence: %w", f.err)
	case !f.ok:
		_, err := r.takeFence(ctx, s)
		return time.Since(start), nil, err
	}
	return time.Since(start), reading, nil
}

// proveAndRead proves the lease session's hold of the key and, with the
// term record, reads the key's current term in the same round trip.
func (r *runner) proveAndRead(s *sessions) (*term.Reading, error) {
	if !r.record {
		return nil, r.prove(s.main, r.key, s.info, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	var p locks.Proof
	reading := &term.Reading{}
	b := &pgx.Batch{}
	locks.QueueProof(b, r.key, nil, &p)
	term.QueueCurrent(b, r.cfg.Key, reading)
	if err := s.main.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return reading, p.Check(r.key, s.info.BackendPID, s.info.Identity(), nil)
}

// lead takes the stop fence and runs work while s holds the key, which the
// server has just granted it.
func (r *runner) lead(ctx context.Context, s *sessions) outcome {
	fenceWait, first, err := r.seize(ctx, s)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, errNotProved) {
			return outcome{final: true, err: r.release(s, context.Cause(ctx))}
		}
		return outcome{err: err}
	}
	if r.cfg.TakeoverDelay > 0 {
		r.log.Info("holding the key before starting work", "backend_pid", s.info.BackendPID, "takeover_delay", r.cfg.TakeoverDelay)
		if err := r.watch(ctx, s.main, time.Now().Add(r.cfg.TakeoverDelay)); err != nil {
			return outcome{err: err}
		}
		if ctx.Err() != nil {
			return outcome{final: true, err: r.release(s, context.Cause(ctx))}
		}
		first = nil // read again after the delay
	}
	var began term.Started
	var gap time.Duration
	if r.record {
		prev, err := r.awaitPrevious(ctx, s, first)
		if err == nil {
			began, err = r.beginTerm(ctx, s)
		}
		if err != nil {
			if ctx.Err() != nil {
				return outcome{final: true, err: r.release(s, context.Cause(ctx))}
			}
			return outcome{err: fmt.Errorf("begin a term: %w", err)}
		}
		gap = leaderless(prev, began.Began)
	}
	r.drainNotes()
	sess := &Session{Role: r.cfg.Role, Key: r.cfg.Key, BackendPID: s.info.BackendPID, FenceBackendPID: s.fenceInfo.BackendPID,
		Since: time.Now(), Epoch: began.Epoch, conn: s.main, fence: s.fenceConn}
	if r.held != nil {
		sess.TermID = r.held.id
	}
	workCtx, cancelWork := context.WithCancelCause(context.WithValue(ctx, sessionKey{}, sess))
	defer cancelWork(nil)
	workDone := make(chan struct{})
	var workErr error
	r.leading = termChange{epoch: began.Epoch, leaderless: gap}
	attrs := []any{"fence_backend_pid", s.fenceInfo.BackendPID, "fence_wait", fenceWait.Round(10 * time.Microsecond)}
	if r.held != nil {
		attrs = append(attrs, "epoch", began.Epoch)
	}
	r.setState(Leading, s.info.BackendPID, nil, attrs...)
	go func() {
		defer close(workDone)
		workErr = r.work(workCtx)
	}()
	fw := watchFence(s.fenceConn)

	var lost error
	resigned := false
	also := &locks.Hold{Key: r.fence, PID: s.fenceInfo.BackendPID}
	next := time.Now().Add(r.cfg.HeartbeatInterval)
	for {
		if err := r.watch(ctx, s.main, next, workDone, fw.lost); err != nil {
			r.cuts.note(time.Since(s.mainSent), err, s.info.Identity(), r.cfg.HeartbeatInterval)
			lost = err
			break
		}
		if req, ok := r.resignRequest(s.info.BackendPID); ok {
			actx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
			err := locks.Notify(actx, s.main, locks.ResignedChannel(r.cfg.Key), locks.ResignAck{PID: s.info.BackendPID, ID: req.ID, StopTimeoutMS: r.cfg.StopTimeout.Milliseconds()})
			cancel()
			if err != nil {
				lost = fmt.Errorf("answer the request to step down: %w", err)
				break
			}
			resigned = true
			break
		}
		select {
		case <-workDone: // work returned by itself
			fw.stop()
			return outcome{final: true, err: r.release(s, workErr)}
		case <-fw.lost:
			r.cuts.note(time.Since(s.fenceSent), fw.err, s.info.Identity(), r.cfg.HeartbeatInterval)
			lost = fmt.Errorf("the stop fence session ended: %w", fw.err)
		default:
		}
		if lost != nil {
			break
		}
		if ctx.Err() != nil {
			cancelWork(context.Cause(ctx))
			r.waitWork(workDone, "stop")
			fw.stop()
			return outcome{final: true, err: r.release(s, workErr)}
		}
		if time.Now().Before(next) {
			continue // woken by a notification that was not for us
		}
		fw.stop()
		if fw.err != nil {
			lost = fmt.Errorf("the stop fence session ended: %w", fw.err)
			break
		}
		err := r.heartbeat(s, also)
		fw = watchFence(s.fenceConn)
		if err != nil {
			lost = fmt.Errorf("heartbeat: %w", err)
			break
		}
		r.markAlive()
		next = time.Now().Add(r.cfg.HeartbeatInterval)
	}
	if resigned {
		// Stop work, then release the fence and the key: a stand-by in
		// the lock queue takes over the moment the key is free.
		r.log.Info("asked to step down (leasectl failover): stopping work, then releasing the key", "backend_pid", s.info.BackendPID)
		cancelWork(ErrResigned)
		r.waitWork(workDone, "step down")
		fw.stop()
		r.endTerm(s, term.SteppedDown)
		r.release(s, nil)
		r.setState(StandingBy, s.info.BackendPID, ErrResigned)
		return outcome{resigned: true}
	}
	// Stop work before the key can pass on: the session is gone already if
	// the server ended it, but after a failed heartbeat it may live on until
	// Close, and then the next leader must wait for us. The stop fence is
	// released only once work has returned: a new leader waits for it.
	cancelWork(&LostError{Err: lost})
	r.setState(Connecting, s.info.BackendPID, lost)
	r.waitWork(workDone, "lost")
	fw.stop()
	r.endTerm(s, term.SessionLost)
	r.releaseFence(s)
	return outcome{err: lost}
}

// resignRequest returns a pending request to step down addressed to the
// lease session of backend pid, if one arrived.
func (r *runner) resignRequest(pid uint32) (locks.ResignRequest, bool) {
	channel := locks.ResignChannel(r.cfg.Key)
	for {
		select {
		case n := <-r.notes:
			if n.Channel != channel {
				continue
			}
			req, err := locks.ParseResignRequest(n.Payload)
			if err != nil {
				r.log.Warn("ignoring a malformed request to step down", "err", err.Error())
				continue
			}
			if req.PID == pid {
				return req, true
			}
		default:
			return locks.ResignRequest{}, false
		}
	}
}

// drainNotes drops notifications that arrived before this session led:
// requests to step down name the leader they were meant for.
func (r *runner) drainNotes() {
	for {
		select {
		case <-r.notes:
		default:
			return
		}
	}
}

// watch reads the idle lease connection until `until`, until one of wake
// is closed, a notification arrives or ctx ends (nil error), or until the
// connection fails (the error). The server's FATAL for a terminated
// session, or EOF, ends the read at once; a deadline or cancel interrupts
// pgconn's WaitForNotification without closing the connection (pgx treats
// read timeouts as non-fatal).
func (r *runner) watch(ctx context.Context, conn *pgx.Conn, until time.Time, wake ...<-chan struct{}) error {
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	if len(r.notes) > 0 {
		return nil
	}
	stop := make(chan struct{})
	defer close(stop)
	for _, ch := range wake {
		if ch == nil {
			continue
		}
		go func() {
			select {
			case <-ch:
				cancel()
			case <-stop:
			}
		}()
	}
	err := conn.PgConn().WaitForNotification(wctx)
	switch {
	case err == nil:
		return nil // a notification: the caller looks at it
	case wctx.Err() != nil && !conn.IsClosed() && (pgconn.Timeout(err) || errors.Is(err, context.Canceled)):
		return nil
	default:
		return fmt.Errorf("session ended: %w", err)
	}
}

// fenceWatch reads the idle stop fence session while work runs, so that its
// loss (the server ended it) is seen at once.
type fenceWatch struct {
	lost   chan struct{} // closed when the session failed
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

func watchFence(conn *pgx.Conn) *fenceWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &fenceWatch{lost: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			err := conn.PgConn().WaitForNotification(ctx)
			switch {
			case err == nil:
				continue
			case ctx.Err() != nil && !conn.IsClosed():
				return
			default:
				w.err = err
				close(w.lost)
				return
			}
		}
	}()
	return w
}

// stop ends the reading, so that the session can run statements again.
func (w *fenceWatch) stop() {
	w.cancel()
	<-w.done
}

// waitWork waits until work has returned, and says so loudly when that takes
// longer than StopTimeout: the timing rule assumes it does not.
func (r *runner) waitWork(done <-chan struct{}, why string) {
	t := time.NewTimer(r.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
		r.log.Error("work has not returned within StopTimeout after it was cancelled; still waiting (if the lease was lost, another replica may already lead)",
			"stop_timeout", r.cfg.StopTimeout, "why", why)
	}
	<-done
}

// release records the end of the held term, unlocks the stop fence and
// then the key (Run closes the sessions afterwards) and returns result.
func (r *runner) release(s *sessions, result error) error {
	r.endTerm(s, term.Released)
	r.releaseFence(s)
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	if _, err := locks.UnlockKey(ctx, s.main, r.key); err != nil {
		// Closing the connection ends the session, which releases it too.
		r.log.Warn("unlock failed; closing the session releases the key", "err", err.Error())
	}
	return result
}

// releaseFence unlocks the stop fence: work has stopped.
func (r *runner) releaseFence(s *sessions) {
	if s.fenceConn.IsClosed() {
		return // the server released it with the session
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	if _, err := locks.UnlockKey(ctx, s.fenceConn, r.fence); err != nil {
		r.log.Warn("releasing the stop fence failed; closing its session releases it", "err", err.Error())
		_ = s.fenceConn.Close(ctx)
	}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
)

// Run holds the lease described by cfg and calls work while it does, until
// ctx ends or work returns.
//
// work gets a context that is cancelled the moment the lease is lost
// (context.Cause is a *LostError), the leader is asked to step down
// ([ErrResigned]) or ctx ends; [SessionFrom] gives it the lease's session.
// After a loss Run waits for work to return, reconnects, stands by and calls
// work again when it leads again.
//
// Run returns when work returns by itself: it releases the key and returns
// what work returned. When ctx ends while work runs, Run cancels work, waits
// for it, releases the key and returns what work returned; when ctx ends
// while standing by, it returns context.Cause(ctx). A *ConfigError or a
// *dbconn.DSNError is returned at once. Failures to connect, refusals and
// losses are not returned: Run logs them and keeps trying.
func Run(ctx context.Context, cfg Config, work func(ctx context.Context) error) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	r := &runner{cfg: c, work: work, key: locks.BigintKey(c.Key), fence: locks.BigintKey(c.Key).Fence(),
		log:   c.Logger.With("role", c.Role, "key", c.Key),
		notes: make(chan *pgconn.Notification, 16)}
	r.mainCfg, r.fenceCfg = c.sessionConfigs(r.onNotification)
	defer r.setState(Stopped, 0, nil)
	return r.run(ctx)
}

type runner struct {
	cuts idleCuts
	// goodConnect is how long the last successful connect took.
	goodConnect time.Duration
	cfg         Config
	work        func(context.Context) error
	key, fence  locks.Key
	log         *slog.Logger
	state       State
	// mainCfg and fenceCfg open the lease session and the stop fence
	// session.
	mainCfg, fenceCfg *pgx.ConnConfig
	// notes are the notifications the lease session received: requests
	// to step down.
	notes chan *pgconn.Notification
	// primary is the host a search last found to be the primary, tried
	// first by the next connections; empty before any search.
	primary hostPort
}

// sessions are one connection attempt's two server sessions: the lease
// session, which waits for and holds the key, and the stop fence session,
// which holds the key's fence while work runs (see locks.Key.Fence).
type sessions struct {
	main, fenceConn *pgx.Conn
	info, fenceInfo dbconn.ServerInfo
	// mainSent and fenceSent are when a statement was last sent on each
	// session: how long a session was silent when it ended.
	mainSent, fenceSent time.Time
}

func (s *sessions) close(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Terminate: the server ends the sessions, and any hold with them.
	for _, c := range []*pgx.Conn{s.main, s.fenceConn} {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
}

// outcome is how one connection's stand-by and leadership ended.
type outcome struct {
	final    bool  // Run returns err
	resigned bool  // stepped down on request: stand by again on the same sessions
	err      error // why the connection ended, or Run's result when final
}

func (r *runner) setState(to State, pid uint32, err error, attrs ...any) {
	if to == r.state {
		return
	}
	ch := Change{From: r.state, To: to, Role: r.cfg.Role, Key: r.cfg.Key, BackendPID: pid, Err: err, At: time.Now()}
	r.state = to
	attrs = append([]any{"state", string(to), "backend_pid", pid}, attrs...)
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	switch to {
	case Refused:
		r.log.Error("refusing to lead over this connection", attrs...)
	case Connecting:
		if ch.From == Leading {
			r.log.Warn("lease lost; stopping work", attrs...)
		} else {
			r.log.Info("connecting", attrs...)
		}
	case Leading:
		r.log.Info("leading", attrs...)
	case StandingBy:
		if ch.From == Leading {
			r.log.Info("stepped down on request; standing by again", attrs...)
		} else {
			r.log.Info("standing by", attrs...)
		}
	case Stopped:
		r.log.Info("stopped", attrs...)
	}
	if r.cfg.OnStateChange != nil {
		r.cfg.OnStateChange(ch)
	}
}

func (r *runner) heartbeat() {
	if r.cfg.OnHeartbeat != nil {
		r.cfg.OnHeartbeat(time.Now())
	}
}

// onNotification receives the lease session's notifications, whenever pgx
// reads them (during a statement too); the lead loop looks at them.
func (r *runner) onNotification(_ *pgconn.PgConn, n *pgconn.Notification) {
	select {
	case r.notes <- n:
	default: // full of requests nobody acted on: drop
	}
}

func (r *runner) run(ctx context.Context) error {
	var lastErr error
	failures := 0
	// searchUntil ends the search for a primary that follows the loss of a
	// working session (see search).
	var searchUntil time.Time
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.setState(Connecting, 0, lastErr)
		// While searching, an attempt that takes much longer than a good
		// connect did is abandoned: a load balancer may hold it on a
		// server that is going away (HAProxy retries a refused server
		// after a second) while the new primary is already up.
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if time.Now().Before(searchUntil) && r.goodConnect > 0 {
			cctx, cancel = context.WithTimeout(ctx, min(max(4*r.goodConnect, 300*time.Millisecond), r.cfg.HeartbeatTimeout))
		}
		began := time.Now()
		s, err := r.connect(cctx)
		cancel()
		if err == nil {
			r.goodConnect = time.Since(began)
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			lastErr = err
			var refused *RefusedError
			inSearch := time.Now().Before(searchUntil)
			switch {
			case errors.As(err, &refused):
				r.setState(Refused, refused.BackendPID, err)
				// A standby during an HA failover (a load balancer still
				// routing to the old primary) is worth a close look again.
				wait := r.cfg.RetryInterval
				if inSearch && refused.Standby {
					wait = pollInterval
				}
				if !sleep(ctx, wait) {
					return context.Cause(ctx)
				}
			case inSearch:
				// Right after a loss the primary is usually back, or a
				// standby promoted, within seconds: look for it closely.
				if failures == 0 {
					r.log.Warn("cannot connect; searching for a primary", "err", err.Error(), "until", searchUntil.Format(time.RFC3339))
				}
				failures++
				if !r.search(ctx, searchUntil) {
					return context.Cause(ctx)
				}
			default:
				delay := r.backoff(failures)
				failures++
				r.log.Warn("cannot connect; retrying", "err", err.Error(), "retry_in", delay.Round(time.Millisecond))
				if !sleep(ctx, delay) {
					return context.Cause(ctx)
				}
			}
			continue
		}
		failures = 0
		out := r.onConnection(ctx, s)
		s.close(r.cfg.HeartbeatTimeout)
		if out.final {
			return out.err
		}
		lastErr = out.err
		searchUntil = time.Now().Add(SearchWindow)
	}
}

// backoff is the wait before reconnect attempt n+1: 100 ms doubling, at most
// RetryInterval, with jitter so that replicas do not reconnect in step.
func (r *runner) backoff(n int) time.Duration {
	d := r.cfg.RetryInterval
	if n < 16 {
		d = min(d, 100*time.Millisecond<<n)
	}
	return time.Duration(float64(d) * (0.75 + rand.Float64()/4))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// open connects one session and reads which server and backend it reached.
func (r *runner) open(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, dbconn.ServerInfo, error) {
	var info dbconn.ServerInfo
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = r.cfg.HeartbeatTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dbconn.Connect(cctx, cfg)
	if err != nil {
		return nil, info, err
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	if info, err = dbconn.Server(qctx, conn); err != nil {
		conn.Close(context.WithoutCancel(cctx))
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w (connected, but the first statement got no answer within the heartbeat timeout %s: a pooler with no free server connection, or an overloaded server?)", err, r.cfg.HeartbeatTimeout)
		}
		return nil, info, err
	}
	return conn, info, nil
}

// connect opens the lease session and decides whether it may lead: the
// server must be a primary and the preflight must pass. Only then does it
// apply the session's settings, LISTEN for requests to step down, and set
// up the stop fence session, which must reach the same server. The two
// sessions and the preflight's probe connect at the same time: a reconnect
// costs about one connection setup, not three.
func (r *runner) connect(ctx context.Context) (_ *sessions, err error) {
	s := &sessions{}
	defer func() {
		if err != nil {
			s.close(r.cfg.HeartbeatTimeout)
		}
	}()
	type opened struct {
		conn *pgx.Conn
		info dbconn.ServerInfo
		err  error
	}
	fenceCh, probeCh := make(chan opened, 1), make(chan error, 1)
	go func() {
		var o opened
		o.conn, o.info, o.err = r.open(ctx, preferHost(r.fenceCfg, r.primary))
		fenceCh <- o
	}()
	go func() { probeCh <- r.cfg.Preflight(ctx, preferHost(r.cfg.ConnConfig, r.primary)) }()
	s.main, s.info, err = r.open(ctx, preferHost(r.mainCfg, r.primary))
	fence := <-fenceCh
	s.fenceConn, s.fenceInfo = fence.conn, fence.info
	probeErr := <-probeCh
	switch {
	case err != nil:
		return nil, err
	case fence.err != nil:
		return nil, fmt.Errorf("open the stop fence session: %w", fence.err)
	}
	r.log.Info("connected", "backend_pid", s.info.BackendPID, "server", s.info.Addr, "port", s.info.Port, "version", s.info.VersionNum)
	if s.info.InRecovery {
		return nil, &RefusedError{BackendPID: s.info.BackendPID, Standby: true, Reason: "the server is a standby (pg_is_in_recovery): advisory locks there fence nothing on the primary; point the DSN at the primary (target_session_attrs=primary)"}
	}
	if probeErr != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		reason := "the session-stability probe refused this DSN: a lease over it could have two leaders"
		var pe *ProbeError
		standby := false
		if errors.As(probeErr, &pe) {
			if pe.Report.Refusal != probe.Safety {
				reason = "the session-stability probe refused this DSN: a lease over it would not work"
			}
			c, _ := pe.Report.Check(probe.CheckPrimary)
			standby = c.Status == probe.Fail
		}
		return nil, &RefusedError{BackendPID: s.info.BackendPID, Standby: standby, Reason: reason, Err: probeErr}
	}
	if !s.fenceInfo.Identity().SameServer(s.info.Identity()) || s.fenceInfo.InRecovery {
		return nil, &RefusedError{BackendPID: s.info.BackendPID, Standby: true, Reason: fmt.Sprintf("a second connection over this DSN reached another server (%s) than the first (%s): a load balancer or proxy spreads connections over servers, where each holds its own locks", s.fenceInfo.Identity(), s.info.Identity())}
	}
	tcp := r.cfg.timing().ServerTCP(r.cfg.ServerTimeout)
	sctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	if err := setupSession(sctx, s.main, s.info.VersionNum, tcp); err != nil {
		return nil, err
	}
	if err := locks.Listen(sctx, s.main, locks.ResignChannel(r.cfg.Key)); err != nil {
		return nil, err
	}
	if err := setupSession(sctx, s.fenceConn, s.fenceInfo.VersionNum, tcp); err != nil {
		return nil, fmt.Errorf("stop fence session: %w", err)
	}
	s.mainSent, s.fenceSent = time.Now(), time.Now()
	r.heartbeat()
	return s, nil
}

// onConnection stands by on s and leads when it gets the key; after
// stepping down on request it stands by again on the same sessions.
func (r *runner) onConnection(ctx context.Context, s *sessions) outcome {
	r.setState(StandingBy, s.info.BackendPID, nil)
	for {
		// lock_timeout bounds each wait on the server; the client's own
		// deadline, a heartbeat timeout later, catches a dead network.
		s.mainSent = time.Now()
		ok, err := r.waitLock(ctx, s.main, r.key, r.cfg.HeartbeatInterval)
		switch {
		case ctx.Err() != nil:
			return outcome{final: true, err: context.Cause(ctx)}
		case err != nil:
			r.cuts.note(r.log, time.Since(s.mainSent), err, r.cfg.HeartbeatInterval)
			return outcome{err: fmt.Errorf("stand by: %w", err)}
		case !ok:
			// The fence session is idle while standing by: a statement
			// keeps proxies that cut idle connections from ending it.
			if err := r.pingFence(s); err != nil {
				return outcome{err: err}
			}
			r.heartbeat()
			continue
		}
		// The server says the key is granted; prove that it is this
		// session that holds it, on this server. If not, the key may be
		// held on someone else's backend: never unlock it from here, just
		// close the sessions.
		if err := r.prove(s.main, r.key, s.info, nil); err != nil {
			return outcome{err: fmt.Errorf("the lock was granted, but %w", err)}
		}
		out := r.lead(ctx, s)
		if !out.resigned {
			return out
		}
		// Stepped down on request. The server granted the key to the first
		// stand-by in its queue the moment it was released, so waiting for
		// it again now queues behind them; only with no stand-by waiting
		// does this replica lead again.
	}
}

// waitLock waits for key on conn for at most timeout (see locks.WaitLock).
// When ctx ends it closes conn's socket rather than cancel the statement.
func (r *runner) waitLock(ctx context.Context, conn *pgx.Conn, key locks.Key, timeout time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+r.cfg.HeartbeatTimeout)
	defer cancel()
	release := closeOnDone(ctx, conn)
	defer release()
	return locks.WaitLock(wctx, conn, key, timeout)
}

// prove runs one proof on conn (locks.Prove): it ran on the session's own
// backend on its own server, a primary, which holds key (and also, when
// not nil). The error says what did not hold.
func (r *runner) prove(conn *pgx.Conn, key locks.Key, info dbconn.ServerInfo, also *locks.Hold) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	p, err := locks.Prove(ctx, conn, key, also)
	if err != nil {
		return err
	}
	return p.Check(key, info.BackendPID, info.Identity(), also)
}

// pingFence runs a statement on the idle fence session of a stand-by and
// checks that it still runs on its own backend of the same server.
func (r *runner) pingFence(s *sessions) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	sent := time.Now()
	p, err := locks.Prove(ctx, s.fenceConn, r.fence, nil)
	if err != nil {
		r.cuts.note(r.log, sent.Sub(s.fenceSent), err, r.cfg.HeartbeatInterval)
		return fmt.Errorf("stop fence session: %w", err)
	}
	s.fenceSent = sent
	if p.PID != s.fenceInfo.BackendPID || !p.Server.SameServer(s.fenceInfo.Identity()) {
		return fmt.Errorf("stop fence session: its statement ran on backend pid %d of %s, not its own pid %d: something between client and server moves its statements", p.PID, p.Server, s.fenceInfo.BackendPID)
	}
	return nil
}

// heartbeatBoth proves, at the same time, that the lease session holds the
// key (and the fence session the fence) and that the fence session holds
// the fence on its own backend: one round trip, and neither session is
// ever idle for longer than a heartbeat interval.
func (r *runner) heartbeatBoth(s *sessions, also *locks.Hold) error {
	fenceErr := make(chan error, 1)
	go func() {
		sent := time.Now()
		err := r.prove(s.fenceConn, r.fence, s.fenceInfo, nil)
		if err == nil {
			s.fenceSent = sent
		}
		fenceErr <- err
	}()
	s.mainSent = time.Now()
	err := r.prove(s.main, r.key, s.info, also)
	if ferr := <-fenceErr; err == nil && ferr != nil {
		err = fmt.Errorf("stop fence session: %w", ferr)
	}
	return err
}

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
		r.heartbeat()
	}
}

// lead takes the stop fence and runs work while s holds the key.
func (r *runner) lead(ctx context.Context, s *sessions) outcome {
	fenceWait, err := r.takeFence(ctx, s)
	if err != nil {
		if ctx.Err() != nil {
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
	}
	r.drainNotes()
	sess := &Session{Role: r.cfg.Role, Key: r.cfg.Key, BackendPID: s.info.BackendPID, FenceBackendPID: s.fenceInfo.BackendPID,
		Since: time.Now(), conn: s.main, fence: s.fenceConn}
	workCtx, cancelWork := context.WithCancelCause(context.WithValue(ctx, sessionKey{}, sess))
	defer cancelWork(nil)
	workDone := make(chan struct{})
	var workErr error
	r.setState(Leading, s.info.BackendPID, nil, "fence_backend_pid", s.fenceInfo.BackendPID, "fence_wait", fenceWait.Round(10*time.Microsecond))
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
			r.cuts.note(r.log, time.Since(s.mainSent), err, r.cfg.HeartbeatInterval)
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
			r.cuts.note(r.log, time.Since(s.fenceSent), fw.err, r.cfg.HeartbeatInterval)
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
		err := r.heartbeatBoth(s, also)
		fw = watchFence(s.fenceConn)
		if err != nil {
			lost = fmt.Errorf("heartbeat: %w", err)
			break
		}
		r.heartbeat()
		next = time.Now().Add(r.cfg.HeartbeatInterval)
	}
	if resigned {
		// Stop work, then release the fence and the key: a stand-by in
		// the lock queue takes over the moment the key is free.
		r.log.Info("asked to step down (leasectl failover): stopping work, then releasing the key", "backend_pid", s.info.BackendPID)
		cancelWork(ErrResigned)
		r.waitWork(workDone, "step down")
		fw.stop()
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

// release unlocks the stop fence and then the key (Run closes the sessions
// afterwards) and returns result.
func (r *runner) release(s *sessions, result error) error {
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

// closeOnDone closes conn's socket when ctx ends, until the returned
// function is called. It interrupts a statement that waits on the server
// (pg_advisory_lock) without a cancel request (see dbconn.Connect): the
// server sees the closed socket within client_connection_check_interval,
// which the lease sets on its sessions, and the waiter leaves the queue.
func closeOnDone(ctx context.Context, conn *pgx.Conn) (release func()) {
	stop := context.AfterFunc(ctx, func() { _ = conn.PgConn().Conn().Close() })
	return func() { stop() }
}

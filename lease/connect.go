package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
)

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
// sessions connect at the same time, and the probe runs on the lease
// session with one more connection of its own: a reconnect needs three
// connections, and costs about two connection setups.
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
	if r.loginRefusals > 0 {
		// The server refused the last logins: try one before three.
		if s.main, s.info, err = r.open(ctx, preferHost(r.mainCfg, r.primary)); err != nil {
			return nil, err
		}
	}
	fenceCh, probeCh := make(chan opened, 1), make(chan error, 1)
	go func() {
		var o opened
		o.conn, o.info, o.err = r.open(ctx, preferHost(r.fenceCfg, r.primary))
		fenceCh <- o
	}()
	if r.cfg.Preflight != nil {
		go func() { probeCh <- r.cfg.Preflight(ctx, preferHost(r.cfg.ConnConfig, r.primary)) }()
	}
	if s.main == nil {
		s.main, s.info, err = r.open(ctx, preferHost(r.mainCfg, r.primary))
	}
	var probeErr error
	switch {
	case r.cfg.Preflight != nil:
		probeErr = <-probeCh
	case err == nil && !s.info.InRecovery:
		// A new leader may be waiting for the end of a term this runner
		// lost: record it first (a row update is safe over any
		// connection). Then the probe, whose connection A is the lease
		// session itself: a reconnect needs three connections, not four.
		r.onPending(ctx, s.main)
		probeErr = r.probe(ctx, s.main, preferHost(r.cfg.ConnConfig, r.primary))
	}
	fence := <-fenceCh
	s.fenceConn, s.fenceInfo = fence.conn, fence.info
	switch {
	case err != nil:
		return nil, fullHint(err)
	case fence.err != nil:
		return nil, fullHint(fmt.Errorf("open the stop fence session: %w", fence.err))
	}
	r.log.Info("connected", "backend_pid", s.info.BackendPID, "server", s.info.Addr, "port", s.info.Port, "version", s.info.VersionNum)
	if s.info.InRecovery {
		return nil, &RefusedError{BackendPID: s.info.BackendPID, Standby: true, Reason: "the server is a standby (pg_is_in_recovery): advisory locks there fence nothing on the primary; point the DSN at the primary (target_session_attrs=primary)"}
	}
	r.onPending(ctx, s.main) // with a preflight of its own
	if probeErr != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		var pe *ProbeError
		if !errors.As(probeErr, &pe) && dbconn.Unavailable(probeErr) {
			// The probe could not run (the server is full, say): no
			// verdict, and no refusal.
			return nil, fullHint(fmt.Errorf("the session-stability probe: %w", probeErr))
		}
		reason := "the session-stability probe refused this DSN: a lease over it could have two leaders"
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
	if err := locks.ListenAll(sctx, s.main, r.listen); err != nil {
		return nil, err
	}
	// The lease mark, before any key: it tells who, failover and the other
	// replicas that this session is a lease (locks.TakeMark).
	if marked, err := locks.TakeMark(sctx, s.main, r.cfg.timing().Stopped()); err != nil {
		return nil, err
	} else if !marked && !r.markRefused {
		r.markRefused = true
		r.log.Warn("another session holds this lease's mark lock exclusively (a key of someone else's in leasectl's range?): who, failover and the other replicas judge this lease as any elector's session", "mark", locks.MarkOf(r.cfg.timing().Stopped()).String())
	}
	r.record = r.checkRecord(sctx, s)
	if !r.record && r.cfg.Fencing {
		return nil, &RefusedError{BackendPID: s.info.BackendPID, Reason: "fencing needs the term record (schema leasectl with leasectl.fence), which is missing here or which this role may not use: run `leasectl fence init` (as a role that may create it; --print-sql for migrations), or grant this role its use"}
	}
	if err := r.warm(sctx, s); err != nil {
		return nil, err
	}
	if err := setupSession(sctx, s.fenceConn, s.fenceInfo.VersionNum, tcp); err != nil {
		return nil, fmt.Errorf("stop fence session: %w", err)
	}
	s.mainSent, s.fenceSent = time.Now(), time.Now()
	r.markAlive()
	return s, nil
}

// warm readies, now, once per connection, what a takeover runs on s's
// fresh backends the moment the key is granted: it prepares the
// statements of both sessions (locks.Ready), runs the proof on the lease
// session, and with the term record readies its statements too
// (term.WarmTakeover). A new backend's first run of each costs several
// milliseconds of parsing and catalog lookups, which would otherwise all
// fall between the grant and the start of the work.
func (r *runner) warm(ctx context.Context, s *sessions) error {
	for _, c := range []*pgx.Conn{s.main, s.fenceConn} {
		if err := locks.Ready(ctx, c); err != nil {
			return err
		}
	}
	if _, err := locks.Prove(ctx, s.main, r.key, nil); err != nil {
		return err
	}
	if !r.record {
		return nil
	}
	return term.WarmTakeover(ctx, s.main, r.cfg.Key)
}

// onPending records the ends of terms lost with earlier sessions, on conn.
func (r *runner) onPending(ctx context.Context, conn *pgx.Conn) {
	if r.pending != nil {
		r.pending(ctx, conn)
		return
	}
	r.recordPending(ctx, conn)
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

// fullHint says what a lease needs when the server refused a connection
// for want of a slot.
func fullHint(err error) error {
	if dbconn.TooManyConnections(err) {
		return fmt.Errorf("%w (the server has no connection slot left: a lease needs three at a reconnect, its session, the stop fence and the probe's, and keeps two)", err)
	}
	return err
}

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
)

// Run holds the lease described by cfg and calls work while it does, until
// ctx ends or work returns.
//
// work gets a context that is cancelled the moment the lease is lost
// (context.Cause is a *LostError) or ctx ends; [SessionFrom] gives it the
// lease's session. After a loss Run waits for work to return, reconnects,
// stands by and calls work again when it leads again.
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
	r := &runner{cfg: c, work: work,
		log: c.Logger.With("role", c.Role, "key", c.Key)}
	defer r.setState(Stopped, 0, nil)
	return r.run(ctx)
}

type runner struct {
	cfg   Config
	work  func(context.Context) error
	log   *slog.Logger
	state State
}

// outcome is how one connection's stand-by and leadership ended.
type outcome struct {
	final bool  // Run returns err
	err   error // why the connection ended, or Run's result when final
}

func (r *runner) setState(to State, pid uint32, err error) {
	if to == r.state {
		return
	}
	ch := Change{From: r.state, To: to, Role: r.cfg.Role, Key: r.cfg.Key, BackendPID: pid, Err: err, At: time.Now()}
	r.state = to
	attrs := []any{"state", string(to), "backend_pid", pid}
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
		r.log.Info("standing by", attrs...)
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

func (r *runner) run(ctx context.Context) error {
	var lastErr error
	failures := 0
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.setState(Connecting, 0, lastErr)
		conn, info, err := r.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			lastErr = err
			delay := r.backoff(failures)
			failures++
			var refused *RefusedError
			if errors.As(err, &refused) {
				r.setState(Refused, info.BackendPID, err)
				delay = r.cfg.RetryInterval
			} else {
				r.log.Warn("cannot connect; retrying", "err", err.Error(), "retry_in", delay.Round(time.Millisecond).String())
			}
			if !sleep(ctx, delay) {
				return context.Cause(ctx)
			}
			continue
		}
		failures = 0
		out := r.onConnection(ctx, conn, info)
		closeCtx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
		_ = conn.Close(closeCtx) // Terminate: the server ends the session, and any hold with it
		cancel()
		if out.final {
			return out.err
		}
		lastErr = out.err
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

// connect opens the lease connection and decides whether it may lead: the
// server must be a primary and the preflight must pass. Only then does it
// apply the session's settings.
func (r *runner) connect(ctx context.Context) (*pgx.Conn, dbconn.ServerInfo, error) {
	var info dbconn.ServerInfo
	timeout := r.cfg.ConnConfig.ConnectTimeout
	if timeout <= 0 {
		timeout = r.cfg.HeartbeatTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dbconn.Connect(cctx, r.cfg.ConnConfig)
	if err != nil {
		return nil, info, err
	}
	fail := func(err error) (*pgx.Conn, dbconn.ServerInfo, error) {
		conn.Close(context.WithoutCancel(cctx))
		return nil, info, err
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	if info, err = dbconn.Server(qctx, conn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w (connected, but the first statement got no answer within the heartbeat timeout %s: a pooler with no free server connection, or an overloaded server?)", err, r.cfg.HeartbeatTimeout)
		}
		return fail(err)
	}
	r.log.Info("connected", "backend_pid", info.BackendPID, "server", info.Addr, "port", info.Port, "version", info.VersionNum)
	if info.InRecovery {
		return fail(&RefusedError{Reason: "the server is a standby (pg_is_in_recovery): advisory locks there fence nothing on the primary; point the DSN at the primary (target_session_attrs=primary)"})
	}
	if err := r.cfg.Preflight(ctx, r.cfg.ConnConfig); err != nil {
		if ctx.Err() != nil {
			return fail(context.Cause(ctx))
		}
		return fail(&RefusedError{Reason: "the session-stability probe refused this DSN: a lease over it could have two leaders", Err: err})
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
	defer cancel()
	if err := setupSession(sctx, conn, info.VersionNum, r.cfg.timing().ServerTCP(r.cfg.ServerTimeout)); err != nil {
		return fail(err)
	}
	r.heartbeat()
	return conn, info, nil
}

// onConnection stands by on conn and leads when it gets the key.
func (r *runner) onConnection(ctx context.Context, conn *pgx.Conn, info dbconn.ServerInfo) outcome {
	r.setState(StandingBy, info.BackendPID, nil)
	for {
		// lock_timeout bounds each wait on the server; the client's own
		// deadline, a heartbeat timeout later, catches a dead network.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.HeartbeatInterval+r.cfg.HeartbeatTimeout)
		release := closeOnDone(ctx, conn)
		ok, err := locks.WaitLock(wctx, conn, r.cfg.Key, r.cfg.HeartbeatInterval)
		release()
		cancel()
		switch {
		case ctx.Err() != nil:
			return outcome{final: true, err: context.Cause(ctx)}
		case err != nil:
			return outcome{err: fmt.Errorf("stand by: %w", err)}
		case !ok:
			r.heartbeat()
			continue
		}
		return r.lead(ctx, conn, info)
	}
}

// lead runs work while conn holds the key.
func (r *runner) lead(ctx context.Context, conn *pgx.Conn, info dbconn.ServerInfo) outcome {
	if r.cfg.TakeoverDelay > 0 {
		r.log.Info("holding the key before starting work", "backend_pid", info.BackendPID, "takeover_delay", r.cfg.TakeoverDelay.String())
		if err := r.watch(ctx, conn, time.Now().Add(r.cfg.TakeoverDelay), nil); err != nil {
			return outcome{err: err}
		}
		if ctx.Err() != nil {
			return outcome{final: true, err: r.release(conn, context.Cause(ctx))}
		}
	}
	sess := &Session{Role: r.cfg.Role, Key: r.cfg.Key, BackendPID: info.BackendPID, Since: time.Now(), conn: conn}
	workCtx, cancelWork := context.WithCancelCause(context.WithValue(ctx, sessionKey{}, sess))
	defer cancelWork(nil)
	workDone := make(chan struct{})
	var workErr error
	r.setState(Leading, info.BackendPID, nil)
	go func() {
		defer close(workDone)
		workErr = r.work(workCtx)
	}()

	var lost error
	for {
		err := r.watch(ctx, conn, time.Now().Add(r.cfg.HeartbeatInterval), workDone)
		if err != nil {
			lost = err
			break
		}
		select {
		case <-workDone: // work returned by itself
			return outcome{final: true, err: r.release(conn, workErr)}
		default:
		}
		if ctx.Err() != nil {
			cancelWork(context.Cause(ctx))
			r.waitWork(workDone, "stop")
			return outcome{final: true, err: r.release(conn, workErr)}
		}
		hctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
		_, err = conn.Exec(hctx, "SELECT 1")
		cancel()
		if err != nil {
			lost = fmt.Errorf("heartbeat: %w", err)
			break
		}
		r.heartbeat()
	}
	// Stop work before the key can pass on: the session is gone already if
	// the server ended it, but after a failed heartbeat it may live on until
	// Close, and then the next leader must wait for us.
	cancelWork(&LostError{Err: lost})
	r.setState(Connecting, info.BackendPID, lost)
	r.waitWork(workDone, "lost")
	return outcome{err: lost}
}

// watch reads the idle lease connection until `until`, until interrupt is
// closed or ctx ends (nil error), or until the connection fails (the error).
// The server's FATAL for a terminated session, or EOF, ends the read at
// once; a deadline or cancel interrupts pgconn's WaitForNotification
// without closing the connection (pgx treats read timeouts as non-fatal).
func (r *runner) watch(ctx context.Context, conn *pgx.Conn, until time.Time, interrupt <-chan struct{}) error {
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	if interrupt != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-interrupt:
				cancel()
			case <-stop:
			}
		}()
	}
	for {
		err := conn.PgConn().WaitForNotification(wctx)
		switch {
		case err == nil:
			continue // a notification: nothing on this session LISTENs, ignore it
		case wctx.Err() != nil && !conn.IsClosed() && (pgconn.Timeout(err) || errors.Is(err, context.Canceled)):
			return nil
		default:
			return fmt.Errorf("session ended: %w", err)
		}
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
			"stop_timeout", r.cfg.StopTimeout.String(), "why", why)
	}
	<-done
}

// release unlocks the key on conn (Run closes conn afterwards) and returns
// result.
func (r *runner) release(conn *pgx.Conn, result error) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	if _, err := locks.Unlock(ctx, conn, r.cfg.Key); err != nil {
		// Closing the connection ends the session, which releases it too.
		r.log.Warn("unlock failed; closing the session releases the key", "err", err.Error())
	}
	return result
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

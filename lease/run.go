package lease

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
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
// *DSNError is returned at once. Failures to connect, refusals and
// losses are not returned: Run logs them and keeps trying.
func Run(ctx context.Context, cfg Config, work func(ctx context.Context) error) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	r := &runner{cfg: c, work: work, key: locks.BigintKey(c.Key), fence: locks.BigintKey(c.Key).Fence(),
		log:   c.Logger.With("role", c.Role, "key", c.Key),
		notes: make(chan *pgconn.Notification, 16)}
	r.mainCfg, r.fenceCfg = c.sessionConfigs(r.onNotification, fenceSuffix)
	r.listen = []string{locks.ResignChannel(c.Key), term.Channel(c.Key)}
	defer r.setState(Stopped, 0, nil)
	defer r.recordPendingOnExit()
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

	// record says the term record is usable on the current connection;
	// held is the term this runner holds while it leads, pendingEnd one
	// whose end it has yet to record (see term.go).
	record     bool
	held       *heldTerm
	pendingEnd *pendingEnd
	// loginRefusals counts the logins the server refused in a row (see
	// dbconn.LoginRefused): while it is not 0, a connect opens the lease
	// session alone first.
	loginRefusals int
	// leading is the term of the change to Leading about to be reported.
	leading termChange
	// evictDenied: the server refused to end a stale holder's session,
	// which was logged once.
	evictDenied bool
	// markRefused: another session held the lease mark exclusively, which
	// was logged once.
	markRefused bool

	// listen are the channels the lease session LISTENs on. A group's
	// runner (group.go) also sets serve, which replaces onConnection,
	// pending, which replaces recordPending at a connect, and broadcast,
	// which passes its state changes on to the roles; quiet makes
	// setState report without logging.
	listen    []string
	serve     func(ctx context.Context, s *sessions) outcome
	pending   func(ctx context.Context, conn *pgx.Conn)
	broadcast func(to State, pid uint32, err error)
	quiet     bool
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
	if to == Leading {
		ch.Epoch, ch.Leaderless = r.leading.epoch, r.leading.leaderless
	}
	r.state = to
	attrs = append([]any{"state", string(to), "backend_pid", pid}, attrs...)
	// A step-down on request is not a failure: the message says why.
	if err != nil && !(to == StandingBy && errors.Is(err, ErrResigned)) {
		attrs = append(attrs, "err", err.Error())
	}
	switch {
	case r.quiet:
	case r.broadcast != nil:
		r.log.Info(string(to), attrs...)
	default:
		r.logState(ch, to, attrs)
	}
	if r.broadcast != nil {
		r.broadcast(to, pid, err)
		return
	}
	if r.cfg.OnStateChange != nil {
		r.cfg.OnStateChange(ch)
	}
}

// logState logs a state change of a lease.
func (r *runner) logState(ch Change, to State, attrs []any) {
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
			r.cuts.reached(r.log, s.info.Identity())
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
			case dbconn.LoginRefused(err):
				// A role that may not log in, a wrong password, a missing
				// database: each attempt is a failed login in the
				// server's log (and often an alert), and retrying at once
				// cannot fix it. Back off, and open only the lease session
				// until a login succeeds.
				delay := r.backoff(r.loginRefusals)
				r.loginRefusals++
				r.log.Warn("the server refused the login; backing off", "err", err.Error(), "retry_in", delay.Round(time.Millisecond))
				if !sleep(ctx, delay) {
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
		failures, r.loginRefusals = 0, 0
		serve := r.onConnection
		if r.serve != nil {
			serve = r.serve
		}
		out := serve(ctx, s)
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

package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
)

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
			r.cuts.note(time.Since(s.mainSent), err, s.info.Identity(), r.cfg.HeartbeatInterval)
			return outcome{err: fmt.Errorf("stand by: %w", err)}
		case !ok:
			// The fence session is idle while standing by: a statement
			// keeps proxies that cut idle connections from ending it.
			if err := r.pingFence(s); err != nil {
				return outcome{err: err}
			}
			r.markAlive()
			if r.record {
				r.evictStale(ctx, s)
			}
			continue
		}
		// The server says the key is granted: lead proves that it is this
		// session that holds it, on this server, before anything else
		// counts on it. If not, the key may be held on someone else's
		// backend: never unlock it from here, just close the sessions.
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

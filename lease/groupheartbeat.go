package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// A group's heartbeat: one round trip proves every key it holds and renews
// every term, and a failed one loses every role at once.

// heartbeat proves, in one round trip per session, every hold of both
// sessions, and renews every term held.
func (gr *group) heartbeat(ctx context.Context) error {
	s := gr.s
	var keys, fences []locks.Key
	b := &pgx.Batch{}
	var renewed []*member
	for _, m := range gr.members {
		switch m.phase {
		case holding:
			keys = append(keys, m.key)
		case fenced, leading, stopping:
			keys, fences = append(keys, m.key), append(fences, m.fence)
		}
		if m.r.held != nil && (m.phase == leading || m.phase == stopping) {
			b.Queue(term.RenewSQL, m.Key, m.r.held.id).Exec(func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() != 1 {
					renewed = append(renewed, m)
				}
				return nil
			})
		}
	}
	var p locks.GroupProof
	locks.QueueGroupProof(b, s.fenceInfo.BackendPID, &p)
	fenceErr := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
		defer cancel()
		_, pid, server, err := locks.TryLockPairs(fctx, s.fenceConn, nil)
		if err == nil && (pid != s.fenceInfo.BackendPID || !server.SameServer(s.fenceInfo.Identity())) {
			err = fmt.Errorf("its statement ran on backend pid %d of %s, not its own pid %d: something between client and server moves its statements", pid, server, s.fenceInfo.BackendPID)
		}
		fenceErr <- err
	}()
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	err := s.main.SendBatch(qctx, b).Close()
	if ferr := <-fenceErr; err == nil && ferr != nil {
		return fmt.Errorf("heartbeat: stop fence session: %w", ferr)
	}
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := p.Check(s.info.BackendPID, s.info.Identity(), keys, s.fenceInfo.BackendPID, fences); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	gr.r.markAlive()
	for _, m := range renewed {
		if m.phase == leading {
			m.r.log.Warn("lease lost; stopping work", "backend_pid", s.info.BackendPID, "err", errTermEnded.Error())
			m.r.held = nil // ended by someone else: nothing to record
			gr.stop(m, &LostError{Err: errTermEnded}, term.SessionLost, rebalanceHold)
		}
	}
	return nil
}

// wait reads the idle sessions until the next step is due, a notification
// arrives or a role's work returns; an error is a lost session.
func (gr *group) wait(ctx context.Context) error {
	s := gr.s
	next := gr.nextBeat
	busy := false
	now := time.Now()
	for _, m := range gr.members {
		switch m.phase {
		case idle:
			switch {
			case gr.draining: // takes no key
			case m.polled(now):
				busy = true
			default:
				next = minTime(next, m.notBefore)
			}
		case holding, fenced:
			busy = true
		}
	}
	if busy {
		jitter := time.Duration(rand.Int64N(int64(gr.g.PollInterval / 5)))
		next = minTime(next, now.Add(gr.g.PollInterval-gr.g.PollInterval/10+jitter))
	} else {
		next = minTime(next, now.Add(time.Second)) // count the replicas
	}
	fw := watchFence(s.fenceConn)
	err := gr.r.watch(ctx, s.main, next, gr.wake, fw.lost)
	fw.stop()
	if err != nil {
		gr.r.cuts.note(time.Since(s.mainSent), err, s.info.Identity(), gr.r.cfg.HeartbeatInterval)
		return err
	}
	if fw.err != nil {
		return fmt.Errorf("the stop fence session ended: %w", fw.err)
	}
	s.mainSent = time.Now()
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lose ends the connection after a failure: every role's work is stopped
// and waited for before the sessions close (the fence session, if it
// lives, holds the fences until then), and the ends of their terms are
// recorded where that is still possible.
func (gr *group) lose(err error) outcome {
	s := gr.s
	for _, m := range gr.members {
		switch m.phase {
		case holding, fenced:
			m.phase = idle
			if m.r.held != nil {
				m.r.endTerm(s, term.SessionLost)
			}
		case leading:
			m.cancel(&LostError{Err: err})
			m.r.setState(Connecting, s.info.BackendPID, err)
			m.phase, m.stopReason = stopping, term.SessionLost
		case stopping:
			m.stopReason = term.SessionLost
		}
	}
	for _, m := range gr.members {
		if m.phase == stopping {
			m.r.waitWork(m.done, "lost")
			m.r.endTerm(s, m.stopReason)
			m.r.releaseFence(s)
			m.phase = idle
		}
	}
	return outcome{err: err}
}

// stopAll stops every role's work when the group's context ended, and
// releases every key.
func (gr *group) stopAll(ctx context.Context) outcome {
	cause := context.Cause(ctx)
	for _, m := range gr.members {
		gr.stop(m, cause, term.Released, 0)
	}
	for _, m := range gr.members {
		if m.phase == stopping {
			m.r.waitWork(m.done, "stop")
			m.r.endTerm(gr.s, m.stopReason)
			gr.release(m, 0)
		}
	}
	return outcome{final: true, err: cause}
}

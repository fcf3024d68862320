package lease

// The heartbeat: a leader proves its hold at every HeartbeatInterval, in
// one round trip per session, and a stand-by keeps its idle fence session
// alive the same way.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// markAlive reports a round trip that proved the lease session alive
// (Config.OnHeartbeat).
func (r *runner) markAlive() {
	if r.cfg.OnHeartbeat != nil {
		r.cfg.OnHeartbeat(time.Now())
	}
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

// proveAndRenew proves the lease session's hold and, while it holds a term,
// renews the term in the same round trip: the renewal is the heartbeat's
// write check (a standby, or a term someone else ended, fails it).
func (r *runner) proveAndRenew(s *sessions, also *locks.Hold) error {
	if r.held == nil {
		return r.prove(s.main, r.key, s.info, also)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	var p locks.Proof
	renewed := false
	b := &pgx.Batch{}
	b.Queue(term.RenewSQL, r.cfg.Key, r.held.id).Exec(func(tag pgconn.CommandTag) error {
		renewed = tag.RowsAffected() == 1
		return nil
	})
	locks.QueueProof(b, r.key, also, &p)
	if err := s.main.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("renew the term: %w", err)
	}
	if err := p.Check(r.key, s.info.BackendPID, s.info.Identity(), also); err != nil {
		return err
	}
	if !renewed {
		return errTermEnded
	}
	return nil
}

// heartbeat proves, at the same time, that the lease session holds the
// key (and the fence session the fence) and that the fence session holds
// the fence on its own backend: one round trip, and neither session is
// ever idle for longer than a heartbeat interval.
func (r *runner) heartbeat(s *sessions, also *locks.Hold) error {
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
	err := r.proveAndRenew(s, also)
	if ferr := <-fenceErr; err == nil && ferr != nil {
		err = fmt.Errorf("stop fence session: %w", ferr)
	}
	return err
}

// pingFence runs a statement on the idle fence session of a stand-by and
// checks that it still runs on its own backend of the same server.
func (r *runner) pingFence(s *sessions) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HeartbeatTimeout)
	defer cancel()
	sent := time.Now()
	p, err := locks.Prove(ctx, s.fenceConn, r.fence, nil)
	if err != nil {
		r.cuts.note(sent.Sub(s.fenceSent), err, s.info.Identity(), r.cfg.HeartbeatInterval)
		return fmt.Errorf("stop fence session: %w", err)
	}
	s.fenceSent = sent
	if p.PID != s.fenceInfo.BackendPID || !p.Server.SameServer(s.fenceInfo.Identity()) {
		return fmt.Errorf("stop fence session: its statement ran on backend pid %d of %s, not its own pid %d: something between client and server moves its statements", p.PID, p.Server, s.fenceInfo.BackendPID)
	}
	return nil
}

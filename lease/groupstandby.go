package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// A group's stand-by: it polls for the keys it waits for, keeps its fair
// share of those it won, counts the replicas by their presence locks, and
// steps down from roles above its share (the spread).

// takePresence takes the presence lock of every role not ended, unless the
// replica is drained.
func (gr *group) takePresence(ctx context.Context) error {
	if gr.draining {
		return nil
	}
	var keys []locks.Key
	for _, m := range gr.members {
		if m.phase != ended {
			keys = append(keys, m.presence)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	refused, err := locks.LockShared(qctx, gr.s.main, keys)
	if err != nil {
		return err
	}
	for _, k := range refused {
		role, _ := locks.PresenceOf(k)
		gr.r.log.Warn("another session holds a role's presence lock exclusively (a key of someone else's in leasectl's range?): other replicas will not count this one for it", "presence_key", k.String(), "role_key", role.ID)
	}
	return nil
}

// poll tries the keys of the roles waiting here and keeps up to the fair
// share of them. The replicas are counted every second, and at once when
// more keys came free than the share allows (a replica died: the count
// has dropped with its presence locks); keys won beyond the share are
// released at once, for the others.
func (gr *group) poll(ctx context.Context) error {
	if gr.draining {
		return nil
	}
	now := time.Now()
	var cands []*member
	var presence []locks.Key
	active, mine := 0, 0
	for _, m := range gr.members {
		if m.phase == ended {
			continue
		}
		active++
		presence = append(presence, m.presence)
		switch {
		case m.phase == idle && !now.Before(m.notBefore):
			cands = append(cands, m)
		case m.phase != idle:
			mine++
		}
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	if now.Sub(gr.counted) >= time.Second {
		if err := gr.countReplicas(qctx, presence); err != nil {
			return err
		}
	}
	if len(cands) == 0 {
		return nil
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	keys := make([]int64, len(cands))
	for i, m := range cands {
		keys[i] = m.Key
	}
	p, err := locks.TryKeys(qctx, gr.s.main, keys)
	if err != nil {
		return err
	}
	if p.PID != gr.s.info.BackendPID || !p.Server.SameServer(gr.s.info.Identity()) || p.Server.InRecovery {
		// Whatever it won is held by someone else's backend, if anyone's:
		// never unlock it from here.
		return fmt.Errorf("a poll for keys ran on backend pid %d of %s, not on this session's pid %d of %s: something between client and server moves its statements", p.PID, p.Server, gr.s.info.BackendPID, gr.s.info.Identity())
	}
	gr.r.markAlive()
	if len(p.Won) == 0 {
		return nil
	}
	keep := gr.quota(active, mine, len(cands))
	if len(p.Won) > keep {
		if err := gr.countReplicas(qctx, presence); err != nil {
			return err
		}
		keep = gr.quota(active, mine, len(cands))
	}
	keep = min(keep, len(p.Won))
	if extra := p.Won[keep:]; len(extra) > 0 {
		if err := locks.UnlockKeys(qctx, gr.s.main, extra); err != nil {
			return err
		}
	}
	for _, k := range p.Won[:keep] {
		m := gr.byKey[k]
		m.phase, m.heldAt, m.fenceLogged, m.termLogged = holding, time.Now(), false, false
	}
	return nil
}

// quota is how many of the free keys this replica keeps: up to its fair
// share of the active roles; at its share, one every fifth poll (a role a
// failover moved to it) and any every twentieth (replicas that serve other
// roles); above it, none.
func (gr *group) quota(active, mine, cands int) int {
	fair := (active + max(gr.replicas, 1) - 1) / max(gr.replicas, 1)
	switch {
	case fair > mine:
		return fair - mine
	case mine > fair:
		// Above its share (others just joined): it is stepping down from
		// roles, and must not take those the others give up.
		return 0
	case gr.ticks%20 == 0:
		return cands
	case gr.ticks%5 == 0:
		return 1
	}
	return 0
}

// countReplicas counts the sessions that hold the group's presence locks,
// this one included.
func (gr *group) countReplicas(ctx context.Context, presence []locks.Key) error {
	n, err := locks.CountHolders(ctx, gr.s.main, presence)
	if err != nil {
		return err
	}
	if n < gr.replicas {
		// A replica went away: the roles this one gave up to spread them
		// are its to take again, at once.
		for _, m := range gr.members {
			if m.spreadHold {
				m.notBefore, m.spreadHold = time.Time{}, false
			}
		}
	}
	gr.replicas, gr.counted = n, time.Now()
	return nil
}

// spread steps down from the roles above the fair share, once this replica
// has led more than its share + 1 for rebalanceSettle.
func (gr *group) spread(ctx context.Context) {
	if gr.draining || gr.replicas < 2 {
		gr.overSince = time.Time{}
		return
	}
	active := len(gr.members) - gr.count(ended)
	fair := (active + gr.replicas - 1) / gr.replicas
	var mine []*member
	for _, m := range gr.members {
		if m.phase == holding || m.phase == fenced || m.phase == leading {
			mine = append(mine, m)
		}
	}
	if len(mine) <= fair+1 {
		gr.overSince = time.Time{}
		return
	}
	if gr.overSince.IsZero() {
		gr.overSince = time.Now()
	}
	if time.Since(gr.overSince) < rebalanceSettle {
		return
	}
	gr.overSince = time.Time{}
	// Those without work first, then the latest to start: the cheapest to
	// move.
	slices.SortFunc(mine, func(a, b *member) int {
		if (a.phase == leading) != (b.phase == leading) {
			if a.phase == leading {
				return 1
			}
			return -1
		}
		return b.since.Compare(a.since)
	})
	shed := mine[:len(mine)-fair]
	gr.r.log.Info("leading more than a fair share of the roles; stepping down from some", "leading", len(mine), "replicas", gr.replicas, "fair_share", fair, "stepping_down", len(shed))
	for _, m := range shed {
		m.spreadHold = true
		gr.stop(m, ErrRebalanced, term.SteppedDown, rebalanceHold)
	}
}

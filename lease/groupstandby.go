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
// replica is drained: then, on a new session, the drained mark.
func (gr *group) takePresence(ctx context.Context) error {
	if gr.draining {
		return gr.markDrained(ctx)
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
// has dropped with its presence locks) or when a role this replica gave
// up to spread them came free after another replica took it (that replica
// may have died); keys won beyond the share, and those of roles still held
// back, are released at once, for the others.
func (gr *group) poll(ctx context.Context) error {
	if gr.draining {
		return nil
	}
	var presence []locks.Key
	for _, m := range gr.members {
		if m.phase != ended {
			presence = append(presence, m.presence)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	if time.Since(gr.counted) >= time.Second {
		if err := gr.countReplicas(qctx, presence); err != nil {
			return err
		}
	}
	now := time.Now()
	var tries []*member
	for _, m := range gr.members {
		if m.polled(now) {
			tries = append(tries, m)
		}
	}
	if len(tries) == 0 {
		return nil
	}
	rand.Shuffle(len(tries), func(i, j int) { tries[i], tries[j] = tries[j], tries[i] })
	keys := make([]int64, len(tries))
	for i, m := range tries {
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
	won := make([]*member, len(p.Won))
	left := false // a role given up to spread them, and taken since, came free
	for i, k := range p.Won {
		won[i] = gr.byKey[k]
		left = left || (won[i].heldBack(now) && won[i].spreadTaken)
	}
	for _, m := range tries {
		if m.spreadHold && !slices.Contains(p.Won, m.Key) {
			m.spreadTaken = true
		}
	}
	if len(won) == 0 {
		return nil
	}
	keep := gr.quota()
	if len(won) > keep || left {
		if err := gr.countReplicas(qctx, presence); err != nil {
			return err
		}
		keep = gr.quota()
	}
	var kept []*member
	var extra []int64
	for _, m := range won {
		if len(kept) < keep && !m.heldBack(now) {
			kept = append(kept, m)
		} else {
			extra = append(extra, m.Key)
		}
	}
	if len(extra) > 0 {
		if err := locks.UnlockKeys(qctx, gr.s.main, extra); err != nil {
			return err
		}
	}
	for _, m := range kept {
		m.phase, m.heldAt, m.fenceLogged, m.termLogged = holding, time.Now(), false, false
		m.spreadHold, m.spreadTaken = false, false
	}
	return nil
}

// polled says whether the poll tries m's key: m waits for it here, or was
// given up to spread the roles and is held back. Once another replica has
// taken the latter, its key coming free again is the first sign that that
// replica is gone: the count shows it up to a second later, and
// meanwhile the others, at their share, leave the role without a leader.
func (m *member) polled(now time.Time) bool {
	return m.phase == idle && (m.spreadHold || !now.Before(m.notBefore))
}

// heldBack says whether m waits, without its key, for a hold to pass before
// it tries for the key again.
func (m *member) heldBack(now time.Time) bool {
	return m.phase == idle && now.Before(m.notBefore)
}

// quota is how many of the keys just won this replica keeps: up to its
// fair share of the active roles; at its share, one every fifth poll (a
// role a failover moved to it) and any every twentieth (replicas that
// serve other roles); above it, none.
func (gr *group) quota() int {
	now := time.Now()
	active, mine, free := 0, 0, 0
	for _, m := range gr.members {
		switch {
		case m.phase == ended:
			continue
		case m.phase != idle:
			mine++
		case !m.heldBack(now):
			free++
		}
		active++
	}
	fair := (active + max(gr.replicas, 1) - 1) / max(gr.replicas, 1)
	switch {
	case fair > mine:
		return fair - mine
	case mine > fair:
		// Above its share (others just joined): it is stepping down from
		// roles, and must not take those the others give up.
		return 0
	case gr.ticks%20 == 0:
		return free
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
		// are its to take again, at once, also those whose work is still
		// stopping.
		for _, m := range gr.members {
			if m.spreadHold {
				m.notBefore, m.hold, m.spreadHold, m.spreadTaken = time.Time{}, 0, false, false
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
		m.spreadHold, m.spreadTaken = true, false
		gr.stop(m, ErrRebalanced, term.SteppedDown, rebalanceHold)
	}
}

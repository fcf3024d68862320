package lease

import (
	"context"
	"slices"
	"time"
)

// SteppedGroup is one replica of a group whose loop a test runs a round at
// a time (the rounds of group.serve's loop), so that it can say what the
// replica did between two rounds without timing it.
type SteppedGroup struct {
	gr  *group
	ctx context.Context
}

// StartSteppedGroup connects g's sessions and stands by, as RunGroup does
// before its loop.
func StartSteppedGroup(ctx context.Context, g Group) (*SteppedGroup, error) {
	gr, err := newGroup(g)
	if err != nil {
		return nil, err
	}
	s, err := gr.r.connect(ctx)
	if err != nil {
		return nil, err
	}
	gr.s = s
	for _, m := range gr.members {
		m.r.record = gr.r.record
	}
	if err := gr.takePresence(ctx); err != nil {
		s.close(gr.r.cfg.HeartbeatTimeout)
		return nil, err
	}
	gr.nextBeat = time.Now().Add(gr.r.cfg.HeartbeatInterval)
	return &SteppedGroup{gr: gr, ctx: ctx}, nil
}

// Round runs one round of the loop: the notifications, the work that
// returned, one step (poll, fences, terms, heartbeat, spread), and the wait
// for the next.
func (x *SteppedGroup) Round() error {
	gr := x.gr
	if err := gr.notes(x.ctx); err != nil {
		return err
	}
	if err := gr.collect(x.ctx); err != nil {
		return err
	}
	if err := gr.step(x.ctx); err != nil {
		return err
	}
	return gr.wait(x.ctx)
}

// Holding returns the keys of the roles this replica holds (their key is
// its, whatever their work does), in order.
func (x *SteppedGroup) Holding() []int64 {
	var out []int64
	for _, m := range x.gr.members {
		if m.phase != idle && m.phase != ended {
			out = append(out, m.Key)
		}
	}
	slices.Sort(out)
	return out
}

// HeldBack returns the keys of the roles this replica gave up to spread the
// roles and still keeps off, in order.
func (x *SteppedGroup) HeldBack() []int64 {
	var out []int64
	for _, m := range x.gr.members {
		if m.phase == idle && m.spreadHold && time.Now().Before(m.notBefore) {
			out = append(out, m.Key)
		}
	}
	slices.Sort(out)
	return out
}

// HoldBackLonger keeps the roles given up to spread them off for d from
// now: a test slower than the hold then cannot see it end by itself.
func (x *SteppedGroup) HoldBackLonger(d time.Duration) {
	for _, m := range x.gr.members {
		if m.phase == idle && m.spreadHold {
			m.notBefore = time.Now().Add(d)
		}
	}
}

// Close stops every role's work, releases every key and closes the
// sessions, as RunGroup does when its context ends.
func (x *SteppedGroup) Close() {
	ctx, cancel := context.WithCancelCause(x.ctx)
	cancel(context.Canceled)
	x.gr.stopAll(ctx)
	x.gr.s.close(x.gr.r.cfg.HeartbeatTimeout)
	x.gr.exit()
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
)

// A group lease runs many roles over one lease session and one stop fence
// session. The lease session holds the key of every role it leads (a
// session holds any number of advisory locks) and, in shared mode, the
// presence lock of every role it serves (locks.Key.Presence). A session can
// wait in the server's lock queue for one key only, so a group stands by by
// polling: every PollInterval one statement tries the keys it waits for
// with pg_try_advisory_lock, and it keeps no more of those it won than its
// fair share. It counts the replicas that share its roles by their
// presence locks every second, and at once when it won more than its
// share.
//
// The spread: with N roles over R replicas the fair share is ceil(N/R). A
// replica below it takes free keys up to it at every poll; one at its
// share takes one more every fifth poll (a graceful failover moves a role
// to it), and any free key every twentieth (replicas serving different
// roles). A replica that leads more than its share + 1 for
// rebalanceSettle steps down from the roles above its share, gracefully:
// the term rules apply as to any step-down. When a replica dies, its keys
// and its presence locks go at the same instant: a survivor that wins more
// keys than its share counts again before it keeps any, and releases the
// rest at once for the others.

// DefaultPollInterval is how often a group's stand-by tries the keys it
// waits for.
const DefaultPollInterval = 50 * time.Millisecond

// How long a role this replica stepped down from is left to the others
// before it tries for it again: after a request (leasectl failover), and
// after a step-down to spread the roles. rebalanceSettle is how long a
// replica must have led more than its share + 1 before it steps down.
const (
	resignHold      = 2 * time.Second
	rebalanceHold   = 5 * time.Second
	rebalanceSettle = 2 * time.Second
)

// ErrRebalanced is the cause of a role's work context when its replica
// steps down to spread the group's roles over the replicas.
var ErrRebalanced = errors.New("stepping down to spread the roles over the replicas")

// ErrDrained is the cause of a role's work context when its replica was
// drained (leasectl failover --replica): it leads nothing until it
// restarts.
var ErrDrained = errors.New("the replica was drained (leasectl failover --replica)")

// GroupRole is one role of a [Group].
type GroupRole struct {
	// Role names the role, usually one of keys.yaml; Key is its key.
	Role string
	Key  int64
	// Work runs while this replica leads the role, as in [Run]: its
	// context ends when the lease is lost, the replica steps down or the
	// group's context ends, and [SessionFrom] gives it the role's Session.
	Work func(ctx context.Context) error
	// Again is asked when Work returned by itself: whether this replica
	// stands by for the role again, after delay (it releases the key
	// meanwhile). Nil, or false: the role ends on this replica.
	Again func(err error) (delay time.Duration, again bool)
}

// Group configures [RunGroup]: many roles over shared sessions.
type Group struct {
	// Config holds what the roles share: the database, the timing, the
	// term settings, Preflight, Logger, OnStateChange (called for every
	// role's changes, with Change.Role and Change.Key) and OnHeartbeat
	// (once per round trip that proves the shared sessions alive). Its Role
	// and Key must be zero. Both sessions carry ApplicationName, which
	// defaults to "leasectl lease NAME@HOSTNAME": it names the replica.
	Config
	// Name names the group in logs and in the default application_name.
	Name string
	// Roles are the roles, each with its own key.
	Roles []GroupRole
	// PollInterval is how often a stand-by tries the keys it waits for;
	// default DefaultPollInterval. A takeover after a replica's death
	// takes about half of it, plus a round trip.
	PollInterval time.Duration
}

// RunGroup runs g's roles over one lease session and one stop fence
// session (and, at a reconnect, the probe's connection), leading each role
// whose key this replica wins and running its Work while it does, under
// the same rules as [Run]: the proof, the stop fence, the term and its
// fencing token, per role.
//
// It returns when ctx ends (context.Cause(ctx), once every Work has
// returned and every key is released), or when every role has ended on
// this replica (what their Work returned, joined). A *ConfigError is
// returned at once.
func RunGroup(ctx context.Context, g Group) error {
	gr, err := newGroup(g)
	if err != nil {
		return err
	}
	defer gr.exit()
	return gr.r.run(ctx)
}

// phase is where one role of a group is.
type phase int

const (
	idle     phase = iota // the key is not held here
	holding               // the key is held; waiting for the stop fence
	fenced                // key and fence held; waiting for the previous term or the takeover delay
	leading               // work runs
	stopping              // work was told to stop; waiting for it to return
	ended                 // work returned, and the role is not led here again
)

// member is one role of a group.
type member struct {
	GroupRole
	// r carries the role's own state: its term, its pending end, its
	// state changes and its log.
	r                       *runner
	key, fence, presence    locks.Key
	phase                   phase
	notBefore               time.Time // do not try the key before
	heldAt, fencedAt        time.Time
	nextTermCheck           time.Time
	fenceLogged, termLogged bool
	prev                    previous
	since                   time.Time
	cancel                  context.CancelCauseFunc
	done                    chan struct{}
	err                     error
	// While stopping: the reason recorded with the term's end, the state
	// to report and the hold before trying the key again, once work has
	// returned; stopAt is when it was told to stop.
	stopReason string
	stopCause  error
	hold       time.Duration
	stopAt     time.Time
	stopWarned bool
	result     error
	// spreadHold: notBefore keeps this replica off a role it stepped down
	// from to spread the roles; it is lifted when a replica goes away.
	spreadHold bool
}

type group struct {
	g        Group
	r        *runner
	members  []*member
	byKey    map[int64]*member
	byChan   map[string]*member
	wake     chan struct{}
	s        *sessions
	draining bool
	// replicas is the number of sessions holding the group's presence
	// locks at the last poll, this one included.
	replicas  int
	counted   time.Time
	overSince time.Time
	ticks     int
	nextBeat  time.Time
}

func newGroup(g Group) (*group, error) {
	if g.Key != 0 || g.Role != "" {
		return nil, &ConfigError{"Config", "Role and Key name one lease; a group's roles go in Roles"}
	}
	if len(g.Roles) == 0 {
		return nil, &ConfigError{"Roles", "a group needs at least one role"}
	}
	if g.PollInterval < 0 {
		return nil, &ConfigError{"PollInterval", "it is negative"}
	}
	if g.PollInterval == 0 {
		g.PollInterval = DefaultPollInterval
	}
	if g.Name == "" {
		g.Name = "group"
	}
	if g.ApplicationName == "" {
		g.ApplicationName = DefaultApplicationName("leasectl lease", g.Name)
	}
	c, err := g.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	c.Role = g.Name
	gr := &group{g: g, byKey: map[int64]*member{}, byChan: map[string]*member{}, wake: make(chan struct{}, 1)}
	gr.r = &runner{cfg: c, log: c.Logger.With("group", g.Name), notes: make(chan *pgconn.Notification, 4096)}
	gr.r.mainCfg, gr.r.fenceCfg = c.sessionConfigs(gr.r.onNotification, "")
	gr.r.serve, gr.r.pending, gr.r.broadcast = gr.serve, gr.recordPending, gr.broadcast
	names := map[string]bool{}
	for i, role := range g.Roles {
		switch {
		case role.Work == nil:
			return nil, &ConfigError{"Roles", fmt.Sprintf("role %d (%s) has no Work", i, role.Role)}
		case locks.IsProbeKey(role.Key):
			return nil, &ConfigError{"Roles", fmt.Sprintf("role %s: %d is in the probe's key range; give the role its own key", role.Role, role.Key)}
		case gr.byKey[role.Key] != nil:
			// Session locks stack: two roles on one key would both win it.
			return nil, &ConfigError{"Roles", fmt.Sprintf("roles %s and %s have the same key %d; each role needs its own", gr.byKey[role.Key].Role, role.Role, role.Key)}
		}
		mc := c
		mc.Role, mc.Key = role.Role, role.Key
		mc.Role = mc.Name()
		if names[mc.Role] {
			return nil, &ConfigError{"Roles", fmt.Sprintf("role %s appears twice", mc.Role)}
		}
		names[mc.Role] = true
		k := locks.BigintKey(role.Key)
		m := &member{GroupRole: role, key: k, fence: k.Fence(), presence: k.Presence()}
		m.Role = mc.Role
		m.r = &runner{cfg: mc, key: k, fence: k.Fence(), log: c.Logger.With("role", mc.Role, "key", role.Key),
			mainCfg: gr.r.mainCfg, fenceCfg: gr.r.fenceCfg}
		gr.members = append(gr.members, m)
		gr.byKey[role.Key] = m
		gr.byChan[locks.ResignChannel(role.Key)] = m
		gr.byChan[term.Channel(role.Key)] = m
		gr.r.listen = append(gr.r.listen, locks.ResignChannel(role.Key), term.Channel(role.Key))
	}
	return gr, nil
}

// broadcast passes a state change of the group's connection (connecting,
// refused) on to every role that has not ended, without a log line each.
func (gr *group) broadcast(to State, pid uint32, err error) {
	for _, m := range gr.members {
		if m.phase == ended && to != Stopped {
			continue
		}
		m.r.quiet = true
		m.r.setState(to, pid, err)
		m.r.quiet = false
	}
}

// exit reports every role stopped and records the ends of terms still
// pending on a connection of their own.
func (gr *group) exit() {
	for _, m := range gr.members {
		m.r.recordPendingOnExit()
		m.r.setState(Stopped, 0, nil)
	}
}

// recordPending records, on conn, the ends of the roles' terms lost with
// earlier sessions.
func (gr *group) recordPending(ctx context.Context, conn *pgx.Conn) {
	for _, m := range gr.members {
		m.r.recordPending(ctx, conn)
	}
}

// poke wakes the loop (a role's work returned).
func (gr *group) poke() {
	select {
	case gr.wake <- struct{}{}:
	default:
	}
}

// serve stands by and leads the roles on the connection s until it fails,
// ctx ends or every role has ended.
func (gr *group) serve(ctx context.Context, s *sessions) outcome {
	gr.s = s
	gr.r.state = StandingBy // the next connect reports Connecting to the roles again
	for _, m := range gr.members {
		m.r.record = gr.r.record
	}
	if err := gr.takePresence(ctx); err != nil {
		return gr.lose(err)
	}
	active := 0
	for _, m := range gr.members {
		if m.phase != ended {
			active++
			m.r.quiet = true
			m.r.setState(StandingBy, s.info.BackendPID, nil)
			m.r.quiet = false
		}
	}
	gr.r.log.Info("standing by", "roles", active, "backend_pid", s.info.BackendPID, "fence_backend_pid", s.fenceInfo.BackendPID)
	gr.nextBeat = time.Now().Add(gr.r.cfg.HeartbeatInterval)
	for {
		if err := gr.notes(ctx); err != nil {
			return gr.lose(err)
		}
		if err := gr.collect(ctx); err != nil {
			return gr.lose(err)
		}
		if ctx.Err() != nil {
			return gr.stopAll(ctx)
		}
		if out, done := gr.allEnded(); done {
			return out
		}
		if err := gr.step(ctx); err != nil {
			if ctx.Err() != nil {
				return gr.stopAll(ctx)
			}
			return gr.lose(err)
		}
		if err := gr.wait(ctx); err != nil {
			return gr.lose(err)
		}
	}
}

// step is one round of the loop: poll for keys, take fences, begin terms,
// heartbeat, spread.
func (gr *group) step(ctx context.Context) error {
	gr.ticks++
	if err := gr.poll(ctx); err != nil {
		return err
	}
	if err := gr.takeFences(ctx); err != nil {
		return err
	}
	if err := gr.begin(ctx); err != nil {
		return err
	}
	if !time.Now().Before(gr.nextBeat) {
		if err := gr.heartbeat(ctx); err != nil {
			return err
		}
		gr.evict(ctx)
		gr.nextBeat = time.Now().Add(gr.r.cfg.HeartbeatInterval)
	}
	gr.spread(ctx)
	return nil
}

func (gr *group) count(phases ...phase) int {
	n := 0
	for _, m := range gr.members {
		if slices.Contains(phases, m.phase) {
			n++
		}
	}
	return n
}

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

// takeFences tries the stop fences of the roles whose keys are held here.
func (gr *group) takeFences(ctx context.Context) error {
	var want []locks.Key
	for _, m := range gr.members {
		if m.phase == holding {
			want = append(want, m.fence)
		}
	}
	if len(want) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	won, pid, server, err := locks.TryLockPairs(qctx, gr.s.fenceConn, want)
	if err != nil {
		return fmt.Errorf("stop fence session: %w", err)
	}
	if pid != gr.s.fenceInfo.BackendPID || !server.SameServer(gr.s.fenceInfo.Identity()) {
		return fmt.Errorf("stop fence session: its statement ran on backend pid %d of %s, not its own pid %d: something between client and server moves its statements", pid, server, gr.s.fenceInfo.BackendPID)
	}
	now := time.Now()
	for _, f := range won {
		m := gr.byKey[f.ID]
		m.phase, m.fencedAt = fenced, now
		m.nextTermCheck = now
	}
	for _, m := range gr.members {
		if m.phase == holding && !m.fenceLogged {
			m.fenceLogged = true
			m.r.log.Info("holding the key; waiting for the previous leader's work to stop (stop fence)", "backend_pid", gr.s.info.BackendPID)
		}
	}
	return nil
}

// begin begins a term, and starts work, for each role that holds its key
// and fence once the previous term has ended (or its deadline passed) and
// the takeover delay is over.
func (gr *group) begin(ctx context.Context) error {
	s := gr.s
	for _, m := range gr.members {
		if m.phase != fenced {
			continue
		}
		now := time.Now()
		if d := gr.r.cfg.TakeoverDelay; d > 0 && now.Before(m.fencedAt.Add(d)) {
			if !m.termLogged {
				m.termLogged = true
				m.r.log.Info("holding the key before starting work", "backend_pid", s.info.BackendPID, "takeover_delay", d)
			}
			continue
		}
		var began term.Started
		var gap time.Duration
		if m.r.record {
			if now.Before(m.nextTermCheck) {
				continue
			}
			ready, err := gr.previousEnded(ctx, m)
			if err != nil || !ready {
				return err
			}
			began, err = m.r.beginTerm(ctx, s)
			if err != nil {
				if ctx.Err() != nil || s.main.IsClosed() {
					return fmt.Errorf("begin a term: %w", err)
				}
				// This role only: give it up and try again later.
				m.r.log.Warn("cannot begin a term; releasing the key and trying again later", "err", err.Error())
				m.r.recordPending(ctx, gr.s.main) // in case the server recorded it after all
				gr.release(m, gr.r.cfg.RetryInterval)
				continue
			}
			gap = leaderless(m.prev, began.Began)
		}
		gr.start(ctx, m, began, gap)
	}
	return nil
}

// previousEnded says whether m's previous term has ended or is past its
// deadline; while it is not, it checks again after a quarter second, or at
// once when the term channel says it ended.
func (gr *group) previousEnded(ctx context.Context, m *member) (bool, error) {
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	t, now, ok, err := term.Current(qctx, gr.s.main, m.Key)
	if err != nil {
		return false, err
	}
	m.prev = previous{term: t, ok: ok}
	if !ok || !t.Live() {
		return true, nil
	}
	if p := m.r.pendingEnd; p != nil && p.id == t.ID {
		m.r.recordPending(ctx, gr.s.main) // our own: our work is gone
		return false, nil
	}
	deadline := t.Deadline()
	if !now.Before(deadline) {
		m.r.log.Warn("the previous term never recorded its end, and its deadline has passed (its holder died, or stopped renewing); beginning a new term",
			"previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder), "deadline", deadline.Format(time.RFC3339Nano))
		return true, nil
	}
	if !m.termLogged {
		m.termLogged = true
		m.r.log.Info("holding the key; waiting for the previous term to end (its holder stops its work and records it), at most until its deadline",
			"backend_pid", gr.s.info.BackendPID, "previous_epoch", t.Epoch, "previous_holder", describeHolder(t.Holder),
			"deadline", deadline.Format(time.RFC3339Nano), "wait_at_most", deadline.Sub(now).Round(time.Millisecond))
	}
	m.nextTermCheck = time.Now().Add(min(250*time.Millisecond, deadline.Sub(now)))
	return false, nil
}

// start runs m's work under the term began.
func (gr *group) start(ctx context.Context, m *member, began term.Started, gap time.Duration) {
	s := gr.s
	m.since = time.Now()
	sess := &Session{Role: m.Role, Key: m.Key, BackendPID: s.info.BackendPID, FenceBackendPID: s.fenceInfo.BackendPID,
		Since: m.since, Epoch: began.Epoch, conn: s.main, fence: s.fenceConn}
	if m.r.held != nil {
		sess.TermID = m.r.held.id
	}
	wctx, cancel := context.WithCancelCause(context.WithValue(ctx, sessionKey{}, sess))
	m.cancel, m.done, m.err, m.phase = cancel, make(chan struct{}), nil, leading
	m.r.leading = termChange{epoch: began.Epoch, leaderless: gap}
	attrs := []any{"fence_backend_pid", s.fenceInfo.BackendPID, "fence_wait", m.fencedAt.Sub(m.heldAt).Round(10 * time.Microsecond)}
	if m.r.held != nil {
		attrs = append(attrs, "epoch", began.Epoch)
	}
	m.r.setState(Leading, s.info.BackendPID, nil, attrs...)
	done := m.done
	go func() {
		defer close(done)
		m.err = m.Work(wctx)
		gr.poke()
	}()
}

// stop tells m to stop, for cause, recording reason with its term's end,
// and to stay away from the key for hold once stopped. A role that holds
// the key but has no work yet gives it up at once.
func (gr *group) stop(m *member, cause error, reason string, hold time.Duration) {
	switch m.phase {
	case holding, fenced:
		gr.release(m, hold)
	case leading:
		m.cancel(cause)
		m.phase, m.stopReason, m.stopCause, m.hold, m.stopAt, m.stopWarned = stopping, reason, cause, hold, time.Now(), false
	}
}

// release ends m's term (if any) and releases its fence and key; m stands
// by again after hold.
func (gr *group) release(m *member, hold time.Duration) {
	m.r.endTerm(gr.s, term.Released)
	if m.phase != holding {
		m.r.releaseFence(gr.s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	if _, err := locks.UnlockKey(ctx, gr.s.main, m.key); err != nil {
		m.r.log.Warn("unlock failed", "err", err.Error())
	}
	m.phase, m.notBefore = idle, time.Now().Add(hold)
}

// collect finishes the roles whose work returned: by itself (released;
// stood by again or ended, as Again says), or after being told to stop.
func (gr *group) collect(ctx context.Context) error {
	for _, m := range gr.members {
		if m.phase != leading && m.phase != stopping {
			continue
		}
		select {
		case <-m.done:
		default:
			if m.phase == stopping && !m.stopWarned && time.Since(m.stopAt) > gr.r.cfg.StopTimeout {
				m.stopWarned = true
				m.r.log.Error("work has not returned within StopTimeout after it was cancelled; still waiting", "stop_timeout", gr.r.cfg.StopTimeout)
			}
			continue
		}
		pid := gr.s.info.BackendPID
		if m.phase == stopping {
			m.r.endTerm(gr.s, m.stopReason)
			gr.release(m, m.hold)
			if m.stopCause == ErrResigned {
				m.r.log.Info("stepped down on request; standing by again", "backend_pid", pid)
			}
			m.r.quiet = true
			m.r.setState(StandingBy, pid, m.stopCause)
			m.r.quiet = m.stopCause == ErrResigned
			if !m.r.quiet {
				m.r.log.Info("stepped down; standing by again", "backend_pid", pid, "why", m.stopCause.Error())
			}
			m.r.quiet = false
			continue
		}
		// Work returned by itself.
		delay, again := time.Duration(0), false
		if m.Again != nil {
			delay, again = m.Again(m.err)
		}
		gr.release(m, delay)
		if again {
			m.r.log.Info("work returned; standing by again", "backend_pid", pid, "after", delay)
			m.r.quiet = true
			m.r.setState(StandingBy, pid, nil)
			m.r.quiet = false
			continue
		}
		m.phase, m.result = ended, m.err
		m.r.setState(Stopped, pid, nil)
		if !gr.draining {
			qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
			err := locks.UnlockShared(qctx, gr.s.main, []locks.Key{m.presence})
			cancel()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// allEnded reports Run's result once every role has ended here.
func (gr *group) allEnded() (outcome, bool) {
	var errs []error
	for _, m := range gr.members {
		if m.phase != ended {
			return outcome{}, false
		}
		if m.result != nil {
			errs = append(errs, m.result)
		}
	}
	return outcome{final: true, err: errors.Join(errs...)}, true
}

// notes acts on the notifications that arrived: requests to step down, and
// ends of terms that a role here waits for.
func (gr *group) notes(ctx context.Context) error {
	pid := gr.s.info.BackendPID
	for {
		var n *pgconn.Notification
		select {
		case n = <-gr.r.notes:
		default:
			return nil
		}
		m := gr.byChan[n.Channel]
		if m == nil {
			continue
		}
		if n.Channel == term.Channel(m.Key) {
			m.nextTermCheck = time.Time{}
			continue
		}
		req, err := locks.ParseResignRequest(n.Payload)
		if err != nil {
			m.r.log.Warn("ignoring a malformed request to step down", "err", err.Error())
			continue
		}
		if req.PID != pid {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
		err = locks.Notify(actx, gr.s.main, locks.ResignedChannel(m.Key), locks.ResignAck{PID: pid, ID: req.ID, StopTimeoutMS: gr.r.cfg.StopTimeout.Milliseconds()})
		cancel()
		if err != nil {
			return fmt.Errorf("answer the request to step down: %w", err)
		}
		if req.Drain {
			if err := gr.drain(ctx); err != nil {
				return err
			}
			continue
		}
		if m.phase == leading || m.phase == holding || m.phase == fenced {
			m.r.log.Info("asked to step down (leasectl failover): stopping work, then releasing the key", "backend_pid", pid)
			gr.stop(m, ErrResigned, term.SteppedDown, resignHold)
		}
	}
}

// drain steps down from every role and stops taking any (leasectl
// failover --replica): the replica leads nothing until it restarts.
func (gr *group) drain(ctx context.Context) error {
	if gr.draining {
		return nil
	}
	gr.draining = true
	gr.r.log.Warn("drained (leasectl failover --replica): stepping down from every role; this replica leads nothing until it restarts", "leading", gr.count(holding, fenced, leading))
	var presence []locks.Key
	for _, m := range gr.members {
		if m.phase != ended {
			presence = append(presence, m.presence)
		}
		gr.stop(m, ErrDrained, term.SteppedDown, 0)
	}
	qctx, cancel := context.WithTimeout(ctx, gr.r.cfg.HeartbeatTimeout)
	defer cancel()
	return locks.UnlockShared(qctx, gr.s.main, presence)
}

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

// evict checks, for each role waiting here, that its holder shows signs of
// life (see runner.evictStale).
func (gr *group) evict(ctx context.Context) {
	if !gr.r.record || gr.draining {
		return
	}
	for _, m := range gr.members {
		if m.phase == idle {
			m.r.evictStale(ctx, gr.s)
		}
	}
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
			if !gr.draining {
				if now.Before(m.notBefore) {
					next = minTime(next, m.notBefore)
				} else {
					busy = true
				}
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
		gr.r.cuts.note(gr.r.log, time.Since(s.mainSent), err, gr.r.cfg.HeartbeatInterval)
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

// String names a phase in tests and logs.
func (p phase) String() string {
	switch p {
	case idle:
		return "idle"
	case holding:
		return "holding"
	case fenced:
		return "fenced"
	case leading:
		return "leading"
	case stopping:
		return "stopping"
	case ended:
		return "ended"
	}
	return "phase " + strconv.Itoa(int(p))
}

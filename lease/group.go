package lease

import (
	"context"
	"errors"
	"fmt"
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
// share or a role it gave up to another replica came free.
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
// rest at once for the others. A survivor that gave roles up to the dead
// replica keeps polling for their keys while it keeps off them
// (rebalanceHold), so that it counts again, and takes them back, the
// moment they come free rather than at its next count.
//
// A drained replica (leasectl failover --replica, ErrDrained) steps down
// from every role, gives up its presence locks and takes no role until it
// restarts; it stays connected, its lease session holding the drained
// mark (locks.DrainedMark), by which leasectl who --replicas shows it as
// drained.

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
	// defaults to "leasectl lease NAME@HOSTNAME#PID": it names the replica.
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
	// spreadTaken: a poll has found its key held by another replica since.
	spreadHold, spreadTaken bool
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
	if gr.draining {
		gr.r.log.Info("connected again; drained: this replica takes no role until it restarts", "backend_pid", s.info.BackendPID, "fence_backend_pid", s.fenceInfo.BackendPID)
	} else {
		gr.r.log.Info("standing by", "roles", active, "backend_pid", s.info.BackendPID, "fence_backend_pid", s.fenceInfo.BackendPID)
	}
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

package leaseapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
)

// MaxWait is the longest wait of a blocking query; a longer one is cut to
// it. DefaultWait is the wait of a blocking query that names an epoch but
// no wait.
const (
	MaxWait     = 5 * time.Minute
	DefaultWait = MaxWait
)

// ResignHold is how long a replica whose application resigned (or stopped
// checking in) leaves the role to the other replicas before it stands by
// for it again, as after `leasectl failover`.
const ResignHold = 2 * time.Second

// ErrResigned is what a role's Work returns when the application resigned.
var ErrResigned = errors.New("the application resigned (POST /v1/roles/ROLE/resign)")

// ErrAppSilent is what a role's Work returns when the application did not
// check in within Options.AppTTL.
var ErrAppSilent = errors.New("the application stopped checking in within its TTL")

// Options configures an [API].
type Options struct {
	// Roles names the roles the API serves, in the order GET /v1/roles
	// lists them.
	Roles []string
	// HeartbeatInterval and HeartbeatTimeout are the group's (zero: the
	// lease defaults); ValidUntil is derived from them.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// AppTTL, when positive, steps a role down once its application has not
	// checked in (POST /v1/roles/ROLE/alive) for that long; ValidUntil is
	// never later than the last check-in plus AppTTL. Zero: the role is
	// held while the lease lasts.
	AppTTL time.Duration
	// Logger receives a line for each step-down the API decides. Nil
	// discards.
	Logger *slog.Logger
}

// API is the state of a group's roles as the application sees it, and the
// HTTP handler that serves it. Its methods are safe for concurrent use.
type API struct {
	opts   Options
	notice time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	roles   map[string]*role
	order   []string
	changed chan struct{} // closed, and replaced, at every change
	beat    time.Time     // the last round trip that proved the sessions alive
}

// role is one role's state.
type role struct {
	name    string
	leading bool
	epoch   int64
	token   string
	since   time.Time // when this term's work began here
	alive   time.Time // the application's last check-in
	// promised is the latest ValidUntil handed out in this term.
	promised time.Time
	// resign is closed to make the term's work step down; ack ends the wait
	// for promises after the term (ackEpoch) once the application said it
	// stopped.
	resign   chan struct{}
	ack      chan struct{}
	ackEpoch int64
}

// New returns the API of the roles in opts, none of them led yet.
func New(opts Options) *API {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = lease.DefaultHeartbeatInterval
	}
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = lease.DefaultHeartbeatTimeout
	}
	a := &API{opts: opts, roles: map[string]*role{}, changed: make(chan struct{}), log: opts.Logger}
	a.notice = timing.Lease{HeartbeatInterval: opts.HeartbeatInterval, HeartbeatTimeout: opts.HeartbeatTimeout}.Notice()
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	for _, name := range opts.Roles {
		if _, dup := a.roles[name]; dup {
			continue
		}
		a.roles[name] = &role{name: name}
		a.order = append(a.order, name)
	}
	return a
}

// StopTimeout is the lease StopTimeout a group served by an API with these
// heartbeat settings must run with: the longest a role's work takes to
// return once its lease ends, which is the longest ValidUntil reaches
// ahead (heartbeat interval + heartbeat timeout), plus one heartbeat
// timeout of margin.
func StopTimeout(heartbeatInterval, heartbeatTimeout time.Duration) time.Duration {
	return heartbeatInterval + 2*heartbeatTimeout
}

// GroupRole returns the lease.GroupRole of the named role, with key: its
// Work publishes the lease to the application, and its Again stands by
// again after the application resigned or stopped checking in.
func (a *API) GroupRole(name string, key int64) lease.GroupRole {
	return lease.GroupRole{Role: name, Key: key, Work: a.work(name), Again: again}
}

// again stands by again after a step-down the application caused, after
// ResignHold so that another replica takes the role.
func again(err error) (time.Duration, bool) {
	return ResignHold, true
}

// OnHeartbeat records a round trip that proved the group's sessions alive;
// it is a lease.Config.OnHeartbeat (chain it with others).
func (a *API) OnHeartbeat(at time.Time) {
	a.mu.Lock()
	if at.After(a.beat) {
		a.beat = at
	}
	a.mu.Unlock()
}

// broadcast wakes every blocking query and watcher; a.mu is held.
func (a *API) broadcast() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// work is the role's lease.GroupRole.Work.
func (a *API) work(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		r := a.roles[name]
		if r == nil {
			return fmt.Errorf("leaseapi: role %q was not in Options.Roles", name)
		}
		s, ok := lease.SessionFrom(ctx)
		if !ok {
			return errors.New("leaseapi: Work called without a lease session")
		}
		return a.term(ctx, r, s.Epoch, s.FenceToken())
	}
}

// term publishes r's term and holds it until it ends (see work).
func (a *API) term(ctx context.Context, r *role, epoch int64, token string) error {
	resign := make(chan struct{})
	a.mu.Lock()
	r.leading, r.epoch, r.token, r.since = true, epoch, token, time.Now()
	r.promised, r.resign = time.Time{}, resign
	if r.ack != nil {
		close(r.ack) // a wait of an earlier term is over
		r.ack = nil
	}
	a.broadcast()
	a.mu.Unlock()

	why, wait := a.hold(ctx, r, resign)

	// Not led any more, as every answer from now on says, before the work
	// returns (and the key can pass on).
	a.mu.Lock()
	promised := r.promised
	r.leading, r.epoch, r.token, r.resign = false, 0, "", nil
	ack := make(chan struct{})
	if wait {
		r.ack, r.ackEpoch = ack, epoch
	}
	a.broadcast()
	a.mu.Unlock()
	if why == ErrAppSilent {
		a.log.Warn("the application has not checked in within its TTL; stepping down", "role", r.name, "epoch", epoch, "app_ttl", a.opts.AppTTL)
	}
	if d := time.Until(promised); wait && d > 0 {
		a.log.Info("the application was told it leads until valid_until; keeping the term until then (a resign ends the wait)", "role", r.name, "epoch", epoch, "valid_until", promised.UTC().Format(time.RFC3339Nano))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ack:
		}
		t.Stop()
	}
	a.mu.Lock()
	if r.ack == ack {
		r.ack = nil
	}
	a.mu.Unlock()
	return why
}

// hold blocks while the role is led here: until ctx ends (the lease ended),
// the application resigns or stops checking in. It says why, and whether
// the promises handed out must be waited for (not after a resign: the
// application stopped).
func (a *API) hold(ctx context.Context, r *role, resign chan struct{}) (error, bool) {
	var tick <-chan time.Time
	if a.opts.AppTTL > 0 {
		t := time.NewTicker(min(a.opts.AppTTL/4, time.Second))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx), true
		case <-resign:
			return ErrResigned, false
		case <-tick:
			a.mu.Lock()
			silent := !time.Now().Before(a.appDeadline(r))
			a.mu.Unlock()
			if silent {
				return ErrAppSilent, true
			}
		}
	}
}

// appDeadline is when r's application must have checked in again; a.mu is
// held. The clock starts again with each term.
func (a *API) appDeadline(r *role) time.Time {
	last := r.alive
	if r.since.After(last) {
		last = r.since
	}
	return last.Add(a.opts.AppTTL)
}

// validUntil is r's promise now; a.mu is held and r leads.
func (a *API) validUntil(r *role) time.Time {
	base := a.beat
	if r.since.After(base) {
		base = r.since
	}
	v := base.Add(a.notice)
	if a.opts.AppTTL > 0 {
		if d := a.appDeadline(r); d.Before(v) {
			v = d
		}
	}
	return v
}

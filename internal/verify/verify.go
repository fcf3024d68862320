package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/dur"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
)

// Status is the outcome of one check.
type Status string

// Check outcomes. Only Fail fails the run; Skip says why a check did not run.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// The names of the checks, stable for JSON consumers.
const (
	CheckOneLeader       = "one_leader"
	CheckCleanFailover   = "clean_failover"
	CheckPoolerRejection = "pooler_rejection"
	CheckLeaseDSN        = "lease_dsn"
)

// Result is one check of one role (pooler_rejection has no role).
type Result struct {
	Check string
	// Role and Key are the role checked; empty and zero for
	// pooler_rejection.
	Role string
	Key  locks.Key
	// Status and Detail are the outcome and one line of why.
	Status Status
	Detail string
	// Leader is the holder one_leader found, when there is one.
	Leader *locks.Session
	// Now is the server's clock when Leader was read.
	Now time.Time
	// Failover is what clean_failover did, when it terminated a holder.
	Failover *locks.Failover
	// Probe is the probe report of pooler_rejection or lease_dsn, when the
	// probe ran.
	Probe *probe.Report
}

// Options configure [Run].
type Options struct {
	// Roles are the roles to check, in order.
	Roles []keys.Entry
	// StaleAfter is how long a leader may idle before one_leader calls it
	// stale; default 45s (three missed 15 s heartbeats).
	StaleAfter time.Duration
	// Failover runs clean_failover: it moves each role's lease to a
	// stand-by, as locks.Target.Failover does (asking the leader to step
	// down, terminating it when it does not). The caller has had that
	// confirmed.
	Failover bool
	// Force terminates each leader at once instead of asking it to step
	// down.
	Force bool
	// Within is how soon after the termination a stand-by must take over;
	// default 15s.
	Within time.Duration
	// PoolerConfig is the DSN the probe must refuse; nil skips
	// pooler_rejection.
	PoolerConfig *pgx.ConnConfig
	// LeaseConfig is the DSN the workers hold their leases over, which the
	// probe must accept, including Idle; nil skips lease_dsn.
	LeaseConfig *pgx.ConnConfig
	// Idle is how long lease_dsn's probe keeps its session idle (probe
	// --idle): a proxy that cuts idle connections fails it.
	Idle time.Duration
	// Timeout bounds each database step: reading the leaders, each
	// termination (how long it waits for the backend to exit), each of the
	// probe's connections and steps. Default 5s.
	Timeout time.Duration
}

// NotAsked is the Detail of a check skipped because Options did not ask for
// it (no Failover, PoolerConfig or LeaseConfig). A caller may replace it
// with how to ask for the check in its own terms.
const NotAsked = "not asked for"

// Report is the outcome of every check.
type Report struct {
	// Server is the server the roles were checked on.
	Server dbconn.ServerInfo
	// Results are in order: per role one_leader then clean_failover, then
	// pooler_rejection and lease_dsn.
	Results []Result
}

// Count returns how many results have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

// Passed reports whether no check failed: skipped checks (not asked for)
// do not fail a run.
func (r *Report) Passed() bool { return r.Count(Fail) == 0 }

// Run checks o.Roles on conn's server, which must be the primary. Every
// role's leader is read at once, before any failover disturbs them. It
// returns an error only when the checks cannot run at all: the server
// cannot be read, or it is a standby (wrapping [locks.ErrStandby]).
func Run(ctx context.Context, conn *pgx.Conn, o Options) (*Report, error) {
	if o.StaleAfter <= 0 {
		o.StaleAfter = timing.DefaultStaleAfter
	}
	if o.Within <= 0 {
		o.Within = timing.DefaultTakeoverWait
	}
	if o.Timeout <= 0 {
		o.Timeout = timing.DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	server, err := dbconn.Server(rctx, conn)
	if err != nil {
		return nil, err
	}
	if server.InRecovery {
		return nil, fmt.Errorf("refusing to verify: %w, whose advisory locks are its own and say nothing about the primary's leases (point the DSN at the primary)", locks.ErrStandby)
	}
	want := make([]locks.Key, len(o.Roles))
	names := make(map[int64]string, len(o.Roles))
	for i, r := range o.Roles {
		want[i] = locks.BigintKey(r.Key)
		names[r.Key] = r.Name
	}
	snap, err := locks.Read(rctx, conn, locks.Filter{Keys: want})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(o.Roles))
	for i, r := range o.Roles {
		ids[i] = r.Key
	}
	// The term record, where there is one: a leader must also lead a live
	// term (the rule of who --check).
	record, err := term.ReadRecord(rctx, conn, ids)
	if err != nil {
		return nil, err
	}
	rep := &Report{Server: server}
	leases := snap.ByRole(names, want, false)
	leaders := make([]Result, len(leases))
	for i, l := range leases {
		leaders[i] = OneLeader(l, snap.Now, o.StaleAfter)
		if h := record.Health(l, snap.Now, o.StaleAfter); leaders[i].Status == Pass && !h.OK() {
			leaders[i].Status, leaders[i].Detail = Fail, h.Problem(l.Name())
		}
	}
	for i, l := range leases {
		rep.Results = append(rep.Results, leaders[i], cleanFailover(ctx, conn, o, l, leaders[i]))
	}
	rep.Results = append(rep.Results, poolerRejection(ctx, o), leaseDSN(ctx, o))
	return rep, nil
}

// leaseDSN probes the workers' DSN, keeping the probe's session idle for
// o.Idle: the probe must accept it.
func leaseDSN(ctx context.Context, o Options) Result {
	r := Result{Check: CheckLeaseDSN, Status: Skip}
	if o.LeaseConfig == nil {
		r.Detail = NotAsked
		return r
	}
	r.Status = Fail
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: o.LeaseConfig, Timeout: o.Timeout, Idle: o.Idle})
	if err != nil {
		r.Detail = "could not probe it: " + err.Error()
		return r
	}
	r.Probe = rep
	if rep.Verdict != probe.Stable {
		r.Detail = fmt.Sprintf("the probe refuses %s (%s): %s", rep.Target, rep.Refusal, strings.Join(rep.Reasons(), "; "))
		return r
	}
	r.Status = Pass
	idle := ""
	if o.Idle > 0 {
		idle = fmt.Sprintf(", and its session survived %s idle", o.Idle)
	}
	r.Detail = fmt.Sprintf("the probe accepts %s (STABLE)%s", rep.Target, idle)
	return r
}

// OneLeader decides one_leader for lease as read at now, by the lease's
// health ([locks.Lease.Health], which `who --check` gates on too): exactly
// one session holds the key exclusively, and it is not stale (a leader
// whose state is hidden from this role passes: staleness is unknown, not
// proven).
func OneLeader(l locks.Lease, now time.Time, staleAfter time.Duration) Result {
	r := Result{Check: CheckOneLeader, Role: l.Role, Key: l.Key, Status: Fail, Now: now}
	h, held := l.Holder()
	if held {
		r.Leader = &h
	}
	switch l.Health(now, staleAfter) {
	case locks.NoHolder:
		r.Detail = "no holder: no replica leads " + l.Name()
	case locks.SharedHolders:
		r.Detail = l.SharedDetail()
	case locks.PreparedHolder:
		r.Detail = l.PreparedDetail()
	case locks.StaleHolder:
		idle, _ := h.Idle(now)
		r.Detail = fmt.Sprintf("%s holds it but is stale: idle %s > %s (a hung leader, or a lock stranded on a pooled server connection)",
			h.Describe(), idle.Round(time.Second), staleAfter)
	default:
		r.Status = Pass
		r.Detail = h.Describe() + " holds it"
		if idle, ok := h.Idle(now); ok {
			r.Detail += fmt.Sprintf(", idle %s", idle.Round(time.Second))
		} else if h.Hidden {
			r.Detail += " (its state is hidden from this role: staleness unknown)"
		} else if h.State != "" {
			r.Detail += ", " + h.State
		}
	}
	return r
}

func cleanFailover(ctx context.Context, conn *pgx.Conn, o Options, l locks.Lease, leader Result) Result {
	r := Result{Check: CheckCleanFailover, Role: l.Role, Key: l.Key, Status: Skip}
	switch {
	case !o.Failover:
		r.Detail = NotAsked
		return r
	case leader.Status != Pass:
		r.Detail = "no single live leader to fail over"
		return r
	}
	r.Status = Fail
	fctx, cancel := context.WithTimeout(ctx, o.Timeout)
	target, err := locks.FindTarget(fctx, conn, l.Key, map[int64]string{l.Key.ID: l.Role})
	cancel()
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	bctx, cancel := context.WithTimeout(ctx, o.Timeout)
	before, err := term.ReadBefore(bctx, conn, l.Key)
	cancel()
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	res, err := target.Failover(ctx, conn, locks.FailoverOptions{TerminateTimeout: o.Timeout, Wait: o.Within, Force: o.Force})
	r.Failover = res
	var began *term.Began
	if err == nil && res != nil && res.Takeover != nil && before != nil {
		// The failover is over when the new leader's term has begun: its
		// work starts then.
		b, werr := before.Await(ctx, conn, term.AwaitOptions{Holder: res.Takeover.Holder, Since: res.Origin(), From: res.WaitedFrom(), Within: o.Within, ReadTimeout: o.Timeout})
		if werr != nil {
			r.Detail = fmt.Sprintf("%s took over, but: %v", res.Takeover.Holder.Describe(), werr)
			return r
		}
		began = &b
		if !b.Other {
			res.Takeover.BoundByTerm(b.After) // never a takeover later than its term
		}
	}
	old := target.Holder
	did := "terminated " + old.Describe()
	if res != nil && res.Path == locks.PathGraceful {
		did = old.Describe() + " stepped down on request"
	}
	switch {
	case res == nil:
		r.Detail = "nothing done: " + err.Error()
	case errors.Is(err, locks.ErrNoTakeover):
		r.Detail = fmt.Sprintf("%s, but no stand-by took over within %s", did, o.Within)
	case err != nil:
		r.Detail = fmt.Sprintf("%s, then: %v", did, err)
	case res.Termination != nil && !res.Termination.Gone:
		r.Detail = fmt.Sprintf("%s took over, but pid %d had not exited %s after it was signalled", res.Takeover.Holder.Describe(), old.PID, dur.Format(res.Termination.Took))
	case res.Path == locks.PathGraceful:
		r.Status = Pass
		r.Detail = fmt.Sprintf("%s took over from pid %d within %s of the request to step down (graceful)",
			res.Takeover.Holder.Describe(), old.PID, dur.Format(res.Takeover.After))
		r.Detail += begunDetail(began)
	default:
		r.Status = Pass
		r.Detail = fmt.Sprintf("%s took over from pid %d within %s of the signal; pid %d is gone",
			res.Takeover.Holder.Describe(), old.PID, dur.Format(res.Takeover.After), old.PID)
		if res.Resign != nil && res.Resign.Fallback != "" {
			r.Detail += " (terminated: " + res.Resign.Fallback + ")"
		}
		r.Detail += begunDetail(began)
	}
	return r
}

// begunDetail says when the new leader's term began, if there is a record.
func begunDetail(b *term.Began) string {
	switch {
	case b == nil:
		return ""
	case b.Other:
		return fmt.Sprintf("; pid %d is not a lease of leasectl (no lease mark): it leads by holding the key, and begins no term", b.Holder.PID)
	case b.After > 0:
		return fmt.Sprintf(", and began term %d %s after it", b.Term.Epoch, dur.Format(b.After))
	}
	return fmt.Sprintf(", and began term %d", b.Term.Epoch)
}

func poolerRejection(ctx context.Context, o Options) Result {
	r := Result{Check: CheckPoolerRejection, Status: Skip}
	if o.PoolerConfig == nil {
		r.Detail = NotAsked
		return r
	}
	r.Status = Fail
	rep, err := probe.Run(ctx, probe.Options{ConnConfig: o.PoolerConfig, Timeout: o.Timeout})
	if err != nil {
		r.Detail = "could not probe it: " + err.Error()
		return r
	}
	r.Probe = rep
	if rep.Verdict == probe.Stable {
		r.Detail = fmt.Sprintf("the probe accepts %s (STABLE): a lease is safe there, so it is not a pooler to reject (session mode is safe); give the transaction-mode pooler's DSN", rep.Target)
		return r
	}
	r.Status = Pass
	r.Detail = fmt.Sprintf("the probe refuses %s: %s", rep.Target, strings.Join(rep.Reasons(), "; "))
	return r
}

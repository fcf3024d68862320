package schedule

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasectl/leasectl/internal/timing"
)

// Write is one fenced row that committed: the worker of role wrote it in
// epoch's term, and the server committed it at Commit (its commit
// timestamp, track_commit_timestamp).
type Write struct {
	Role   string
	Epoch  int64
	Writer string
	Commit time.Time
}

// Term is one term of a role as the term record holds it
// (`leasectl history ROLE -o json`).
type Term struct {
	Role  string
	Epoch int64
	Began time.Time
}

// Work is one worker's run: from its start (once it had taken its role's
// flock witness, or found it held) to its stop (before it released the
// flock; for a worker killed outright, its last sign of life), both on
// this host's clock, which every worker shares: a worker that took the
// flock from another always starts after the other's stop.
type Work struct {
	Role string
	// Writer names the worker (replica/pid), Replica the `leasectl run`
	// that ran it.
	Writer, Replica string
	From, To        time.Time
	// HeldBy is the writer that held the flock when this worker started:
	// two workers at once, seen by the witness itself.
	HeldBy string
}

// Frozen is a window in which Replica (its leasectl and its programs) was
// frozen past its lease's deadline: the case the fencing token exists
// for, in which two workers may run at once but the late one's writes
// must be refused.
type Frozen struct {
	Replica  string
	From, To time.Time
}

// Fault is one fault the schedule injected, at At. Until is when its
// cause was gone (a thaw, a heal, a restart's server or pooler back up, a
// failover command's return); zero for a fault that is over at once.
type Fault struct {
	Kind      string
	At, Until time.Time
	// Replica is the replica a freeze, a partition or a SIGKILL targeted.
	Replica string
}

// Timing is what the fleet ran with, from which each fault's bound on
// leaderless time follows (see Timing.Reach).
type Timing struct {
	// Lease is every replica's: --heartbeat-interval, --heartbeat-timeout
	// and the stop time of --grace.
	Lease timing.Lease
	// Retry is --retry-interval, the longest wait between reconnects.
	Retry time.Duration
	// PoolerRetry is PgBouncer's server_login_retry: after a failed login
	// to the server, the pooler tries again this much later.
	PoolerRetry time.Duration
	// Start is what a program takes, once its role is granted, to start
	// and commit its first write; also the quiet between a worker's writes
	// that is not yet leaderless time.
	Start time.Duration
}

// fleetTiming is the fleet's: the fault suite's short timings
// (--heartbeat-interval 2s --heartbeat-timeout 1s --grace 2s, a term
// deadline 8 s after the last renewal), --retry-interval 5s, and the lab's
// server_login_retry of 1 s.
var fleetTiming = Timing{
	Lease:       timing.Lease{HeartbeatInterval: 2 * time.Second, HeartbeatTimeout: time.Second, StopTimeout: timing.CommandStop(2 * time.Second)},
	Retry:       5 * time.Second,
	PoolerRetry: time.Second,
	Start:       time.Second,
}

// Evicted is how long after a fault that froze or cut off a leader the
// next leader has begun its term: a stand-by ends the silent holder's
// sessions once its term has gone unrenewed for Stopped, at its next check
// (one heartbeat interval), and waits for the term's deadline; the last
// renewal was before the fault. A partitioned leader's session is ended by
// the server's TCP timeout (the term deadline) at the latest.
func (t Timing) Evicted() time.Duration {
	l := t.Lease
	return max(l.TermDeadline(), l.Stopped()+l.HeartbeatInterval)
}

// Reach is the end of the time a fault may leave a role leaderless in a
// gap that began at gapStart, after the last write of leader (a replica's
// name), by the documented behaviour of the lease: past it, the gap is not
// the fault's.
func (t Timing) Reach(f Fault, gapStart time.Time, leader string) time.Time {
	end := f.Until
	if end.IsZero() {
		end = f.At
	}
	switch f.Kind {
	case "pause":
		return f.At // nothing was done
	case "freeze-past", "partition":
		if f.Replica != "" && f.Replica != leader && !f.Until.IsZero() {
			// A stand-by, which the next takeover may need: once thawed or
			// healed it reconnects within its backoff (its sessions were
			// ended meanwhile), and checks the holder after its first wait
			// in the lock queue.
			return f.Until.Add(t.Retry + t.Lease.HeartbeatInterval + t.Start)
		}
		// A frozen or cut-off replica that leads, or that the server
		// granted the key while it was frozen or cut off (later: when the
		// gap began), is evicted Evicted after; a frozen one that thaws
		// before leads on. A cut that heals before still leaves the next
		// leader waiting for the old term's deadline.
		evicted := later(f.At, gapStart).Add(t.Evicted())
		if f.Kind == "freeze-past" && !f.Until.IsZero() && f.Until.Before(evicted) {
			evicted = f.Until
		}
		return evicted.Add(t.Start)
	case "freeze-leasectl", "terminate-sessions":
		// The leader found its sessions gone (or its renewal late): it
		// stops its program, reconnects and records the term's end.
		return end.Add(t.Lease.StopTimeout + t.Start)
	case "restart-fast", "restart-immediate":
		// Once the server is back: every lease's next reconnect (its
		// backoff has grown up to Retry) and the pooler's next login.
		return end.Add(t.Retry + t.PoolerRetry + t.Start)
	case "pooler-restart":
		return end.Add(t.PoolerRetry + t.Start)
	case "failover-role", "failover-replica":
		// The next stand-by takes the key the moment the holder's session
		// ends: a longer handover is another fault's (a frozen stand-by's).
		return f.At.Add(t.Start)
	}
	// sigkill (the key passes as the process dies), freeze-program (the
	// program writes again once thawed), pooler-reload.
	return end.Add(t.Start)
}

// Bound says how far a fault of kind reaches, for the report: "at+D"
// after it was injected, "end+D" after its cause was gone (a thaw, a heal,
// a server or pooler back), and, when it differs, the reach of the fault
// on a stand-by. It is read off Reach, so that the two never disagree.
func (t Timing) Bound(kind string) string {
	t0 := time.Unix(0, 0)
	const long = time.Hour // a fault that lasts: its end is past any bound
	show := func(r time.Time) string {
		if d := r.Sub(t0); d >= long {
			return "end+" + (d - long).String()
		}
		return "at+" + r.Sub(t0).String()
	}
	f := Fault{Kind: kind, At: t0, Until: t0.Add(long), Replica: "leader"}
	leader := t.Reach(f, t0, "leader")
	f.Replica = "stand-by"
	if standby := t.Reach(f, t0, "leader"); !standby.Equal(leader) {
		return show(leader) + "; stand-by " + show(standby)
	}
	return show(leader)
}

// Gap is a role's leaderless time: the last committed write before it and
// the first after.
type Gap struct {
	From, To Write
	// Cause is the kind of the fault whose reach covers the gap's end (the
	// earliest injected of those), else the first injected during it, else
	// the last before it.
	Cause string
	// Uncovered, for a gap over its bound, is the first moment in it that
	// no fault's reach covers.
	Uncovered time.Time
}

func (g Gap) Length() time.Duration { return g.To.Commit.Sub(g.From.Commit) }

// History is what a run recorded.
type History struct {
	Writes  []Write
	Terms   []Term
	Work    []Work
	Frozen  []Frozen
	Faults  []Fault
	Refused int // fenced writes the database refused (a stale token)
	Seed    int64
	Timing  Timing
	// AtEnd are the problems of the fleet after the calm at the end (a
	// role without exactly one program, `who --check` failing, a process
	// left after teardown), found by the run that recorded the history.
	AtEnd []string
}

// Verdict is what Check found.
type Verdict struct {
	// LateWrites: committed rows of an epoch after a committed row of a
	// higher epoch of the same role.
	LateWrites []Write
	// StaleCommits: committed rows whose epoch was not the role's current
	// term at their commit.
	StaleCommits []Write
	// Inconsistent: problems of the term record itself (an epoch twice,
	// epochs not increasing with time).
	Inconsistent []string
	// Overlaps: two workers of one role at once, split by whether a
	// replica frozen past its deadline explains them.
	OverlapsUnexplained, OverlapsFrozen int
	// Longest is the longest gap between a role's committed writes.
	Longest Gap
	// OverBound are the gaps longer than Timing.Start that the reach of
	// the faults around them does not cover: leaderless for longer than
	// any fault explains. Reported, not judged: the bounds are timings,
	// and a busy machine stretches them.
	OverBound []Gap
	// ByKind is, per fault kind, how many were injected and the longest
	// gap it caused.
	ByKind map[string]KindStats
	// Overlaps lists the overlaps, explained or not, for the report.
	Overlaps []string
	// AtEnd is History.AtEnd, and roles whose last committed write is not
	// of their last term.
	AtEnd []string
}

// KindStats is one fault kind's line of the report.
type KindStats struct {
	Count int
	// Longest is the longest gap it caused; OverBound counts the gaps
	// over their bound put down to it.
	Longest   Gap
	OverBound int
}

// OK reports whether the history keeps every promise: no late write, no
// stale commit, a consistent term record, no overlap that a frozen
// replica does not explain, and every role led at the end.
func (v Verdict) OK() bool {
	return len(v.LateWrites) == 0 && len(v.StaleCommits) == 0 && len(v.Inconsistent) == 0 && v.OverlapsUnexplained == 0 && len(v.AtEnd) == 0
}

// Check reads h.
func Check(h History) Verdict {
	v := Verdict{ByKind: map[string]KindStats{}}
	writes := slices.Clone(h.Writes)
	slices.SortStableFunc(writes, func(a, b Write) int {
		return cmp.Or(strings.Compare(a.Role, b.Role), a.Commit.Compare(b.Commit))
	})
	terms := map[string][]Term{}
	for _, t := range h.Terms {
		terms[t.Role] = append(terms[t.Role], t)
	}
	for role, ts := range terms {
		slices.SortStableFunc(ts, func(a, b Term) int { return a.Began.Compare(b.Began) })
		seen := map[int64]bool{}
		for i, t := range ts {
			if seen[t.Epoch] {
				v.Inconsistent = append(v.Inconsistent, fmt.Sprintf("%s: epoch %d twice", role, t.Epoch))
			}
			seen[t.Epoch] = true
			if i > 0 && t.Epoch <= ts[i-1].Epoch {
				v.Inconsistent = append(v.Inconsistent, fmt.Sprintf("%s: epoch %d began after epoch %d", role, t.Epoch, ts[i-1].Epoch))
			}
		}
		terms[role] = ts
	}

	// Late writes and stale commits, per role in commit order.
	var highest int64
	for i, w := range writes {
		if i == 0 || w.Role != writes[i-1].Role {
			highest = 0
		}
		if w.Epoch < highest {
			v.LateWrites = append(v.LateWrites, w)
		}
		highest = max(highest, w.Epoch)
		if current, ok := currentTerm(terms[w.Role], w.Commit); !ok || current != w.Epoch {
			v.StaleCommits = append(v.StaleCommits, w)
		}
	}

	// Overlaps of the witness, per role: two runs whose intervals cross,
	// or a run that found the flock held by another.
	work := slices.Clone(h.Work)
	slices.SortStableFunc(work, func(a, b Work) int {
		return cmp.Or(strings.Compare(a.Role, b.Role), a.From.Compare(b.From))
	})
	for i, b := range work {
		for _, a := range work[:i] {
			if a.Role != b.Role || a.Writer == b.Writer {
				continue
			}
			if !b.From.Before(a.To) && b.HeldBy != a.Writer {
				continue
			}
			// a started first: it is the one that ran on too long. Only a
			// freeze past its deadline that began in its run, before b
			// started, explains that (the documented uncovered case);
			// then the fence, not the lease, must keep its writes out.
			what := fmt.Sprintf("%s: %s (%s – %s) and %s (from %s)", b.Role, a.Writer, a.From.UTC().Format(stamp), a.To.UTC().Format(stamp), b.Writer, b.From.UTC().Format(stamp))
			if frozenIn(h.Frozen, a.Replica, a.From, b.From) {
				v.OverlapsFrozen++
				v.Overlaps = append(v.Overlaps, "overlap (frozen past its deadline): "+what)
			} else {
				v.OverlapsUnexplained++
				v.Overlaps = append(v.Overlaps, "overlap: "+what)
			}
		}
	}

	// Leaderless time: gaps between a role's committed writes, each
	// measured against the reach of the faults around it.
	faults := slices.Clone(h.Faults)
	for i, f := range faults {
		// Histories written before faults named their target: a freeze
		// past the deadline is in Frozen, from the same moment.
		for _, fr := range h.Frozen {
			if f.Replica == "" && f.Kind == "freeze-past" && fr.From.Equal(f.At) {
				faults[i].Replica = fr.Replica
			}
		}
	}
	slices.SortStableFunc(faults, func(a, b Fault) int { return a.At.Compare(b.At) })
	for _, f := range faults {
		s := v.ByKind[f.Kind]
		s.Count++
		v.ByKind[f.Kind] = s
	}
	for i := 1; i < len(writes); i++ {
		prev, w := writes[i-1], writes[i]
		if prev.Role != w.Role {
			continue
		}
		g := h.gap(faults, prev, w)
		if g.Length() > v.Longest.Length() {
			v.Longest = g
		}
		if !g.Uncovered.IsZero() {
			v.OverBound = append(v.OverBound, g)
		}
		if g.Cause == "" {
			continue
		}
		s := v.ByKind[g.Cause]
		if g.Length() > s.Longest.Length() {
			s.Longest = g
		}
		if !g.Uncovered.IsZero() {
			s.OverBound++
		}
		v.ByKind[g.Cause] = s
	}

	// At the end, each role's last committed write is of its last term:
	// the role is led, by the term the record says is current.
	v.AtEnd = slices.Clone(h.AtEnd)
	for role, ts := range terms {
		var last *Write
		for i := range writes {
			if writes[i].Role == role {
				last = &writes[i]
			}
		}
		switch {
		case last == nil:
			v.AtEnd = append(v.AtEnd, fmt.Sprintf("%s: no committed write at all", role))
		case last.Epoch != ts[len(ts)-1].Epoch:
			v.AtEnd = append(v.AtEnd, fmt.Sprintf("%s: the last committed write is of epoch %d, the last term is %d", role, last.Epoch, ts[len(ts)-1].Epoch))
		}
	}
	slices.Sort(v.AtEnd)
	return v
}

const stamp = "15:04:05.000"

// gap is the gap between a role's writes prev and next, with its cause
// and, if the faults' reach leaves part of it uncovered, the first moment
// of that part. faults are sorted by At.
//
// The gap is covered from its quiet start (Start after prev: writes come
// every 50 ms) to next by the reach of the faults injected in it or before
// it, one after another without a hole: the one whose reach first covers
// next is its cause. When a hole is left, the gap is over its bound, put
// down to the fault whose reach ran out there.
func (h History) gap(faults []Fault, prev, next Write) Gap {
	g := Gap{From: prev, To: next}
	a, b := prev.Commit, next.Commit
	leader, _, _ := strings.Cut(prev.Writer, "/") // the writer is REPLICA/PID
	cursor := a.Add(h.Timing.Start)
	var last *Fault
	for i := range faults {
		f := &faults[i]
		if !cursor.Before(b) || !f.At.Before(b) {
			break
		}
		reach := h.Timing.Reach(*f, a, leader)
		if !reach.After(cursor) {
			continue // over before the gap's quiet start, or a pause
		}
		if f.At.After(cursor) {
			break // a hole: no later fault fills it
		}
		cursor, last = reach, f
	}
	if cursor.Before(b) {
		g.Uncovered = cursor
	}
	if last != nil {
		g.Cause = last.Kind
		return g
	}
	// A gap within its quiet start, or one no fault reaches: the first
	// fault injected during it, else the last before it.
	j := sort.Search(len(faults), func(k int) bool { return faults[k].At.After(a) })
	if j == len(faults) || !faults[j].At.Before(b) {
		j--
	}
	if j >= 0 {
		g.Cause = faults[j].Kind
	}
	return g
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// currentTerm returns the epoch of the last of ts (sorted by Began) that
// began at or before at.
func currentTerm(ts []Term, at time.Time) (int64, bool) {
	i := sort.Search(len(ts), func(k int) bool { return ts[k].Began.After(at) }) - 1
	if i < 0 {
		return 0, false
	}
	return ts[i].Epoch, true
}

// frozenIn reports whether replica was frozen past its deadline in a
// window that began at or after from and before to.
func frozenIn(fs []Frozen, replica string, from, to time.Time) bool {
	for _, f := range fs {
		if f.Replica == replica && !f.From.Before(from) && f.From.Before(to) {
			return true
		}
	}
	return false
}

// Report writes the table of faults by kind, with the longest leaderless
// time each caused and its bound, the problems found, and then the summary
// line that tests outside the repository read, always last:
//
//	faults=N late_writes=N stale_commits=N overlaps_unexplained=N overlaps_frozen=N refused=N leaderless_max=Ds seed=N
func (v Verdict) Report(w io.Writer, h History) error {
	kinds := make([]string, 0, len(v.ByKind))
	for k := range v.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tCOUNT\tLEADERLESS MAX\tBOUND\tOVER BOUND\tTHAT GAP")
	for _, k := range kinds {
		s := v.ByKind[k]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", k, s.Count, s.Longest.Length().Round(time.Millisecond), h.Timing.Bound(k), s.OverBound, s.Longest)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range v.Inconsistent {
		fmt.Fprintf(w, "inconsistent term record: %s\n", p)
	}
	for _, x := range v.LateWrites {
		fmt.Fprintf(w, "late write: %s epoch %d by %s committed %s\n", x.Role, x.Epoch, x.Writer, x.Commit.UTC().Format(time.RFC3339Nano))
	}
	for _, x := range v.StaleCommits {
		fmt.Fprintf(w, "stale commit: %s epoch %d by %s committed %s\n", x.Role, x.Epoch, x.Writer, x.Commit.UTC().Format(time.RFC3339Nano))
	}
	for _, o := range v.Overlaps {
		fmt.Fprintln(w, o)
	}
	for _, p := range v.AtEnd {
		fmt.Fprintf(w, "at the end: %s\n", p)
	}
	for _, g := range v.OverBound {
		fmt.Fprintf(w, "leaderless past its bound: %s, after %s (no fault's reach covers it from %s: %s over)\n",
			g, cmp.Or(g.Cause, "no fault"), g.Uncovered.UTC().Format(stamp), g.To.Commit.Sub(g.Uncovered).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "leaderless gaps past their bound: %d\n", len(v.OverBound))
	if g := v.Longest; g.Length() > 0 {
		fmt.Fprintf(w, "longest leaderless gap: %s, after %s: %s\n", g.Length().Round(time.Millisecond), cmp.Or(g.Cause, "no fault"), g)
	}
	_, err := fmt.Fprintf(w, "faults=%d late_writes=%d stale_commits=%d overlaps_unexplained=%d overlaps_frozen=%d refused=%d leaderless_max=%.1fs seed=%d\n",
		len(h.Faults), len(v.LateWrites), len(v.StaleCommits), v.OverlapsUnexplained, v.OverlapsFrozen, h.Refused, v.Longest.Length().Round(100*time.Millisecond).Seconds(), h.Seed)
	return err
}

// String shows a gap by its two writes.
func (g Gap) String() string {
	a, b := g.From, g.To
	if a.Role == "" {
		return ""
	}
	return fmt.Sprintf("%s epoch %d (%s) at %s, then epoch %d (%s) at %s", a.Role, a.Epoch, a.Writer, a.Commit.UTC().Format(stamp), b.Epoch, b.Writer, b.Commit.UTC().Format(stamp))
}

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

// Fault is one fault the schedule injected.
type Fault struct {
	Kind string
	At   time.Time
}

// History is what a run recorded.
type History struct {
	Writes  []Write
	Terms   []Term
	Work    []Work
	Frozen  []Frozen
	Faults  []Fault
	Refused int // fenced writes the database refused (a stale token)
	Seed    int64
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
	// LeaderlessMax is the longest gap between a role's committed writes,
	// AfterFault the kind of the fault it follows (the first injected
	// during it, else the last before it), LongestGap the gap itself.
	LeaderlessMax time.Duration
	AfterFault    string
	LongestGap    [2]Write
	// ByKind is, per fault kind, how many were injected and the longest
	// gap that one of them was the last fault before.
	ByKind map[string]KindStats
	// Overlaps lists the overlaps, explained or not, for the report.
	Overlaps []string
	// AtEnd is History.AtEnd, and roles whose last committed write is not
	// of their last term.
	AtEnd []string
}

// KindStats is one fault kind's line of the report.
type KindStats struct {
	Count         int
	LeaderlessMax time.Duration
	// Gap is that longest gap's last write before and first after.
	Gap [2]Write
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

	// Leaderless time: gaps between a role's committed writes.
	faults := slices.Clone(h.Faults)
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
		gap := w.Commit.Sub(prev.Commit)
		// The fault this gap follows: the first one injected during it,
		// else the last one before it began.
		j := sort.Search(len(faults), func(k int) bool { return faults[k].At.After(prev.Commit) })
		if j == len(faults) || !faults[j].At.Before(w.Commit) {
			j--
		}
		kind := ""
		if j >= 0 {
			kind = faults[j].Kind
			s := v.ByKind[kind]
			if gap > s.LeaderlessMax {
				s.LeaderlessMax, s.Gap = gap, [2]Write{prev, w}
			}
			v.ByKind[kind] = s
		}
		if gap > v.LeaderlessMax {
			v.LeaderlessMax, v.AfterFault, v.LongestGap = gap, kind, [2]Write{prev, w}
		}
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
// time after one of each, and then the summary line that tests outside the
// repository read, always last:
//
//	faults=N late_writes=N stale_commits=N overlaps_unexplained=N overlaps_frozen=N refused=N leaderless_max=Ds seed=N
func (v Verdict) Report(w io.Writer, h History) error {
	kinds := make([]string, 0, len(v.ByKind))
	for k := range v.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tCOUNT\tLEADERLESS MAX AFTER\tTHAT GAP")
	for _, k := range kinds {
		s := v.ByKind[k]
		gap := ""
		if a, b := s.Gap[0], s.Gap[1]; a.Role != "" {
			gap = fmt.Sprintf("%s epoch %d at %s, then %d at %s", a.Role, a.Epoch, a.Commit.UTC().Format(stamp), b.Epoch, b.Commit.UTC().Format(stamp))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k, s.Count, s.LeaderlessMax.Round(time.Millisecond), gap)
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
	if v.LeaderlessMax > 0 {
		a, b := v.LongestGap[0], v.LongestGap[1]
		fmt.Fprintf(w, "longest leaderless gap: %s, after %s: %s epoch %d (%s) at %s, then epoch %d (%s) at %s\n",
			v.LeaderlessMax.Round(time.Millisecond), cmp.Or(v.AfterFault, "no fault"), a.Role, a.Epoch, a.Writer, a.Commit.UTC().Format(stamp), b.Epoch, b.Writer, b.Commit.UTC().Format(stamp))
	}
	_, err := fmt.Fprintf(w, "faults=%d late_writes=%d stale_commits=%d overlaps_unexplained=%d overlaps_frozen=%d refused=%d leaderless_max=%.1fs seed=%d\n",
		len(h.Faults), len(v.LateWrites), len(v.StaleCommits), v.OverlapsUnexplained, v.OverlapsFrozen, h.Refused, v.LeaderlessMax.Round(100*time.Millisecond).Seconds(), h.Seed)
	return err
}

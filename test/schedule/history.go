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

// Work is one interval in which a worker held its role's flock witness.
type Work struct {
	Role, Writer string
	From, To     time.Time
}

// Frozen is a window in which the replica running Writer was frozen past
// its lease's deadline: the case the fencing token exists for, in which
// two workers may run at once but the late one's writes must be refused.
type Frozen struct {
	Writer   string
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
	// AfterFault the kind of the last fault before it ended.
	LeaderlessMax time.Duration
	AfterFault    string
	// ByKind is, per fault kind, how many were injected and the longest
	// gap that one of them was the last fault before.
	ByKind map[string]KindStats
}

// KindStats is one fault kind's line of the report.
type KindStats struct {
	Count         int
	LeaderlessMax time.Duration
}

// OK reports whether the history keeps every promise: no late write, no
// stale commit, a consistent term record and no overlap that a frozen
// replica does not explain.
func (v Verdict) OK() bool {
	return len(v.LateWrites) == 0 && len(v.StaleCommits) == 0 && len(v.Inconsistent) == 0 && v.OverlapsUnexplained == 0
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

	// Overlaps of the witness, per role.
	work := slices.Clone(h.Work)
	slices.SortStableFunc(work, func(a, b Work) int {
		return cmp.Or(strings.Compare(a.Role, b.Role), a.From.Compare(b.From))
	})
	for i, a := range work {
		for _, b := range work[i+1:] {
			if b.Role != a.Role || !b.From.Before(a.To) {
				break
			}
			from, to := b.From, minTime(a.To, b.To)
			if frozenDuring(h.Frozen, a.Writer, from, to) || frozenDuring(h.Frozen, b.Writer, from, to) {
				v.OverlapsFrozen++
			} else {
				v.OverlapsUnexplained++
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
		// The fault this gap follows: the last one before it ended.
		j := sort.Search(len(faults), func(k int) bool { return !faults[k].At.Before(w.Commit) }) - 1
		kind := ""
		if j >= 0 {
			kind = faults[j].Kind
			s := v.ByKind[kind]
			s.LeaderlessMax = max(s.LeaderlessMax, gap)
			v.ByKind[kind] = s
		}
		if gap > v.LeaderlessMax {
			v.LeaderlessMax, v.AfterFault = gap, kind
		}
	}
	return v
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

func frozenDuring(fs []Frozen, writer string, from, to time.Time) bool {
	for _, f := range fs {
		if f.Writer == writer && f.From.Before(to) && from.Before(f.To) {
			return true
		}
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
	fmt.Fprintln(tw, "FAULT\tCOUNT\tLEADERLESS MAX AFTER")
	for _, k := range kinds {
		s := v.ByKind[k]
		fmt.Fprintf(tw, "%s\t%d\t%s\n", k, s.Count, s.LeaderlessMax.Round(time.Millisecond))
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
	_, err := fmt.Fprintf(w, "faults=%d late_writes=%d stale_commits=%d overlaps_unexplained=%d overlaps_frozen=%d refused=%d leaderless_max=%.1fs seed=%d\n",
		len(h.Faults), len(v.LateWrites), len(v.StaleCommits), v.OverlapsUnexplained, v.OverlapsFrozen, h.Refused, v.LeaderlessMax.Round(100*time.Millisecond).Seconds(), h.Seed)
	return err
}

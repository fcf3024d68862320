package schedule

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// clean is a history in which every promise held: poller's term 1 by a,
// a SIGKILL, term 2 by b; b's work began after a's ended.
func clean() History {
	return History{
		Terms: []Term{{"poller", 1, at(0)}, {"poller", 2, at(1000)}},
		Writes: []Write{
			{"poller", 1, "a", at(100)}, {"poller", 1, "a", at(150)}, {"poller", 1, "a", at(200)},
			{"poller", 2, "b", at(1050)}, {"poller", 2, "b", at(1100)},
		},
		Work: []Work{{Role: "poller", Writer: "a/1", Replica: "a", From: at(10), To: at(210)},
			{Role: "poller", Writer: "b/2", Replica: "b", From: at(1010), To: at(1200)}},
		Faults: []Fault{{Kind: "sigkill", At: at(205)}, {Kind: "pause", At: at(1150)}},
		Seed:   42,
		Timing: fleetTiming,
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	v := Check(clean())
	if !v.OK() || v.OverlapsFrozen != 0 {
		t.Fatalf("a clean history failed: %+v", v)
	}
	if v.Longest.Length() != 850*time.Millisecond || v.Longest.Cause != "sigkill" || len(v.OverBound) != 0 {
		t.Errorf("leaderless %s after %q (%d past their bound), want 850ms after sigkill", v.Longest.Length(), v.Longest.Cause, len(v.OverBound))
	}
	if s := v.ByKind["sigkill"]; s.Count != 1 || s.Longest.Length() != 850*time.Millisecond {
		t.Errorf("sigkill stats %+v", s)
	}
}

// A row of epoch 1 that commits after a row of epoch 2: a late write, and
// stale too (term 2 had begun).
func TestLateWriteIsFound(t *testing.T) {
	h := clean()
	h.Writes = append(h.Writes, Write{"poller", 1, "a", at(1120)})
	v := Check(h)
	if v.OK() || len(v.LateWrites) != 1 || v.LateWrites[0].Commit != at(1120) || len(v.StaleCommits) != 1 {
		t.Fatalf("late write not found: %+v", v)
	}
}

// A row of epoch 1 that commits after term 2 began but before its first
// write: not late by the rows alone, but stale by the term record.
func TestStaleCommitIsFound(t *testing.T) {
	h := clean()
	h.Writes = append(h.Writes, Write{"poller", 1, "a", at(1010)})
	v := Check(h)
	if v.OK() || len(v.LateWrites) != 0 || len(v.StaleCommits) != 1 || v.StaleCommits[0].Commit != at(1010) {
		t.Fatalf("stale commit not found: %+v", v)
	}
}

func TestInconsistentTermRecordIsFound(t *testing.T) {
	h := clean()
	h.Terms = append(h.Terms, Term{"poller", 2, at(2000)})
	if v := Check(h); v.OK() || len(v.Inconsistent) == 0 {
		t.Fatalf("an epoch twice was not found: %+v", v)
	}
}

// Two workers at once: unexplained, unless one's replica was frozen past
// its deadline then.
func TestOverlapsAreSplitByFrozenReplicas(t *testing.T) {
	h := clean()
	h.Work[0].To = at(1100) // a kept working into b's term
	v := Check(h)
	if v.OK() || v.OverlapsUnexplained != 1 || v.OverlapsFrozen != 0 {
		t.Fatalf("overlap: %+v", v)
	}
	h.Frozen = []Frozen{{Replica: "a", From: at(300), To: at(1300)}}
	v = Check(h)
	if !v.OK() || v.OverlapsUnexplained != 0 || v.OverlapsFrozen != 1 {
		t.Fatalf("overlap while a was frozen past its deadline: %+v", v)
	}
	// Another role's work never overlaps poller's.
	h = clean()
	h.Work = append(h.Work, Work{Role: "sweeper", Writer: "c/3", Replica: "c", From: at(0), To: at(5000)})
	if v := Check(h); v.OverlapsUnexplained != 0 {
		t.Fatalf("roles mixed: %+v", v)
	}
}

func TestReportEndsWithTheSummaryLine(t *testing.T) {
	h := clean()
	h.Refused = 3
	var b bytes.Buffer
	if err := Check(h).Report(&b, h); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := "faults=2 late_writes=0 stale_commits=0 overlaps_unexplained=0 overlaps_frozen=0 refused=3 leaderless_max=0.9s seed=42"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("last line\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(b.String(), "sigkill") {
		t.Errorf("no line for sigkill:\n%s", b.String())
	}
}

// The witness's own sighting counts even when the clocks put the two runs
// apart (a worker killed outright has only its last sign of life as its
// end); a freeze of the other replica, or one after the overlap began,
// explains nothing.
func TestOverlapSeenByTheFlock(t *testing.T) {
	h := clean()
	h.Work[1].HeldBy = "a/1"
	v := Check(h)
	if v.OK() || v.OverlapsUnexplained != 1 {
		t.Fatalf("the flock's overlap was not counted: %+v", v)
	}
	h.Frozen = []Frozen{{Replica: "b", From: at(300), To: at(1300)}, {Replica: "a", From: at(1100), To: at(1300)}}
	if v := Check(h); v.OK() || v.OverlapsUnexplained != 1 || v.OverlapsFrozen != 0 {
		t.Fatalf("an overlap was explained by the wrong freeze: %+v", v)
	}
}

// A role whose last committed write is of an older term than its last:
// not led at the end. So is one the run found wanting.
func TestNotLedAtTheEnd(t *testing.T) {
	h := clean()
	h.Terms = append(h.Terms, Term{"poller", 3, at(1300)})
	if v := Check(h); v.OK() || len(v.AtEnd) != 1 {
		t.Fatalf("a role not led at the end passed: %+v", v)
	}
	h = clean()
	h.AtEnd = []string{"poller: 2 programs"}
	if v := Check(h); v.OK() {
		t.Fatalf("a problem at the end passed: %+v", v)
	}
}

// A gap is put down to the first fault injected during it, not a later
// one that came while the role was still leaderless.
func TestGapFollowsTheFirstFaultInIt(t *testing.T) {
	h := clean()
	h.Faults = append(h.Faults, Fault{Kind: "pause", At: at(600)})
	v := Check(h)
	if v.Longest.Cause != "sigkill" || v.ByKind["pause"].Longest.Length() != 50*time.Millisecond {
		t.Fatalf("gap after %q, pause's %s", v.Longest.Cause, v.ByKind["pause"].Longest.Length())
	}
}

// gapHistory is poller led by a until 1 s, then by b from end: one gap.
func gapHistory(end int, faults ...Fault) History {
	return History{
		Terms:  []Term{{"poller", 1, at(0)}, {"poller", 2, at(end - 50)}},
		Writes: []Write{{"poller", 1, "a", at(1000)}, {"poller", 2, "b", at(end)}},
		Faults: faults, Timing: fleetTiming, Seed: 1,
	}
}

// Each fault reaches as far as the lease's documented behaviour takes it:
// a gap within that reach is its; one past it is over its bound, put down
// to the fault whose reach ran out, from the moment it did.
func TestGapsAreHeldToTheirFaultsBounds(t *testing.T) {
	tm := fleetTiming
	restart := Fault{Kind: "restart-fast", At: at(1100), Until: at(3000)}
	upTo := 3000 + int((tm.Retry + tm.PoolerRetry + tm.Start).Milliseconds())
	evicted := int((tm.Evicted() + tm.Start).Milliseconds())
	for _, c := range []struct {
		name  string
		h     History
		cause string
		over  bool
		uncov int // ms, when over
	}{
		{"a restart, writes back within its reach", gapHistory(upTo, restart), "restart-fast", false, 0},
		{"a restart, writes back past its reach", gapHistory(upTo+500, restart), "restart-fast", true, upTo},
		{"a SIGKILL reaches Start", gapHistory(2040, Fault{Kind: "sigkill", At: at(1050)}), "sigkill", false, 0},
		{"a SIGKILL does not explain 3 s", gapHistory(4000, Fault{Kind: "sigkill", At: at(1050)}), "sigkill", true, 2050},
		{"a partition reaches eviction, whenever it heals",
			gapHistory(1100+evicted, Fault{Kind: "partition", At: at(1100), Until: at(4000)}), "partition", false, 0},
		{"a SIGKILL then a partition: the partition's reach covers it",
			gapHistory(9000, Fault{Kind: "sigkill", At: at(1050)}, Fault{Kind: "partition", At: at(1900), Until: at(2500)}), "partition", false, 0},
		{"a hole between two faults' reach",
			gapHistory(9000, Fault{Kind: "sigkill", At: at(1050)}, Fault{Kind: "freeze-program", At: at(4000), Until: at(8500)}), "sigkill", true, 2050},
		{"a stand-by frozen before the gap, granted the key as it began: evicted from then",
			gapHistory(1000+evicted, Fault{Kind: "freeze-past", At: at(-3000), Until: at(12000)}), "freeze-past", false, 0},
		{"a frozen leader thawed before its eviction leads on",
			gapHistory(6000, Fault{Kind: "freeze-past", At: at(1010), Until: at(4000)}), "freeze-past", true, 5000},
		{"a failover is over in Start, however long its command waited",
			gapHistory(6000, Fault{Kind: "failover-role", At: at(1010), Until: at(5900)}), "failover-role", true, 2010},
		{"a stand-by cut off: it reconnects after the heal and checks after one wait",
			gapHistory(1000+evicted+900, Fault{Kind: "freeze-past", At: at(1010), Replica: "a"},
				Fault{Kind: "partition", At: at(500), Until: at(9000), Replica: "b"}), "partition", false, 0},
		{"the leader cut off: the heal does not stretch it",
			gapHistory(1000+evicted+900, Fault{Kind: "partition", At: at(1010), Until: at(9000), Replica: "a"}), "partition", true, 1010 + evicted},
		{"a pause explains nothing", gapHistory(4000, Fault{Kind: "pause", At: at(1100)}), "pause", true, 2000},
		{"no fault at all", gapHistory(4000), "", true, 2000},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Check(c.h)
			if !v.OK() {
				t.Fatalf("failed otherwise: %+v", v)
			}
			if v.Longest.Cause != c.cause || (len(v.OverBound) == 1) != c.over {
				t.Fatalf("cause %q, %d past their bound; want %q, past: %t", v.Longest.Cause, len(v.OverBound), c.cause, c.over)
			}
			if c.over {
				if g := v.OverBound[0]; !g.Uncovered.Equal(at(c.uncov)) {
					t.Errorf("uncovered from %s, want %s", g.Uncovered.Format(stamp), at(c.uncov).Format(stamp))
				}
				if c.cause != "" && v.ByKind[c.cause].OverBound != 1 {
					t.Errorf("%s's line counts %d past their bound", c.cause, v.ByKind[c.cause].OverBound)
				}
				var b bytes.Buffer
				if err := v.Report(&b, c.h); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(b.String(), "leaderless gaps past their bound: 1\n") {
					t.Errorf("report:\n%s", b.String())
				}
			}
		})
	}
}

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
		Faults: []Fault{{"sigkill", at(205)}, {"pause", at(1150)}},
		Seed:   42,
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	v := Check(clean())
	if !v.OK() || v.OverlapsFrozen != 0 {
		t.Fatalf("a clean history failed: %+v", v)
	}
	if v.LeaderlessMax != 850*time.Millisecond || v.AfterFault != "sigkill" {
		t.Errorf("leaderless %s after %q, want 850ms after sigkill", v.LeaderlessMax, v.AfterFault)
	}
	if s := v.ByKind["sigkill"]; s.Count != 1 || s.LeaderlessMax != 850*time.Millisecond {
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
	h.Faults = append(h.Faults, Fault{"pause", at(600)})
	v := Check(h)
	if v.AfterFault != "sigkill" || v.ByKind["pause"].LeaderlessMax != 50*time.Millisecond {
		t.Fatalf("gap after %q, pause's %s", v.AfterFault, v.ByKind["pause"].LeaderlessMax)
	}
}

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
		Work:   []Work{{"poller", "a", at(10), at(210)}, {"poller", "b", at(1010), at(1200)}},
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
	h.Frozen = []Frozen{{"a", at(300), at(1300)}}
	v = Check(h)
	if !v.OK() || v.OverlapsUnexplained != 0 || v.OverlapsFrozen != 1 {
		t.Fatalf("overlap while a was frozen past its deadline: %+v", v)
	}
	// Another role's work never overlaps poller's.
	h = clean()
	h.Work = append(h.Work, Work{"sweeper", "c", at(0), at(5000)})
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

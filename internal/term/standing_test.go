package term

import (
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/locks"
)

// TestHealthByTheRecord: a lease healthy by its locks is healthy by the
// record only when its holder leads a term it renews; what the record
// cannot judge (a pair key, a lock --all added) stays with the locks.
func TestHealthByTheRecord(t *testing.T) {
	now := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	start := now.Add(-time.Hour)
	tm := timing.Lease{HeartbeatInterval: 15 * time.Second, HeartbeatTimeout: 5 * time.Second, StopTimeout: 10 * time.Second}
	term := func(pid uint32, renewedAgo time.Duration) Term {
		return Term{Key: 7, Epoch: 41, ID: "a1", Holder: Holder{Host: "vm1", OSPID: 555, BackendPID: pid, BackendStart: start}, Timing: tm,
			Began: start, Renewed: now.Add(-renewedAgo)}
	}
	// held is key held by pid 100, idle for idle; bound is its lease
	// mark's (0: no mark, not a lease of leasectl).
	heldBy := func(key locks.Key, requested bool, bound, idle time.Duration) locks.Lease {
		return locks.Lease{Role: "poller", Requested: requested, KeyLocks: locks.KeyLocks{Key: key,
			Holders: []locks.Session{{PID: 100, Granted: true, BackendStart: start, State: "idle", StateChange: now.Add(-idle), LeaseBound: bound}}}}
	}
	held := func(key locks.Key, requested bool) locks.Lease { return heldBy(key, requested, tm.Stopped(), 0) }
	hidden := heldBy(locks.BigintKey(7), true, tm.Stopped(), 0)
	hidden.Holders[0].State, hidden.Holders[0].StateChange, hidden.Holders[0].BackendStart, hidden.Holders[0].Hidden = "", time.Time{}, time.Time{}, true
	free := locks.Lease{Role: "poller", Requested: true, KeyLocks: locks.KeyLocks{Key: locks.BigintKey(7)}}
	for _, tc := range []struct {
		name    string
		rec     *Record
		lease   locks.Lease
		health  string
		ok      bool
		problem string
	}{
		{"no record", nil, held(locks.BigintKey(7), true), "ok", true, ""},
		{"live", &Record{Terms: map[int64]Term{7: term(100, time.Second)}, Now: now}, held(locks.BigintKey(7), true), "ok", true, ""},
		{"stale", &Record{Terms: map[int64]Term{7: term(100, time.Minute)}, Now: now}, held(locks.BigintKey(7), true), "term_stale", false,
			"poller's holder pid 100 has not renewed its term 41 for 1m0s"},
		// A lease that has yet to begin its term is no alert until it has
		// been idle for longer than its bound (30s here).
		{"a lease waiting for the previous term", &Record{Terms: map[int64]Term{7: term(99, time.Second)}, Now: now}, held(locks.BigintKey(7), true), "ok", true, ""},
		{"a lease about to begin its first term", &Record{Terms: map[int64]Term{}, Now: now}, heldBy(locks.BigintKey(7), true, tm.Stopped(), 29*time.Second), "ok", true, ""},
		{"a lease idle past its bound without a term", &Record{Terms: map[int64]Term{}, Now: now}, heldBy(locks.BigintKey(7), true, tm.Stopped(), 31*time.Second), "no_term", false,
			"poller's holder pid 100, a lease of leasectl, has held the key idle for 31s without beginning a term, longer than its bound (heartbeat interval + timeout + stop time, 30s)"},
		{"its own short bound", &Record{Terms: map[int64]Term{7: term(99, time.Second)}, Now: now}, heldBy(locks.BigintKey(7), true, 3*time.Second, 4*time.Second), "no_term", false,
			"has held the key idle for 4s without beginning a term, longer than its bound (heartbeat interval + timeout + stop time, 3s)"},
		{"a lease whose state is hidden", &Record{Terms: map[int64]Term{}, Now: now}, hidden, "ok", true, ""},
		// Any other elector leads by holding the key, whatever the record.
		{"not a lease, no term ever", &Record{Terms: map[int64]Term{}, Now: now}, heldBy(locks.BigintKey(7), true, 0, 40*time.Second), "ok", true, ""},
		{"not a lease, after a lease's term", &Record{Terms: map[int64]Term{7: term(99, time.Second)}, Now: now}, heldBy(locks.BigintKey(7), true, 0, 40*time.Second), "ok", true, ""},
		{"not a lease, but leads the term (a leasectl from before the mark)", &Record{Terms: map[int64]Term{7: term(100, time.Minute)}, Now: now}, heldBy(locks.BigintKey(7), true, 0, 0), "term_stale", false,
			"poller's holder pid 100 has not renewed its term 41 for 1m0s"},
		{"a lock --all added", &Record{Terms: map[int64]Term{}, Now: now}, held(locks.BigintKey(7), false), "ok", true, ""},
		{"a pair key", &Record{Terms: map[int64]Term{}, Now: now}, held(locks.PairOf(0, 7), true), "ok", true, ""},
		{"free", &Record{Terms: map[int64]Term{}, Now: now}, free, "no_holder", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.rec.Health(tc.lease, now, 45*time.Second)
			if h.String() != tc.health || h.OK() != tc.ok {
				t.Errorf("health %s (ok %v), want %s (ok %v)", h, h.OK(), tc.health, tc.ok)
			}
			if p := h.Problem("poller"); !strings.Contains(p, tc.problem) || (tc.problem == "") != (p == "") {
				t.Errorf("problem %q, want %q", p, tc.problem)
			}
			if p, placed := tc.rec.Place(tc.lease); placed && p.Standing == StandingOther {
				t.Errorf("placed as %s: the record says nothing of such a holder", p.Standing)
			}
		})
	}
}

// TestWhatTheNewHolderWaitsFor: the line failover prints while the new
// holder has not begun its term.
func TestWhatTheNewHolderWaitsFor(t *testing.T) {
	now := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	tm := timing.Lease{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second, StopTimeout: time.Second}
	prev := Term{Epoch: 41, ID: "a1", Holder: Holder{Host: "vm1", OSPID: 555, BackendPID: 99}, Timing: tm, Renewed: now.Add(-time.Second)}
	holder := locks.Session{PID: 100, Granted: true}
	fence := &locks.Session{PID: 98, Granted: true}
	ended := prev
	ended.Ended = now.Add(-time.Second)
	for _, tc := range []struct {
		name string
		w    Wait
		say  string
	}{
		{"the old work stops", Wait{Place: Place{Standing: StandingWaiting, Term: prev, HasTerm: true, Holder: holder, Now: now}, Held: true, Fence: fence},
			"pid 100 holds the key but has not begun a term: it waits for the previous leader's work to stop (pid 98 holds its stop fence) and for term 41 of vm1 pid 555 (backend 99) to end (deadline 14:00:03, in 3s)"},
		{"the deadline passed", Wait{Place: Place{Standing: StandingWaiting, Term: prev, HasTerm: true, Holder: holder, Now: now.Add(time.Minute)}, Held: true},
			"pid 100 holds the key but has not begun a term: term 41 of vm1 pid 555 (backend 99) has passed its deadline 14:00:03 without recording its end"},
		{"about to begin", Wait{Place: Place{Standing: StandingWaiting, Term: ended, HasTerm: true, Holder: holder, Now: now}, Held: true},
			"pid 100 holds the key but has not begun a term: no term is open for it to wait for, and it has yet to begin its own"},
		{"free", Wait{Place: Place{Standing: StandingFree, Term: prev, HasTerm: true, Now: now}},
			"nobody holds the key, and term 41 of vm1 pid 555 (backend 99) has not ended"},
	} {
		if got := tc.w.String(); !strings.HasPrefix(got, tc.say) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.say)
		}
	}
	holder.LeaseBound = 3 * time.Second
	w := Wait{Place: Place{Standing: StandingWaiting, Term: ended, HasTerm: true, Holder: holder, Now: now}, Held: true}
	if got := w.Explain(); !strings.Contains(got, "it is about to begin its own, or it is a frozen stand-by that the server granted the key (overdue once idle for longer than its bound, 3s)") {
		t.Errorf("at the end of the wait: %q", got)
	}
	later := w
	later.Now = now.Add(time.Second)
	if w.phase() != later.phase() {
		t.Errorf("the time left alone changed the phase")
	}
}

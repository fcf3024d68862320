package locks

import (
	"testing"
	"time"
)

func TestMeasureTakeoverTakesTheTighterUpperBound(t *testing.T) {
	sent := time.Now()
	server := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	term := Termination{Sent: sent, ServerStart: server, Took: 101 * time.Millisecond}
	seen := sent.Add(110 * time.Millisecond)
	for _, tc := range []struct {
		name      string
		h         Session
		want      time.Duration
		serverClk bool
	}{
		{"idle since the statement that took the key", Session{State: "idle", StateChange: server.Add(2 * time.Millisecond)}, 2 * time.Millisecond, true},
		{"active: maybe still in the statement that took it", Session{State: "active", StateChange: server.Add(2 * time.Millisecond)}, 110 * time.Millisecond, false},
		{"idle since before the signal: not this takeover's change", Session{State: "idle", StateChange: server.Add(-time.Second)}, 110 * time.Millisecond, false},
		{"state hidden from this role", Session{Hidden: true}, 110 * time.Millisecond, false},
		{"idle, but the client saw it sooner", Session{State: "idle", StateChange: server.Add(time.Second)}, 110 * time.Millisecond, false},
	} {
		got, byServer := measureTakeover(term, tc.h, seen)
		if got != tc.want || byServer != tc.serverClk {
			t.Errorf("%s: %v (server clock %v), want %v (%v)", tc.name, got, byServer, tc.want, tc.serverClk)
		}
	}
}

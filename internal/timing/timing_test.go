package timing

import (
	"strings"
	"testing"
	"time"
)

func TestTCP(t *testing.T) {
	s := time.Second
	cases := []struct {
		what             string
		tcp              TCP
		silent, inFlight time.Duration
		earliest, latest time.Duration
	}{
		{"OS defaults", TCP{}, 7200*s + 9*75*s, OSRetransmitGiveUp, OSRetransmitGiveUp, 7200*s + 9*75*s},
		{"keepalives only", TCP{30 * s, 10 * s, 3, 0}, 60 * s, OSRetransmitGiveUp, 60 * s, OSRetransmitGiveUp},
		// With tcp_user_timeout the probe count is ignored: not before the
		// first probe has gone unanswered, then at the first probe by which
		// nothing has arrived for tcp_user_timeout.
		{"user timeout before the first probe", TCP{30 * s, 10 * s, 3, 5 * s}, 40 * s, 5 * s, 5 * s, 40 * s},
		{"user timeout past the probes", TCP{30 * s, 10 * s, 3, time.Hour}, time.Hour, time.Hour, time.Hour, time.Hour},
		{"user timeout between probes", TCP{30 * s, 10 * s, 3, 55 * s}, 60 * s, 55 * s, 55 * s, 60 * s},
		// Measured under a real partition (test/chaos TestDeadPeerTime).
		{"measured: probes, then the user timeout", TCP{3 * s, s, 20, 10 * s}, 10 * s, 10 * s, 10 * s, 10 * s},
		{"measured: user timeout first", TCP{6 * s, s, 10, 3 * s}, 7 * s, 3 * s, 3 * s, 7 * s},
		{"count below the user timeout", TCP{3 * s, s, 2, 10 * s}, 10 * s, 10 * s, 10 * s, 10 * s},
	}
	for _, tc := range cases {
		if got := tc.tcp.Silent(); got != tc.silent {
			t.Errorf("%s: Silent = %s, want %s", tc.what, got, tc.silent)
		}
		if got := tc.tcp.InFlight(); got != tc.inFlight {
			t.Errorf("%s: InFlight = %s, want %s", tc.what, got, tc.inFlight)
		}
		if got := tc.tcp.Earliest(); got != tc.earliest {
			t.Errorf("%s: Earliest = %s, want %s", tc.what, got, tc.earliest)
		}
		if got := tc.tcp.Latest(); got != tc.latest {
			t.Errorf("%s: Latest = %s, want %s", tc.what, got, tc.latest)
		}
	}
}

// TestLeaseServerTCP: the settings a lease puts on its own sessions never
// let the server drop a silent leader before it has stopped, on either
// path, for a range of timings.
func TestLeaseServerTCP(t *testing.T) {
	for _, l := range []Lease{
		{DefaultHeartbeatInterval, DefaultHeartbeatTimeout, CommandStop(DefaultStopTimeout)},
		{time.Second, time.Second, CommandStop(time.Second)},
		{1500 * time.Millisecond, 700 * time.Millisecond, 300 * time.Millisecond},
		{time.Minute, 10 * time.Second, time.Hour},
	} {
		st := l.DefaultServerTimeout()
		if err := l.CheckServerTimeout(st); err != nil {
			t.Errorf("%+v: default server timeout: %v", l, err)
		}
		tcp := l.ServerTCP(st)
		if e := tcp.Earliest(); e <= l.Stopped() {
			t.Errorf("%+v: %s drops a silent leader after %s, before it has stopped (%s)", l, tcp, e, l.Stopped())
		}
		if tcp.Idle < l.Notice() {
			t.Errorf("%+v: keepalive probes start after %s, before a live leader's longest silence %s", l, tcp.Idle, l.Notice())
		}
	}
	// The defaults of `leasectl run`: 15 s + 2 × 5 s + (10 s + 2 s).
	l := Lease{DefaultHeartbeatInterval, DefaultHeartbeatTimeout, CommandStop(DefaultStopTimeout)}
	if got := l.DefaultServerTimeout(); got != 37*time.Second {
		t.Errorf("default server timeout of leasectl run: %s, want 37s", got)
	}
	if tcp := l.ServerTCP(37 * time.Second); tcp != (TCP{20 * time.Second, time.Second, 17, 37 * time.Second}) {
		t.Errorf("server settings of leasectl run: %s", tcp)
	}
	if err := l.CheckServerTimeout(l.Stopped()); err == nil || !strings.Contains(err.Error(), "must exceed") {
		t.Errorf("a server timeout equal to Stopped passed: %v", err)
	}
}

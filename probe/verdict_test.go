package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/timing"
)

func TestDecide(t *testing.T) {
	ok := Check{Name: "a", Status: Pass}
	warned := Check{Name: "b", Status: Warn}
	unsafe := Check{Name: "c", Status: Fail, Cause: Safety}
	stuck := Check{Name: "e", Status: Fail, Cause: Liveness}
	note := Check{Name: "d", Status: Info}
	cases := []struct {
		checks []Check
		strict bool
		want   Verdict
		cause  Cause
	}{
		{[]Check{ok, note}, false, Stable, ""},
		{[]Check{ok, warned}, false, Stable, ""},
		{[]Check{ok, warned}, true, Refused, Strict},
		{[]Check{ok, unsafe}, false, Refused, Safety},
		{[]Check{stuck, ok}, false, Refused, Liveness},
		{[]Check{stuck, unsafe}, false, Refused, Safety},
		{[]Check{warned, stuck}, true, Refused, Liveness},
		{[]Check{note}, true, Stable, ""},
	}
	for i, tc := range cases {
		if got, cause := Decide(tc.checks, tc.strict); got != tc.want || cause != tc.cause {
			t.Errorf("case %d: %s (%s), want %s (%s)", i, got, cause, tc.want, tc.cause)
		}
	}
}

func TestCheckDeadPeer(t *testing.T) {
	s := time.Second
	hb, to := 15*s, 5*s
	tcp := func(idle, interval time.Duration, count int, user time.Duration) serverSettings {
		return serverSettings{TCP: timing.TCP{Idle: idle, Interval: interval, Count: count, UserTimeout: user}}
	}
	if c := checkDeadPeer(serverSettings{}, hb, to); c.Status != Warn || !strings.Contains(c.Detail, "2h11m") {
		t.Errorf("OS defaults: %+v", c)
	}
	if c := checkDeadPeer(tcp(5*s, 2*s, 3, 0), hb, to); c.Status != Warn || !strings.Contains(c.Detail, "two workers") {
		t.Errorf("detection faster than the lease notices: %+v", c)
	}
	// tcp_user_timeout shorter than the probes: the server gives up after
	// 16 s, not 15 + 8 s, before the lease notices at 20 s.
	if c := checkDeadPeer(tcp(15*s, s, 10, 8*s), hb, to); c.Status != Warn || !strings.Contains(c.Detail, "two workers") {
		t.Errorf("tcp_user_timeout ending the session before the lease notices: %+v", c)
	}
	// A reply in flight at the cut: tcp_user_timeout after that send,
	// whatever the keepalives say (measured: 5.75 s and 6.5 s).
	if c := checkDeadPeer(tcp(30*s, 10*s, 3, 5*s), hb, to); c.Status != Warn || !strings.Contains(c.Detail, "in flight") {
		t.Errorf("tcp_user_timeout 5 s with a reply in flight: %+v", c)
	}
	// Keepalives alone leave the in-flight path to retransmissions: ≈15 min.
	if c := checkDeadPeer(tcp(30*s, 10*s, 3, 0), hb, to); c.Status != Warn || !strings.Contains(c.Detail, "15m") {
		t.Errorf("keepalives without tcp_user_timeout: %+v", c)
	}
	if c := checkDeadPeer(tcp(30*s, 10*s, 3, time.Minute), hb, to); c.Status != Pass {
		t.Errorf("60 s detection on both paths: %+v", c)
	}
	// Only the server's own view counts: a client it sees on a unix socket.
	if c := checkDeadPeer(serverSettings{ClientOnSocket: true}, hb, to); c.Status != Pass {
		t.Errorf("unix socket: %+v", c)
	}
}

func TestCheckIdleSessionTimeout(t *testing.T) {
	hb := 15 * time.Second
	for _, tc := range []struct {
		timeout time.Duration
		want    Status
	}{{0, Pass}, {10 * time.Second, Fail}, {15 * time.Second, Fail}, {time.Minute, Warn}} {
		if got := checkIdleSessionTimeout(tc.timeout, hb).Status; got != tc.want {
			t.Errorf("idle_session_timeout %s: %s, want %s", tc.timeout, got, tc.want)
		}
	}
}

func TestEndpointHints(t *testing.T) {
	cases := []struct {
		host string
		port uint16
		want string
	}{
		{"db.internal", 6432, "PgBouncer"},
		{"aws-0-eu.pooler.supabase.com", 6543, "Supabase"},
		{"ep-cool-123-pooler.eu-central-1.aws.neon.tech", 5432, "Neon"},
		{"app.proxy-abc.eu-west-1.rds.amazonaws.com", 5432, "RDS Proxy"},
	}
	for _, tc := range cases {
		hints := strings.Join(EndpointHints(tc.host, tc.port), "; ")
		if !strings.Contains(hints, tc.want) {
			t.Errorf("%s:%d: %q lacks %q", tc.host, tc.port, hints, tc.want)
		}
	}
	if h := EndpointHints("db.internal", 5432); len(h) != 0 {
		t.Errorf("plain endpoint hinted: %v", h)
	}
}

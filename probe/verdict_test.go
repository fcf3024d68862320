package probe

import (
	"strings"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	pass := Check{Name: "a", Status: Pass}
	warn := Check{Name: "b", Status: Warn}
	fail := Check{Name: "c", Status: Fail}
	info := Check{Name: "d", Status: Info}
	cases := []struct {
		checks []Check
		strict bool
		want   Verdict
	}{
		{[]Check{pass, info}, false, Stable},
		{[]Check{pass, warn}, false, Stable},
		{[]Check{pass, warn}, true, Refused},
		{[]Check{pass, fail}, false, Refused},
		{[]Check{info}, true, Stable},
	}
	for i, tc := range cases {
		if got := Decide(tc.checks, tc.strict); got != tc.want {
			t.Errorf("case %d: %s, want %s", i, got, tc.want)
		}
	}
}

func TestDeadPeerTime(t *testing.T) {
	cases := []struct {
		idle, interval time.Duration
		count          int
		user           time.Duration
		want           time.Duration
	}{
		{0, 0, 0, 0, 7200*time.Second + 9*75*time.Second},
		{30 * time.Second, 10 * time.Second, 3, 0, 60 * time.Second},
		// With tcp_user_timeout the probe count is ignored: not before the
		// first probe has gone unanswered, then once tcp_user_timeout has
		// passed since the last packet, at the next probe.
		{30 * time.Second, 10 * time.Second, 3, 5 * time.Second, 40 * time.Second},
		{30 * time.Second, 10 * time.Second, 3, time.Hour, time.Hour},
		{30 * time.Second, 10 * time.Second, 3, 55 * time.Second, 60 * time.Second},
		// Measured under a real partition (internal/chaos TestDeadPeerTime).
		{3 * time.Second, time.Second, 20, 10 * time.Second, 10 * time.Second},
		{6 * time.Second, time.Second, 10, 3 * time.Second, 7 * time.Second},
		{3 * time.Second, time.Second, 2, 10 * time.Second, 10 * time.Second},
	}
	for _, tc := range cases {
		if got := DeadPeerTime(tc.idle, tc.interval, tc.count, tc.user); got != tc.want {
			t.Errorf("DeadPeerTime(%s,%s,%d,%s) = %s, want %s", tc.idle, tc.interval, tc.count, tc.user, got, tc.want)
		}
	}
}

func TestCheckDeadPeer(t *testing.T) {
	hb, to := 15*time.Second, 5*time.Second
	if c := checkDeadPeer(serverSettings{}, hb, to, false); c.Status != Warn || !strings.Contains(c.Detail, "2h11m") {
		t.Errorf("OS defaults: %+v", c)
	}
	fast := serverSettings{KeepalivesIdle: 5 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 3}
	if c := checkDeadPeer(fast, hb, to, false); c.Status != Warn || !strings.Contains(c.Detail, "two workers") {
		t.Errorf("detection faster than the lease notices: %+v", c)
	}
	// tcp_user_timeout shorter than the probes: the server gives up after
	// 16 s, not 15 + 8 s, before the lease notices at 20 s.
	early := serverSettings{KeepalivesIdle: 15 * time.Second, KeepalivesInterval: time.Second, KeepalivesCount: 10, UserTimeout: 8 * time.Second}
	if c := checkDeadPeer(early, hb, to, false); c.Status != Warn || !strings.Contains(c.Detail, "two workers") {
		t.Errorf("tcp_user_timeout ending the session before the lease notices: %+v", c)
	}
	good := serverSettings{KeepalivesIdle: 30 * time.Second, KeepalivesInterval: 10 * time.Second, KeepalivesCount: 3}
	if c := checkDeadPeer(good, hb, to, false); c.Status != Pass {
		t.Errorf("60 s detection: %+v", c)
	}
	if c := checkDeadPeer(serverSettings{}, hb, to, true); c.Status != Pass {
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

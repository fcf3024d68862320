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
	// A reply in flight at the cut: tcp_user_timeout after that send,
	// whatever the keepalives say (measured: 5.75 s and 6.5 s).
	inFlight := serverSettings{KeepalivesIdle: 30 * time.Second, KeepalivesInterval: 10 * time.Second, KeepalivesCount: 3, UserTimeout: 5 * time.Second}
	if c := checkDeadPeer(inFlight, hb, to, false); c.Status != Warn || !strings.Contains(c.Detail, "in flight") {
		t.Errorf("tcp_user_timeout 5 s with a reply in flight: %+v", c)
	}
	// Keepalives alone leave the in-flight path to retransmissions: ≈15 min.
	noUserTimeout := serverSettings{KeepalivesIdle: 30 * time.Second, KeepalivesInterval: 10 * time.Second, KeepalivesCount: 3}
	if c := checkDeadPeer(noUserTimeout, hb, to, false); c.Status != Warn || !strings.Contains(c.Detail, "15m") {
		t.Errorf("keepalives without tcp_user_timeout: %+v", c)
	}
	good := serverSettings{KeepalivesIdle: 30 * time.Second, KeepalivesInterval: 10 * time.Second, KeepalivesCount: 3, UserTimeout: time.Minute}
	if c := checkDeadPeer(good, hb, to, false); c.Status != Pass {
		t.Errorf("60 s detection on both paths: %+v", c)
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

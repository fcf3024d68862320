package probe

import (
	"strings"
	"testing"
	"time"
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

func TestCheckIdleSessionTimeout(t *testing.T) {
	hb := 15 * time.Second
	for _, tc := range []struct {
		timeout time.Duration
		want    Status
	}{{0, Pass}, {10 * time.Second, Warn}, {15 * time.Second, Warn}, {time.Minute, Warn}} {
		if got := checkIdleSessionTimeout(sessionTimeouts{Idle: tc.timeout}, hb).Status; got != tc.want {
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

func TestGUCDuration(t *testing.T) {
	for _, tc := range []struct {
		v    string
		base time.Duration
		want time.Duration
	}{
		{"0", time.Millisecond, 0}, {"50ms", time.Millisecond, 50 * time.Millisecond}, {"10s", time.Millisecond, 10 * time.Second},
		{"2min", time.Second, 2 * time.Minute}, {"2h", time.Second, 2 * time.Hour}, {"1d", time.Millisecond, 24 * time.Hour},
		{"75", time.Second, 75 * time.Second}, {"1500", time.Millisecond, 1500 * time.Millisecond}, {"-1", time.Millisecond, -time.Millisecond},
		{"", time.Second, 0}, {"soon", time.Second, 0},
	} {
		if got := gucDuration(tc.v, tc.base); got != tc.want {
			t.Errorf("gucDuration(%q, %s) = %s, want %s", tc.v, tc.base, got, tc.want)
		}
	}
}

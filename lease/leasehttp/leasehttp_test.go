package leasehttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// These tests drive the handlers without a database: a fake clock makes
// the health window testable. The monitor against a real lease on the
// lab's server is tested in package lease (TestMonitorFollowsARealLease).

// TestHealthzFailsWhenTheLeaseLoopIsStuck drives the health handlers with
// a fake clock: /healthz fails once the loop has been silent for longer
// than its window, recovers on the next sign of life, and fails for good
// once the lease has stopped; /readyz follows the state.
func TestHealthzFailsWhenTheLeaseLoopIsStuck(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := New("poller", 1, time.Minute)
	m.now = func() time.Time { return now }
	m.lastActivity = now
	check := func(handler http.HandlerFunc, code int, want string) {
		t.Helper()
		rec := httptest.NewRecorder()
		handler(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != code || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("got %d %q, want %d and %q", rec.Code, rec.Body.String(), code, want)
		}
	}
	check(m.ServeHealth, http.StatusOK, "ok: starting")
	check(m.ServeReady, http.StatusServiceUnavailable, "not ready: starting")

	m.OnStateChange(lease.Change{From: lease.Connecting, To: lease.StandingBy})
	check(m.ServeReady, http.StatusOK, "ready: standing_by")
	now = now.Add(time.Minute)
	check(m.ServeHealth, http.StatusOK, "ok: standing_by")
	now = now.Add(time.Second)
	check(m.ServeHealth, http.StatusServiceUnavailable, "stuck: the lease loop has shown no sign of life for 1m1s (limit 1m0s)")
	check(m.ServeReady, http.StatusOK, "ready: standing_by") // readiness is the state's

	m.OnHeartbeat(now)
	check(m.ServeHealth, http.StatusOK, "ok: standing_by")
	now = now.Add(2 * time.Minute)
	m.Mark() // a retry while the database is down
	check(m.ServeHealth, http.StatusOK, "ok: standing_by")
	now = now.Add(2 * time.Minute)
	// A log record through LogHandler is a sign of life too.
	slog.New(m.LogHandler(slog.NewTextHandler(io.Discard, nil))).With("role", "poller").Warn("cannot connect; retrying")
	check(m.ServeHealth, http.StatusOK, "ok: standing_by")

	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Refused})
	check(m.ServeReady, http.StatusServiceUnavailable, "not ready: refused")
	m.OnStateChange(lease.Change{From: lease.Refused, To: lease.Stopped})
	check(m.ServeHealth, http.StatusServiceUnavailable, "stopped")
	check(m.ServeReady, http.StatusServiceUnavailable, "not ready: stopped")

	// A restart policy that runs the lease again in 10m: alive through the
	// wait and one window after it, not ready; the next run's first state
	// ends it.
	m.OnRestart(nil, 10*time.Minute)
	check(m.ServeHealth, http.StatusOK, "ok: restarting")
	check(m.ServeReady, http.StatusServiceUnavailable, "not ready: restarting")
	now = now.Add(11 * time.Minute)
	check(m.ServeHealth, http.StatusOK, "ok: restarting")
	now = now.Add(time.Second)
	check(m.ServeHealth, http.StatusServiceUnavailable, "stuck")
	m.OnStateChange(lease.Change{From: lease.Stopped, To: lease.Connecting})
	check(m.ServeHealth, http.StatusOK, "ok: connecting")
	m.OnStateChange(lease.Change{From: lease.Connecting, To: lease.Stopped})
	check(m.ServeHealth, http.StatusServiceUnavailable, "stopped")
}

// TestHealthWindow: the window covers the defaults' quiet stretches and
// never drops below the search for a new primary.
func TestHealthWindow(t *testing.T) {
	cfg := lease.Config{HeartbeatInterval: 15 * time.Second, HeartbeatTimeout: 5 * time.Second, RetryInterval: 5 * time.Second}
	if got := HealthWindow(cfg, 10*time.Second); got != 65*time.Second {
		t.Errorf("defaults: %s, want 65s", got)
	}
	if got := HealthWindow(lease.Config{}, 0); got != 65*time.Second {
		t.Errorf("zero config: %s, want the defaults' 65s", got)
	}
	if got := HealthWindow(cfg, 5*time.Minute); got != 5*time.Minute+55*time.Second {
		t.Errorf("a 5m grace: %s, want 5m55s", got)
	}
	cfg = lease.Config{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second, RetryInterval: 50 * time.Millisecond}
	if got := HealthWindow(cfg, time.Second); got != lease.SearchWindow+time.Second {
		t.Errorf("short intervals: %s, want the search window plus a heartbeat timeout", got)
	}
}

// TestMetricsExposition: the text format, with label values escaped and
// the states in order; the heartbeat age appears once there was a
// heartbeat. A leadership without a term record (Epoch 0) exposes epoch 0
// and no leaderless time.
func TestMetricsExposition(t *testing.T) {
	m := New("po\"ll\\er\n", 1840000001, 0)
	get := func() (string, string) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics: %d", rec.Code)
		}
		return rec.Header().Get("Content-Type"), rec.Body.String()
	}
	m.OnStateChange(lease.Change{To: lease.Connecting})
	m.OnStateChange(lease.Change{To: lease.StandingBy})
	m.OnStateChange(lease.Change{To: lease.Leading})
	m.OnStart(42)
	ctype, body := get()
	if ctype != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ctype)
	}
	const labels = `role="po\"ll\\er\n",key="1840000001"`
	want := "# HELP leasectl_lease_leader 1 while this replica holds the lease, else 0.\n" +
		"# TYPE leasectl_lease_leader gauge\n" +
		"leasectl_lease_leader{" + labels + "} 1\n" +
		"# HELP leasectl_lease_epoch Epoch of the term this replica leads or last led; 0 before it led a term.\n" +
		"# TYPE leasectl_lease_epoch gauge\n" +
		"leasectl_lease_epoch{" + labels + "} 0\n" +
		"# HELP leasectl_lease_transitions_total State changes of the lease, by the state entered.\n" +
		"# TYPE leasectl_lease_transitions_total counter\n" +
		"leasectl_lease_transitions_total{" + labels + `,state="connecting"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + labels + `,state="leading"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + labels + `,state="standing_by"} 1` + "\n" +
		"# HELP leasectl_lease_leaderless_seconds_total Seconds the role had no term before each term this replica began, summed.\n" +
		"# TYPE leasectl_lease_leaderless_seconds_total counter\n" +
		"leasectl_lease_leaderless_seconds_total{" + labels + "} 0.000\n" +
		"# HELP leasectl_lease_program_starts_total Times the program was started.\n" +
		"# TYPE leasectl_lease_program_starts_total counter\n" +
		"leasectl_lease_program_starts_total{" + labels + "} 1\n"
	if body != want {
		t.Errorf("/metrics:\n%s\nwant:\n%s", body, want)
	}
	m.OnHeartbeat(time.Now())
	if _, body := get(); !strings.Contains(body, "leasectl_lease_heartbeat_age_seconds{"+labels+"} 0.0") {
		t.Errorf("no heartbeat age after a heartbeat:\n%s", body)
	}
	if body := New("", 7, 0).labels; body != `role="key 7",key="7"` {
		t.Errorf("labels of a lease without a role: %s", body)
	}
}

// TestTermMetrics: the epoch is the last term's this replica began, kept
// while it stands by and through a leadership without a term record; the
// leaderless counter adds up each term's Leaderless and never decreases.
func TestTermMetrics(t *testing.T) {
	m := New("poller", 1, 0)
	const labels = `{role="poller",key="1"} `
	check := func(epoch, leaderless string) {
		t.Helper()
		rec := httptest.NewRecorder()
		m.ServeMetrics(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body := rec.Body.String()
		for _, want := range []string{
			"\nleasectl_lease_epoch" + labels + epoch + "\n",
			"\nleasectl_lease_leaderless_seconds_total" + labels + leaderless + "\n",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q:\n%s", want, body)
			}
		}
	}
	check("0", "0.000") // present before the first term, as 0
	m.OnStateChange(lease.Change{From: lease.Connecting, To: lease.StandingBy})
	check("0", "0.000")
	// The role's first term: no gap before it.
	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Leading, Epoch: 1})
	check("1", "0.000")
	m.OnStateChange(lease.Change{From: lease.Leading, To: lease.Connecting})
	m.OnStateChange(lease.Change{From: lease.Connecting, To: lease.StandingBy})
	check("1", "0.000") // the last term led, while standing by
	// Another replica led epochs 2 to 6; this one begins 7 after 1.5 s
	// without a term.
	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Leading, Epoch: 7, Leaderless: 1500 * time.Millisecond})
	check("7", "1.500")
	m.OnStateChange(lease.Change{From: lease.Leading, To: lease.StandingBy})
	// The term record unavailable: leading, but no term began.
	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Leading})
	check("7", "1.500")
	m.OnStateChange(lease.Change{From: lease.Leading, To: lease.StandingBy})
	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Leading, Epoch: 9, Leaderless: 250*time.Millisecond + 400*time.Microsecond})
	check("9", "1.750")
	m.OnStateChange(lease.Change{From: lease.Leading, To: lease.StandingBy})
	m.OnStateChange(lease.Change{From: lease.StandingBy, To: lease.Leading, Epoch: 10, Leaderless: -time.Second})
	check("10", "1.750") // a counter never goes back
	m.OnStateChange(lease.Change{From: lease.Leading, To: lease.Stopped})
	check("10", "1.750")
}

// TestServeLogsItsURL: Serve logs the URL of a port the system chose, and
// stops.
func TestServeLogsItsURL(t *testing.T) {
	var log bytes.Buffer
	m := New("poller", 1, 0)
	stop, err := Serve("127.0.0.1:0", m.Handler(), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	line := log.String()
	i := strings.Index(line, "url=http://127.0.0.1:")
	if !strings.Contains(line, "msg=\"serving metrics\"") || i < 0 {
		t.Fatalf("log %q", line)
	}
	url := strings.TrimSpace(line[i+len("url="):])
	resp, err := http.Get(strings.TrimSuffix(url, "/metrics") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "not ready: starting (ready once leading or standing by on a primary)\n" {
		t.Errorf("/readyz: %d %q", resp.StatusCode, body)
	}
	stop()
	if _, err := Serve("127.0.0.1:-1", m.Handler(), nil); err == nil {
		t.Error("Serve on port -1: no error")
	}
}

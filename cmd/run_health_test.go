package cmd

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/leasetest"
	"github.com/leasectl/leasectl/lease"
)

// probeURL returns the URL of path on the --metrics-addr server that run
// logged.
func probeURL(t *testing.T, r *liveRun, path string) string {
	t.Helper()
	r.stderr.WaitFor(t, "serving metrics", 1, hang)
	u := regexp.MustCompile(`http://127\.0\.0\.1:\d+/metrics`).FindString(r.stderr.String())
	if u == "" {
		t.Fatalf("no metrics URL in the log:\n%s", r.stderr)
	}
	return strings.TrimSuffix(u, "/metrics") + path
}

// get returns the status and body of a GET of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers code with a body containing want.
func waitStatus(t *testing.T, url string, code int, want string) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for {
		got, body := get(t, url)
		if got == code && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d and %q", url, got, body, code, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunHealthAndReadiness runs replicas of leasectl run against the lab
// and asks their /healthz and /readyz what a kubelet would: the leader and
// a stand-by are ready, a replica refused by a transaction-mode pooler or
// cut off from the database is not; all of them are alive, since their
// lease loops keep turning (a database outage must not get them restarted).
func TestRunHealthAndReadiness(t *testing.T) {
	f := newRunFixture(t, "poller", 9200050)
	flags := []string{"--role", "poller", "--retry-interval", "50ms", "--heartbeat-interval", "1s", "--metrics-addr", "127.0.0.1:0", "--"}

	leader := startRun(t, runEnv(f, needLab(t).DirectDSN()), append(flags, f.witnessArgs()...)...)
	f.next(leasetest.Start)
	waitStatus(t, probeURL(t, leader, "/readyz"), http.StatusOK, "ready: leading")
	waitStatus(t, probeURL(t, leader, "/healthz"), http.StatusOK, "ok: leading")

	standby := startRun(t, runEnv(f, needLab(t).DirectDSN()), append(flags, f.witnessArgs()...)...)
	standby.stderr.WaitFor(t, "standing by", 1, hang)
	waitStatus(t, probeURL(t, standby, "/readyz"), http.StatusOK, "ready: standing_by")
	waitStatus(t, probeURL(t, standby, "/healthz"), http.StatusOK, "ok: standing_by")

	refused := startRun(t, runEnv(f, needLab(t).PoolerDSN("transaction")), append(flags, f.witnessArgs()...)...)
	refused.stderr.WaitFor(t, "refusing to lead", 2, hang)
	waitStatus(t, probeURL(t, refused, "/readyz"), http.StatusServiceUnavailable, "not ready: ")
	if code, body := get(t, probeURL(t, refused, "/readyz")); code != http.StatusServiceUnavailable || !(strings.Contains(body, "refused") || strings.Contains(body, "connecting")) {
		t.Errorf("/readyz of a refused replica: %d %q", code, body)
	}
	waitStatus(t, probeURL(t, refused, "/healthz"), http.StatusOK, "ok: ")

	down := startRun(t, runEnv(f, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"), append(flags, "true")...)
	down.stderr.WaitFor(t, "cannot connect; retrying", 3, hang)
	waitStatus(t, probeURL(t, down, "/readyz"), http.StatusServiceUnavailable, "not ready: connecting")
	waitStatus(t, probeURL(t, down, "/healthz"), http.StatusOK, "ok: connecting")

	for _, r := range []*liveRun{down, refused, standby, leader} {
		if code := r.stop(t); code != ExitOK {
			t.Errorf("exit %d, want 0; stderr:\n%s", code, r.stderr)
		}
	}
	f.noOverlap()
}

// TestHealthzFailsWhenTheLeaseLoopIsStuck drives the health handlers with
// a fake clock: /healthz fails once the loop has been silent for longer
// than its window, recovers on the next sign of life, and fails for good
// once the lease has stopped; /readyz follows the state.
func TestHealthzFailsWhenTheLeaseLoopIsStuck(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := newRunMetrics("poller", 1)
	m.now = func() time.Time { return now }
	m.lastActivity = now
	m.staleAfter = time.Minute
	check := func(handler http.HandlerFunc, code int, want string) {
		t.Helper()
		rec := httptest.NewRecorder()
		handler(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != code || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("got %d %q, want %d and %q", rec.Code, rec.Body.String(), code, want)
		}
	}
	check(m.serveHealth, http.StatusOK, "ok: starting")
	check(m.serveReady, http.StatusServiceUnavailable, "not ready: starting")

	m.change(lease.Change{From: lease.Connecting, To: lease.StandingBy})
	check(m.serveReady, http.StatusOK, "ready: standing_by")
	now = now.Add(time.Minute)
	check(m.serveHealth, http.StatusOK, "ok: standing_by")
	now = now.Add(time.Second)
	check(m.serveHealth, http.StatusServiceUnavailable, "stuck: the lease loop has shown no sign of life for 1m1s (limit 1m0s)")
	check(m.serveReady, http.StatusOK, "ready: standing_by") // readiness is the state's

	m.heartbeat(now)
	check(m.serveHealth, http.StatusOK, "ok: standing_by")
	now = now.Add(2 * time.Minute)
	m.activity() // a log record: a retry while the database is down
	check(m.serveHealth, http.StatusOK, "ok: standing_by")

	m.change(lease.Change{From: lease.StandingBy, To: lease.Refused})
	check(m.serveReady, http.StatusServiceUnavailable, "not ready: refused")
	m.change(lease.Change{From: lease.Refused, To: lease.Stopped})
	check(m.serveHealth, http.StatusServiceUnavailable, "stopped")
	check(m.serveReady, http.StatusServiceUnavailable, "not ready: stopped")
}

// TestRunHealthWindow: the window covers the defaults' quiet stretches and
// never drops below the search for a new primary.
func TestRunHealthWindow(t *testing.T) {
	o := &runOptions{HeartbeatInterval: 15 * time.Second, HeartbeatTimeout: 5 * time.Second, RetryInterval: 5 * time.Second, Grace: 10 * time.Second}
	if got := o.healthWindow(); got != 65*time.Second {
		t.Errorf("defaults: %s, want 65s", got)
	}
	o.Grace = 5 * time.Minute
	if got := o.healthWindow(); got != 5*time.Minute+55*time.Second {
		t.Errorf("--grace 5m: %s, want 5m55s", got)
	}
	o = &runOptions{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second, RetryInterval: 50 * time.Millisecond, Grace: time.Second}
	if got := o.healthWindow(); got != lease.SearchWindow+time.Second {
		t.Errorf("short intervals: %s, want the search window plus a heartbeat timeout", got)
	}
}

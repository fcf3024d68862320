package cmd

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/test/leasetest"
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

// TestRunHealthBetweenRestarts: with --restart, the wait between a
// program's exit and the next lease is part of a healthy run, so /healthz
// stays 200 through it (a kubelet must not restart the pod for it), while
// /readyz says it is not ready.
func TestRunHealthBetweenRestarts(t *testing.T) {
	f := newRunFixture(t, "poller", 9200051)
	r := startRun(t, runEnv(f, needLab(t).DirectDSN()), "--role", "poller", "--restart", "--retry-interval", "10m",
		"--metrics-addr", "127.0.0.1:0", "--", "true")
	r.stderr.WaitFor(t, "--restart: standing by again", 1, hang)
	waitStatus(t, probeURL(t, r, "/healthz"), http.StatusOK, "ok: restarting")
	waitStatus(t, probeURL(t, r, "/readyz"), http.StatusServiceUnavailable, "not ready: restarting")
	if code := r.stop(t); code != ExitOK {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, r.stderr)
	}
}

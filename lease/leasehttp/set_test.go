package leasehttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// threeRoles is a Set of three roles on a fake clock, as `leasectl run
// --procfile` would build for a procfile of three entries.
func threeRoles(now *time.Time) (*Set, [3]*Monitor) {
	s := NewSet(time.Minute)
	s.now = func() time.Time { return *now }
	s.lastActivity = *now
	return s, [3]*Monitor{s.Add("poller", 1840000001), s.Add("mai\"ler", 1840000002), s.Add("", 1840000003)}
}

// get answers path with h.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestSetRoutesStateChanges: the loop's state changes reach the role of
// their key, and /metrics has each family once, with the series of every
// role in the order added.
func TestSetRoutesStateChanges(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, ms := threeRoles(&now)
	s.OnStateChange(lease.Change{Role: "poller", Key: 1840000001, To: lease.Connecting})
	s.OnStateChange(lease.Change{Role: "poller", Key: 1840000001, To: lease.Leading, Epoch: 4, Leaderless: 1500 * time.Millisecond})
	s.OnStateChange(lease.Change{Role: "mai\"ler", Key: 1840000002, To: lease.Connecting})
	s.OnStateChange(lease.Change{Role: "mai\"ler", Key: 1840000002, To: lease.StandingBy})
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Connecting})
	s.OnStateChange(lease.Change{Role: "other", Key: 99, To: lease.Leading}) // not in the Set: dropped
	ms[0].OnStart(100)
	ms[0].OnStart(101)
	ms[1].OnStart(102)

	for i, want := range []lease.State{lease.Leading, lease.StandingBy, lease.Connecting} {
		if got := ms[i].status().state; got != want {
			t.Errorf("role %d: %s, want %s", i, got, want)
		}
	}
	code, body := get(t, s.Handler(), "/metrics")
	const (
		poller = `role="poller",key="1840000001"`
		mailer = `role="mai\"ler",key="1840000002"`
		key3   = `role="key 1840000003",key="1840000003"`
	)
	want := "# HELP leasectl_lease_leader 1 while this replica holds the lease, else 0.\n" +
		"# TYPE leasectl_lease_leader gauge\n" +
		"leasectl_lease_leader{" + poller + "} 1\n" +
		"leasectl_lease_leader{" + mailer + "} 0\n" +
		"leasectl_lease_leader{" + key3 + "} 0\n" +
		"# HELP leasectl_lease_epoch Epoch of the term this replica leads or last led; 0 before it led a term.\n" +
		"# TYPE leasectl_lease_epoch gauge\n" +
		"leasectl_lease_epoch{" + poller + "} 4\n" +
		"leasectl_lease_epoch{" + mailer + "} 0\n" +
		"leasectl_lease_epoch{" + key3 + "} 0\n" +
		"# HELP leasectl_lease_transitions_total State changes of the lease, by the state entered.\n" +
		"# TYPE leasectl_lease_transitions_total counter\n" +
		"leasectl_lease_transitions_total{" + poller + `,state="connecting"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + poller + `,state="leading"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + mailer + `,state="connecting"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + mailer + `,state="standing_by"} 1` + "\n" +
		"leasectl_lease_transitions_total{" + key3 + `,state="connecting"} 1` + "\n" +
		"# HELP leasectl_lease_leaderless_seconds_total Seconds the role had no term before each term this replica began, summed.\n" +
		"# TYPE leasectl_lease_leaderless_seconds_total counter\n" +
		"leasectl_lease_leaderless_seconds_total{" + poller + "} 1.500\n" +
		"leasectl_lease_leaderless_seconds_total{" + mailer + "} 0.000\n" +
		"leasectl_lease_leaderless_seconds_total{" + key3 + "} 0.000\n" +
		"# HELP leasectl_lease_program_starts_total Times the program was started.\n" +
		"# TYPE leasectl_lease_program_starts_total counter\n" +
		"leasectl_lease_program_starts_total{" + poller + "} 2\n" +
		"leasectl_lease_program_starts_total{" + mailer + "} 1\n" +
		"leasectl_lease_program_starts_total{" + key3 + "} 0\n"
	if code != http.StatusOK || body != want {
		t.Errorf("/metrics: %d\n%s\nwant:\n%s", code, body, want)
	}

	// A heartbeat of the shared session is every role's.
	s.OnHeartbeat(time.Now())
	_, body = get(t, s.Handler(), "/metrics")
	if n := strings.Count(body, "# TYPE leasectl_lease_heartbeat_age_seconds gauge\n"); n != 1 {
		t.Errorf("the heartbeat age's TYPE %d times:\n%s", n, body)
	}
	for _, labels := range []string{poller, mailer, key3} {
		if !strings.Contains(body, "\nleasectl_lease_heartbeat_age_seconds{"+labels+"} 0.0") {
			t.Errorf("no heartbeat age of %s:\n%s", labels, body)
		}
	}
}

// TestSetMetricsPassPromtool: promtool accepts the exposition of a Set, in
// which a metric family's HELP and TYPE may appear only once. A missing
// promtool fails the test.
func TestSetMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install it (Debian: apt-get install -y prometheus, which ships promtool)")
	}
	now := time.Now()
	s, ms := threeRoles(&now)
	check := func(what string) {
		t.Helper()
		_, body := get(t, s.Handler(), "/metrics")
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s: promtool check metrics: %v\n%s\non:\n%s", what, err, out, body)
		}
	}
	check("before any state")
	for i, to := range []lease.State{lease.Leading, lease.StandingBy, lease.Refused} {
		s.OnStateChange(lease.Change{Key: 1840000001 + int64(i), To: lease.Connecting})
		s.OnStateChange(lease.Change{Key: 1840000001 + int64(i), To: to, Epoch: 2})
		ms[i].OnStart(i)
	}
	s.OnHeartbeat(now)
	check("after states and a heartbeat")

	// The check catches what it must: a family written once per role.
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(strings.Repeat("# HELP x_total X.\n# TYPE x_total counter\nx_total 1\n", 2))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("promtool accepts a family's HELP twice:\n%s", out)
	}
}

// TestSetReadyz: the Set is ready when every role leads or stands by; the
// body names each role's state, so that the role that is not ready shows.
func TestSetReadyz(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, _ := threeRoles(&now)
	check := func(code int, want string) {
		t.Helper()
		if got, body := get(t, s.Handler(), "/readyz"); got != code || body != want {
			t.Errorf("/readyz: %d %q, want %d %q", got, body, code, want)
		}
	}
	check(http.StatusServiceUnavailable, "not ready: 3 of 3 roles (ready once leading or standing by on a primary)\n"+
		`role="poller" key="1840000001" starting`+"\n"+
		`role="mai\"ler" key="1840000002" starting`+"\n"+
		`role="key 1840000003" key="1840000003" starting`+"\n")

	s.OnStateChange(lease.Change{Key: 1840000001, To: lease.Leading})
	s.OnStateChange(lease.Change{Key: 1840000002, To: lease.StandingBy})
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Connecting})
	check(http.StatusServiceUnavailable, "not ready: 1 of 3 roles (ready once leading or standing by on a primary)\n"+
		`role="poller" key="1840000001" leading`+"\n"+
		`role="mai\"ler" key="1840000002" standing_by`+"\n"+
		`role="key 1840000003" key="1840000003" connecting`+"\n")

	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.StandingBy})
	check(http.StatusOK, "ready: 3 roles\n"+
		`role="poller" key="1840000001" leading`+"\n"+
		`role="mai\"ler" key="1840000002" standing_by`+"\n"+
		`role="key 1840000003" key="1840000003" standing_by`+"\n")

	// One role's program stopped, its restart policy waits.
	s.OnStateChange(lease.Change{Key: 1840000002, To: lease.Stopped})
	s.byKey[1840000002].OnRestart(nil, time.Minute)
	check(http.StatusServiceUnavailable, "not ready: 1 of 3 roles (ready once leading or standing by on a primary)\n"+
		`role="poller" key="1840000001" leading`+"\n"+
		`role="mai\"ler" key="1840000002" restarting`+"\n"+
		`role="key 1840000003" key="1840000003" standing_by`+"\n")

	if code, body := get(t, NewSet(0).Handler(), "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: no roles\n" {
		t.Errorf("/readyz of an empty Set: %d %q", code, body)
	}
}

// TestSetHealthz: the sign of life is the shared loop's: a heartbeat, a
// log record or any role's state change keeps every role alive; the Set
// is stopped only once every role is; a restart policy's wait extends the
// window only while every role that will run again waits, by the
// shortest wait.
func TestSetHealthz(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, ms := threeRoles(&now)
	check := func(code int, want string) {
		t.Helper()
		if got, body := get(t, s.Handler(), "/healthz"); got != code || !strings.HasPrefix(body, want) {
			t.Errorf("/healthz: %d %q, want %d and %q", got, body, code, want)
		}
	}
	check(http.StatusOK, "ok: 3 roles, last sign of life 0s ago\n"+`role="poller" key="1840000001" starting`+"\n")
	for i := range ms {
		s.OnStateChange(lease.Change{Key: 1840000001 + int64(i), To: lease.StandingBy})
	}
	now = now.Add(time.Minute + time.Second)
	check(http.StatusServiceUnavailable, "stuck: the lease loop has shown no sign of life for 1m1s (limit 1m0s)\n")
	s.OnHeartbeat(now)
	check(http.StatusOK, "ok: 3 roles")
	now = now.Add(2 * time.Minute)
	slog.New(s.LogHandler(slog.NewTextHandler(io.Discard, nil))).With("role", "poller").Warn("cannot connect; retrying")
	check(http.StatusOK, "ok: 3 roles")
	now = now.Add(2 * time.Minute)
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Leading}) // one role's change is a sign of life of the loop
	check(http.StatusOK, "ok: 3 roles, last sign of life 0s ago\n"+
		`role="poller" key="1840000001" standing_by`+"\n"+
		`role="mai\"ler" key="1840000002" standing_by`+"\n"+
		`role="key 1840000003" key="1840000003" leading`+"\n")

	// One role stopped for good: the loop still runs the others.
	s.OnStateChange(lease.Change{Key: 1840000001, To: lease.Stopped})
	check(http.StatusOK, "ok: 3 roles, last sign of life 0s ago\n"+`role="poller" key="1840000001" stopped`+"\n")
	// The others wait for restarts in 5m and 10m: alive for the shortest
	// wait and a window.
	s.OnStateChange(lease.Change{Key: 1840000002, To: lease.Stopped})
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Stopped})
	ms[1].OnRestart(nil, 10*time.Minute)
	ms[2].OnRestart(nil, 5*time.Minute)
	now = now.Add(6 * time.Minute)
	check(http.StatusOK, "ok: 3 roles, last sign of life 6m0s ago\n"+
		`role="poller" key="1840000001" stopped`+"\n"+
		`role="mai\"ler" key="1840000002" restarting`+"\n"+
		`role="key 1840000003" key="1840000003" restarting`+"\n")
	now = now.Add(time.Second)
	check(http.StatusServiceUnavailable, "stuck: the lease loop has shown no sign of life for 6m1s (limit 6m0s)\n")
	// A role that runs again ends the wait's extension, though the other
	// still waits.
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Connecting})
	now = now.Add(time.Minute)
	check(http.StatusOK, "ok: 3 roles, last sign of life 1m0s ago\n")
	now = now.Add(time.Second)
	check(http.StatusServiceUnavailable, "stuck: the lease loop has shown no sign of life for 1m1s (limit 1m0s)\n")

	// Every role stopped for good: the process has nothing left to run.
	s.OnStateChange(lease.Change{Key: 1840000002, To: lease.Stopped})
	s.OnStateChange(lease.Change{Key: 1840000003, To: lease.Stopped})
	check(http.StatusServiceUnavailable, "stopped: every role's lease has ended and will not run again\n"+
		`role="poller" key="1840000001" stopped`+"\n")

	// A Set without roles lives by the loop's signs of life alone.
	e := NewSet(time.Minute)
	e.now = func() time.Time { return now }
	e.Mark()
	if code, body := get(t, e.Handler(), "/healthz"); code != http.StatusOK || body != "ok: 0 roles, last sign of life 0s ago\n" {
		t.Errorf("/healthz of an empty Set: %d %q", code, body)
	}
}

// TestSetAddTwice: a key added twice would make the routing ambiguous.
func TestSetAddTwice(t *testing.T) {
	s := NewSet(0)
	s.Add("poller", 1)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "key 1 added twice") {
			t.Errorf("recovered %v", r)
		}
	}()
	s.Add("mailer", 1)
}

// TestSetConcurrent drives a Set from several goroutines while it serves,
// for the race detector.
func TestSetConcurrent(t *testing.T) {
	s := NewSet(0)
	h := s.Handler()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := int64(i + 1)
			m := s.Add("", key)
			for range 50 {
				s.OnStateChange(lease.Change{Key: key, To: lease.Leading, Epoch: 1})
				s.OnHeartbeat(time.Now())
				m.OnStart(1)
				m.OnRestart(nil, time.Second)
				s.Mark()
			}
		}()
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				get(t, h, path)
			}
		}()
	}
	wg.Wait()
	if _, body := get(t, h, "/readyz"); strings.Count(body, "\n") != 5 {
		t.Errorf("/readyz of four roles:\n%s", body)
	}
}

package lease_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/lease/leasehttp"
	"github.com/leasectl/leasectl/test/leasetest"
)

// served is a lease on the lab's server with the monitor of leasehttp
// wired in the documented way, serving on a port the system chose.
type served struct {
	url string // http://127.0.0.1:PORT
	log *leasetest.Buffer
	rec *recorder
	run *runResult
}

// serveLease starts a lease on dsn and key with a leasehttp monitor and
// returns once it serves.
func serveLease(t *testing.T, ctx context.Context, dsn string, key int64, work func(context.Context) error) *served {
	t.Helper()
	s := &served{log: &leasetest.Buffer{}, rec: newRecorder()}
	cfg := baseConfig(dsn, key, s.rec)
	m := leasehttp.New(cfg.Role, cfg.Key, leasehttp.HealthWindow(cfg, 0))
	cfg.Logger = slog.New(m.LogHandler(slog.NewTextHandler(s.log, nil)))
	cfg.OnStateChange = func(c lease.Change) { m.OnStateChange(c); s.rec.record(c) }
	cfg.OnHeartbeat = m.OnHeartbeat
	stop, err := leasehttp.Serve("127.0.0.1:0", m.Handler(), cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s.url = strings.TrimSuffix(regexp.MustCompile(`http://127\.0\.0\.1:\d+/metrics`).FindString(s.log.String()), "/metrics")
	if s.url == "" {
		t.Fatalf("no metrics URL in the log:\n%s", s.log)
	}
	s.run = start(ctx, cfg, work)
	return s
}

// get returns the status and body of a GET of the monitor's path.
func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expect checks one answer of the monitor.
func (s *served) expect(t *testing.T, path string, code int, want ...string) {
	t.Helper()
	got, body := s.get(t, path)
	if got != code {
		t.Errorf("%s: %d %q, want %d", path, got, body, code)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s: %q lacks %q", path, body, w)
		}
	}
}

// sample returns the value of the series name+labels in the monitor's
// /metrics, failing the test when it is missing.
func (s *served) sample(t *testing.T, series string) float64 {
	t.Helper()
	_, body := s.get(t, "/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics lacks %s:\n%s", series, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// TestMonitorFollowsARealLease: leases on the lab's server, each with
// the leasehttp monitor, answer /metrics, /readyz and /healthz the way
// leasectl run --metrics-addr does: the leader and a stand-by are ready,
// a lease refused by a transaction-mode pooler is not but is alive, and a
// stopped lease is neither. The leader exposes the epoch of its term (the
// lease creates the term record itself); the stand-by exposes 0 until it
// takes over, then the next epoch, and counts the gap before its term.
func TestMonitorFollowsARealLease(t *testing.T) {
	const key = 9100030
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderCtx, stopLeader := context.WithCancel(ctx)
	defer stopLeader()
	leading := make(chan struct{}, 1)
	leader := serveLease(t, leaderCtx, testLab.DirectDSN(), key, func(ctx context.Context) error {
		leading <- struct{}{}
		<-ctx.Done()
		return nil
	})
	select {
	case <-leading:
	case <-time.After(time.Minute):
		t.Fatalf("the lease did not lead within a minute:\n%s", leader.log)
	}
	leader.expect(t, "/readyz", http.StatusOK, "ready: leading")
	leader.expect(t, "/healthz", http.StatusOK, "ok: leading, last sign of life ")
	labels := `{role="test",key="9100030"`
	leader.expect(t, "/metrics", http.StatusOK,
		"# TYPE leasectl_lease_leader gauge\nleasectl_lease_leader"+labels+"} 1\n",
		"leasectl_lease_transitions_total"+labels+`,state="connecting"} 1`,
		"leasectl_lease_transitions_total"+labels+`,state="standing_by"} 1`,
		"leasectl_lease_transitions_total"+labels+`,state="leading"} 1`,
		"leasectl_lease_program_starts_total"+labels+"} 0",
		"leasectl_lease_heartbeat_age_seconds"+labels+"} ",
		"# TYPE leasectl_lease_epoch gauge\n",
		"# TYPE leasectl_lease_leaderless_seconds_total counter\n")
	epoch := leader.sample(t, "leasectl_lease_epoch"+labels+"}")
	if epoch < 1 {
		t.Errorf("the leader exposes epoch %v, want the epoch of its term (> 0)", epoch)
	}
	if v := leader.sample(t, "leasectl_lease_leaderless_seconds_total"+labels+"}"); v < 0 {
		t.Errorf("leaderless seconds %v", v)
	}

	var handover atomic.Bool // set before the leader is stopped
	standbyLeads := make(chan struct{}, 1)
	standby := serveLease(t, ctx, testLab.DirectDSN(), key, func(ctx context.Context) error {
		if !handover.Load() {
			t.Error("the stand-by led while the leader held the key")
		}
		standbyLeads <- struct{}{}
		<-ctx.Done()
		return nil
	})
	standby.rec.waitFor(t, lease.StandingBy)
	standby.expect(t, "/readyz", http.StatusOK, "ready: standing_by")
	standby.expect(t, "/healthz", http.StatusOK, "ok: standing_by")
	standby.expect(t, "/metrics", http.StatusOK, "leasectl_lease_leader"+labels+"} 0\n",
		"leasectl_lease_epoch"+labels+"} 0\n", // it has not led a term
		"leasectl_lease_leaderless_seconds_total"+labels+"} 0.000\n")

	refused := serveLease(t, ctx, testLab.PoolerDSN("transaction"), key+1, func(context.Context) error {
		t.Error("led through a transaction-mode pooler")
		return nil
	})
	refused.rec.waitFor(t, lease.Refused)
	refused.expect(t, "/readyz", http.StatusServiceUnavailable, "not ready: ")
	refused.expect(t, "/healthz", http.StatusOK, "ok: ")
	refused.expect(t, "/metrics", http.StatusOK, `leasectl_lease_transitions_total{role="test",key="9100031",state="refused"} `)

	// The leader stops; the stand-by begins the next term.
	handover.Store(true)
	stopLeader()
	leader.run.wait(t)
	select {
	case <-standbyLeads:
	case <-time.After(time.Minute):
		t.Fatalf("the stand-by did not take over within a minute:\n%s", standby.log)
	}
	leader.expect(t, "/metrics", http.StatusOK, "leasectl_lease_leader"+labels+"} 0\n")
	if got := leader.sample(t, "leasectl_lease_epoch"+labels+"}"); got != epoch {
		t.Errorf("the stopped leader exposes epoch %v, want its last term's %v", got, epoch)
	}
	standby.expect(t, "/metrics", http.StatusOK, "leasectl_lease_leader"+labels+"} 1\n")
	if got := standby.sample(t, "leasectl_lease_epoch"+labels+"}"); got != epoch+1 {
		t.Errorf("the new leader exposes epoch %v, want %v", got, epoch+1)
	}
	if v := standby.sample(t, "leasectl_lease_leaderless_seconds_total"+labels+"}"); v < 0 || v > 60 {
		t.Errorf("the new leader counts %vs without a term before its own, want a handover's", v)
	}

	cancel()
	for _, s := range []*served{refused, standby, leader} {
		s.run.wait(t)
		s.expect(t, "/healthz", http.StatusServiceUnavailable, "stopped")
		s.expect(t, "/readyz", http.StatusServiceUnavailable, "not ready: stopped (ready once leading or standing by on a primary)")
	}
	leader.expect(t, "/metrics", http.StatusOK, "leasectl_lease_leader"+labels+"} 0\n", "leasectl_lease_transitions_total"+labels+`,state="stopped"} 1`)
	if !keyIsFree(t, key) {
		t.Error("the key is held after every lease stopped")
	}
}

package lease_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/leasetest"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/lease/leasehttp"
)

// served is a lease on the lab's server with the exporter of leasehttp
// wired in the documented way, serving on a port the system chose.
type served struct {
	url string // http://127.0.0.1:PORT
	log *leasetest.Buffer
	rec *recorder
	run *runResult
}

// serveLease starts a lease on dsn and key with a leasehttp exporter and
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

// get returns the status and body of a GET of the exporter's path.
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

// expect checks one answer of the exporter.
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

// TestExporterFollowsARealLease: leases on the lab's server, each with
// the leasehttp exporter, answer /metrics, /readyz and /healthz the way
// leasectl run --metrics-addr does: the leader and a stand-by are ready,
// a lease refused by a transaction-mode pooler is not but is alive, and a
// stopped lease is neither.
func TestExporterFollowsARealLease(t *testing.T) {
	const key = 9100030
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{}, 1)
	leader := serveLease(t, ctx, testLab.DirectDSN(), key, func(ctx context.Context) error {
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
		"leasectl_lease_heartbeat_age_seconds"+labels+"} ")

	standby := serveLease(t, ctx, testLab.DirectDSN(), key, func(context.Context) error {
		t.Error("the stand-by led while the leader held the key")
		return nil
	})
	standby.rec.waitFor(t, lease.StandingBy)
	standby.expect(t, "/readyz", http.StatusOK, "ready: standing_by")
	standby.expect(t, "/healthz", http.StatusOK, "ok: standing_by")
	standby.expect(t, "/metrics", http.StatusOK, "leasectl_lease_leader"+labels+"} 0\n")

	refused := serveLease(t, ctx, testLab.PoolerDSN("transaction"), key+1, func(context.Context) error {
		t.Error("led through a transaction-mode pooler")
		return nil
	})
	refused.rec.waitFor(t, lease.Refused)
	refused.expect(t, "/readyz", http.StatusServiceUnavailable, "not ready: ")
	refused.expect(t, "/healthz", http.StatusOK, "ok: ")
	refused.expect(t, "/metrics", http.StatusOK, `leasectl_lease_transitions_total{role="test",key="9100031",state="refused"} `)

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

package lease

import (
	"fmt"
	"slices"
	"testing"

	"github.com/leasectl/leasectl/internal/dbconn"
)

// TestHostConfigs: the search watches each distinct host of a DSN once,
// standby or not, with the TLS fallbacks pgx made for that host.
func TestHostConfigs(t *testing.T) {
	cfg, err := dbconn.Parse("postgres://u@a:5432,b:5433/db?target_session_attrs=primary", 0) // sslmode=prefer: two tries per host
	if err != nil {
		t.Fatal(err)
	}
	hosts := hostConfigs(cfg)
	if len(hosts) != 2 {
		t.Fatalf("%d host configs, want 2", len(hosts))
	}
	for i, want := range []struct {
		host string
		port uint16
	}{{"a", 5432}, {"b", 5433}} {
		h := hosts[i]
		if h.Host != want.host || h.Port != want.port || h.ValidateConnect != nil {
			t.Errorf("host %d: %s:%d, validate %v", i, h.Host, h.Port, h.ValidateConnect != nil)
		}
		for _, fb := range h.Fallbacks {
			if fb.Host != want.host || fb.Port != want.port {
				t.Errorf("host %d has a fallback to %s:%d", i, fb.Host, fb.Port)
			}
		}
		if len(h.Fallbacks) != 1 {
			t.Errorf("host %d: %d fallbacks, want the plain-text one", i, len(h.Fallbacks))
		}
	}
	single, _ := dbconn.Parse("postgres://u@a:5432/db?sslmode=disable", 0)
	if n := len(hostConfigs(single)); n != 1 {
		t.Errorf("one host: %d configs", n)
	}
}

// TestPreferHost: after a search found the primary, connections try its
// attempts (TLS, then plain text) first and the other hosts after, and
// still validate that they reached a primary.
func TestPreferHost(t *testing.T) {
	cfg, err := dbconn.Parse("postgres://u@a:5432,b:5433,c:5434/db?target_session_attrs=primary", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := preferHost(cfg, hostPort{"b", 5433})
	order := []string{fmt.Sprintf("%s:%d", got.Host, got.Port)}
	for _, fb := range got.Fallbacks {
		order = append(order, fmt.Sprintf("%s:%d", fb.Host, fb.Port))
	}
	want := []string{"b:5433", "b:5433", "a:5432", "a:5432", "c:5434", "c:5434"}
	if !slices.Equal(order, want) {
		t.Errorf("attempts %v, want %v", order, want)
	}
	if got.ValidateConnect == nil || got.TLSConfig == nil || got.Fallbacks[0].TLSConfig != nil {
		t.Errorf("lost target_session_attrs or the TLS attempt first: validate %v, tls %v, then %v", got.ValidateConnect != nil, got.TLSConfig != nil, got.Fallbacks[0].TLSConfig)
	}
	if cfg.Host != "a" {
		t.Errorf("preferHost changed its argument: first host %s", cfg.Host)
	}
	for _, p := range []hostPort{{}, {"a", 5432}, {"z", 1}} {
		if preferHost(cfg, p) != cfg {
			t.Errorf("%v: want the config unchanged", p)
		}
	}
}

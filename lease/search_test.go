package lease

import (
	"testing"

	"github.com/leasectl/leasectl/dbconn"
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

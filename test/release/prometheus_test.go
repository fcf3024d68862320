package release

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestPrometheusAlertingRules checks the example alerting rules with
// promtool (check rules, and test rules: the alerts fire on synthetic
// series exactly when they should), and that they watch a metric that
// leasectl run serves. A missing promtool fails the test.
func TestPrometheusAlertingRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install it (Debian: apt-get install -y prometheus, which ships promtool)")
	}
	dir := filepath.Join(repo, "examples", "prometheus")
	out := run(t, dir, nil, promtool, "check", "rules", "leasectl-alerts.yaml")
	if !strings.Contains(out, "SUCCESS: 3 rules found") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	out = run(t, dir, nil, promtool, "test", "rules", "leasectl-alerts.test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "examples/prometheus/leasectl-alerts.yaml")), &rules); err != nil {
		t.Fatal(err)
	}
	exprs, fors := map[string]string{}, map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert], fors[r.Alert] = r.Expr, r.For
			if r.For == "" {
				t.Errorf("%s has no for: a handover's single scrape would page", r.Alert)
			}
		}
	}
	for alert, want := range map[string]string{
		"LeasectlNoLeader":       "sum by (role) (leasectl_lease_leader) == 0",
		"LeasectlSeveralLeaders": "sum by (role) (leasectl_lease_leader) > 1",
	} {
		if exprs[alert] != want {
			t.Errorf("%s: expr %q, want %q", alert, exprs[alert], want)
		}
	}
	// No live term for a minute pages: longer than the term deadline of a
	// leader that died with the default flags (37s), so a healthy handover
	// never does.
	if fors["LeasectlNoLeader"] != "1m" {
		t.Errorf("LeasectlNoLeader: for %q, want 1m", fors["LeasectlNoLeader"])
	}
	// The metric is the one leasectl run serves (package lease/leasehttp
	// writes it).
	if src := readFile(t, "lease/leasehttp/leasehttp.go"); !strings.Contains(src, "leasectl_lease_leader{%s}") {
		t.Error("lease/leasehttp no longer serves leasectl_lease_leader: update the rules")
	}
}

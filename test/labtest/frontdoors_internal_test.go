package labtest

import (
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestPgPoolConfSettingsWin: a spec's setting replaces the lab's own line
// of the same name (pgpool would also take the last of two, but one line
// per name leaves no doubt), and new names are added.
func TestPgPoolConfSettingsWin(t *testing.T) {
	l := &lab.Lab{User: "postgres", Primary: lab.Server{Port: 1001}, Standby: &lab.Server{Port: 1002}}
	p := &PgPool{
		PgPoolSpec: PgPoolSpec{Settings: map[string]string{"load_balance_mode": "off", "write_function_list": "'nextval,setval'"}},
		Port:       1003,
		ConfigFile: "/run/lab/pgpool/pgpool.conf",
	}
	conf := pgpoolConf(l, p)
	for _, want := range []string{"\nload_balance_mode = off\n", "\nwrite_function_list = 'nextval,setval'\n", "\nbackend_port0 = 1001\n", "\nbackend_port1 = 1002\n", "\nport = 1003\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("pgpool.conf lacks %q:\n%s", strings.TrimSpace(want), conf)
		}
	}
	if n := strings.Count(conf, "load_balance_mode"); n != 1 {
		t.Errorf("load_balance_mode appears %d times:\n%s", n, conf)
	}
}

// TestHAProxyConf: timeouts in milliseconds, one server line per backend,
// repeated backends under distinct names.
func TestHAProxyConf(t *testing.T) {
	l := &lab.Lab{Primary: lab.Server{Port: 1001}, Standby: &lab.Server{Port: 1002}}
	h := &HAProxy{HAProxySpec: HAProxySpec{Name: "x", Backends: []string{"primary", "standby", "primary"}, Balance: "leastconn",
		TimeoutClient: 8 * time.Second, TimeoutServer: time.Hour}, Port: 1003}
	conf := haproxyConf(l, h)
	for _, want := range []string{"timeout client 8000ms\n", "timeout server 3600000ms\n", "bind 127.0.0.1:1003\n", "balance leastconn\n",
		"server primary 127.0.0.1:1001\n", "server standby 127.0.0.1:1002\n", "server primary-2 127.0.0.1:1001\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", strings.TrimSpace(want), conf)
		}
	}
}

// TestFrontDoorNames: the hand-written check accepts exactly what
// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ does.
func TestFrontDoorNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"rr", true}, {"idle", true}, {"a", true}, {"9", true}, {"A.b_c-1", true}, {strings.Repeat("x", 40), true},
		{"", false}, {strings.Repeat("x", 41), false}, {"-a", false}, {".a", false}, {"_a", false},
		{"a b", false}, {"a/b", false}, {"a\n", false}, {"ä", false}, {"a:b", false},
	} {
		if got := isFrontDoorName(tc.name); got != tc.ok {
			t.Errorf("isFrontDoorName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

package probe_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/probe"
)

// serverTCP reads back the keepalive settings the lab's server applies to
// a TCP session started with params, the way an operator would check them
// (SHOW). For a setting left at 0 PostgreSQL shows what the socket really
// uses, the kernel's value.
func serverTCP(t *testing.T, params map[string]string) timing.TCP {
	t.Helper()
	cfg := cfgFor(t, testLab.DirectDSN())
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := dbconn.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	show := func(name string) int64 {
		var s string
		if err := conn.QueryRow(context.Background(), "SELECT setting FROM pg_settings WHERE name = $1", name).Scan(&s); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s = %q: %v", name, s, err)
		}
		return n
	}
	return timing.TCP{
		Idle:        time.Duration(show("tcp_keepalives_idle")) * time.Second,
		Interval:    time.Duration(show("tcp_keepalives_interval")) * time.Second,
		Count:       int(show("tcp_keepalives_count")),
		UserTimeout: time.Duration(show("tcp_user_timeout")) * time.Millisecond,
	}
}

// kernelKeepalives is this machine's keepalive configuration, as the kernel
// applies it to a socket that sets none of its own.
func kernelKeepalives(t *testing.T) (idle, interval time.Duration, count int) {
	t.Helper()
	read := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return time.Duration(read("tcp_keepalive_time")) * time.Second,
		time.Duration(read("tcp_keepalive_intvl")) * time.Second,
		read("tcp_keepalive_probes")
}

// TestDeadPeerJudgesTheServersRealSettings: the dead-peer check judges the
// keepalive settings that the server applies to the probe's own session
// (set here per session, as `ALTER ROLE … SET` would), says which they
// are, and warns or passes according to what a partition does with them
// (how the server drops a silent client is measured under real partitions
// by test/chaos's TestDeadPeerTime). With --strict its warning is what
// refuses the DSN.
func TestDeadPeerJudgesTheServersRealSettings(t *testing.T) {
	cases := []struct {
		name      string
		params    map[string]string
		heartbeat time.Duration // with a 5 s heartbeat timeout; 0: the default 15 s
		want      probe.Status
		says      []string // one of them
	}{
		{
			// Nothing ends a session whose reply is in flight at the cut
			// before the kernel gives up retransmitting (minutes): the
			// lock outlives its leader for long, whatever the keepalives
			// (and a machine whose keepalives give up within seconds gets
			// the other warning).
			name: "the machine's defaults", want: probe.Warn, says: []string{"can keep its lock for", "two workers could run at once"},
		},
		{
			name:   "30 s keepalives and a 60 s tcp_user_timeout",
			params: map[string]string{"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3", "tcp_user_timeout": "60000"},
			want:   probe.Pass, says: []string{"after a lease notices the loss"},
		},
		{
			// The same settings against a lease that takes longer to notice
			// than the server takes to drop it.
			name:      "the same, under a lease with a 60 s heartbeat",
			params:    map[string]string{"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3", "tcp_user_timeout": "60000"},
			heartbeat: time.Minute, want: probe.Warn, says: []string{"two workers could run at once"},
		},
		{
			name:   "keepalives that give up within seconds",
			params: map[string]string{"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3"},
			want:   probe.Warn, says: []string{"with nothing in flight"},
		},
		{
			name:   "a 5 s tcp_user_timeout",
			params: map[string]string{"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3", "tcp_user_timeout": "5000"},
			want:   probe.Warn, says: []string{"when a reply is in flight"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			applied := serverTCP(t, tc.params)
			if tc.params == nil {
				// The server reports the kernel's own values, not the
				// settings' 0: the check sees what the socket does.
				idle, interval, count := kernelKeepalives(t)
				if applied.Idle != idle || applied.Interval != interval || applied.Count != count || applied.UserTimeout != 0 {
					t.Fatalf("the server applies %s; the kernel says idle %s, interval %s, count %d", applied, idle, interval, count)
				}
			} else if want, _ := strconv.Atoi(tc.params["tcp_keepalives_idle"]); applied.Idle != time.Duration(want)*time.Second {
				t.Fatalf("the session's settings did not take: %s", applied)
			}
			cfg := cfgFor(t, testLab.DirectDSN())
			for k, v := range tc.params {
				cfg.RuntimeParams[k] = v
			}
			rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfg, Strict: true, HeartbeatInterval: tc.heartbeat})
			if err != nil {
				t.Fatal(err)
			}
			c, ok := rep.Check(probe.CheckDeadPeer)
			says := false
			for _, w := range tc.says {
				says = says || strings.Contains(c.Detail, w)
			}
			if !ok || c.Status != tc.want || !says {
				t.Fatalf("dead-peer check %+v, want %s saying %q:%s", c, tc.want, tc.says, dump(rep))
			}
			// It names the settings it judged, as the server applies them.
			if !strings.Contains(c.Detail, applied.String()) {
				t.Errorf("the check does not name the server's settings (%s): %s", applied, c.Detail)
			}
			wantVerdict := map[probe.Status]probe.Verdict{probe.Pass: probe.Stable, probe.Warn: probe.Refused}[tc.want]
			if rep.Verdict != wantVerdict || (wantVerdict == probe.Refused && rep.Refusal != probe.Strict) {
				t.Errorf("with --strict: %s (%s), want %s:%s", rep.Verdict, rep.Refusal, wantVerdict, dump(rep))
			}
		})
	}
	assertNothingLeft(t)
}

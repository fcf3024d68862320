package lab_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
)

// serverOf connects to dsn and returns the port of the server that answers
// and whether it is in recovery.
func serverOf(ctx context.Context, dsn string) (port int, inRecovery bool, err error) {
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		return 0, false, err
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return 0, false, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &inRecovery)
	return port, inRecovery, err
}

// reachesReplica checks that dsn leads to the server on port, in recovery.
func reachesReplica(ctx context.Context, dsn string, port int) error {
	got, rec, err := serverOf(ctx, dsn)
	if err != nil {
		return err
	}
	if got != port || !rec {
		return fmt.Errorf("reached port %d (in recovery: %v), want port %d in recovery", got, rec, port)
	}
	return nil
}

// eventually retries check every 100 ms until it returns nil or limit
// passes, then fails the test with check's last error.
func eventually(t *testing.T, limit time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countRows returns how many rows ha_probe has on the server of dsn.
func countRows(ctx context.Context, dsn string) (int, error) {
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		return 0, err
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM ha_probe").Scan(&n)
	return n, err
}

// insertRow writes a row to ha_probe through dsn and returns the port of
// the server that took it, which must be out of recovery.
func insertRow(ctx context.Context, t *testing.T, dsn, note string) int {
	t.Helper()
	conn := connectT(ctx, t, dsn)
	defer conn.Close(ctx)
	var port int
	var inRecovery bool
	if err := conn.QueryRow(ctx, "INSERT INTO ha_probe (note) VALUES ($1) RETURNING inet_server_port(), pg_is_in_recovery()", note).Scan(&port, &inRecovery); err != nil {
		t.Fatalf("insert %q: %v", note, err)
	}
	if inRecovery {
		t.Fatalf("insert %q landed on a server in recovery (port %d)", note, port)
	}
	return port
}

// TestHALab starts an HA lab (etcd, two Patroni nodes, HAProxy, a session
// pooler), checks where each DSN leads, then a switchover, two node deaths
// in a row each followed by the dead node's revival, and that Stop leaves no
// process, file or shared memory segment behind.
func TestHALab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	began := time.Now()
	l, err := lab.Start(ctx, lab.Options{
		Dir:      dir,
		HA:       &lab.HASpec{},
		Poolers:  []lab.PoolerSpec{{Name: "session", Mode: lab.Session, PoolSize: 5}},
		Settings: map[string]string{"application_name": "'from-settings'"},
		HBA:      []string{"host all all 10.231.0.0/24 scram-sha-256"},
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("HA lab started in %v (%s, %s, %s)", time.Since(began).Round(time.Millisecond), l.HA.PatroniVersion, l.HA.Etcd.Version, l.HA.Router.Version)
	stopped := false
	defer func() {
		if !stopped {
			_ = l.Stop(context.Background())
		}
	}()
	node1, node2 := l.HANode("node1"), l.HANode("node2")
	if node1 == nil || node2 == nil {
		t.Fatalf("nodes: %+v", l.HA.Nodes)
	}

	t.Run("state", func(t *testing.T) {
		saved, err := lab.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if saved.HA == nil || len(saved.HA.Nodes) != 2 || saved.HAPrimaryDSN() != l.HAPrimaryDSN() || saved.HAMultiHostDSN() != l.HAMultiHostDSN() {
			t.Fatalf("lab.json lacks the HA part: %+v", saved.HA)
		}
		if l.HA.TTL != 10*time.Second || l.HA.LoopWait != time.Second || l.HA.CheckFall != 2 || !strings.Contains(l.HA.Router.Checks, "inter 500ms") {
			t.Errorf("defaults not recorded: %+v", l.HA.HASpec)
		}
		if l.Primary.Port != node1.Port || l.Standby == nil || l.Standby.Port != node2.Port {
			t.Errorf("Primary %d and Standby %+v are not node1 %d and node2 %d", l.Primary.Port, l.Standby, node1.Port, node2.Port)
		}
		pw, err := l.Password()
		if err != nil {
			t.Fatal(err)
		}
		for _, dsn := range []string{l.HAMultiHostDSN(), l.HAPrimaryDSN(), l.HAReplicaDSN(), l.DirectDSN()} {
			if strings.Contains(dsn, pw) {
				t.Errorf("DSN carries the password: %s", dsn)
			}
		}
		for _, n := range l.HA.Nodes {
			st, err := os.Stat(n.ConfigFile)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v (%v), want 0600: it holds the passwords", n.ConfigFile, st.Mode(), err)
			}
		}
		roles := map[string]string{}
		for _, c := range l.Status() {
			roles[c.Name] = c.Role
			if !c.Up || c.PID == 0 {
				t.Errorf("status: %s is not up: %+v", c.Name, c)
			}
		}
		for name, want := range map[string]string{"etcd": "", "node1": "primary", "node1-pg": "primary", "node2": "replica", "node2-pg": "replica", "ha-primary": "primary", "ha-replicas": "replicas", "session": ""} {
			if got, ok := roles[name]; !ok || got != want {
				t.Errorf("status: %s has role %q (listed: %v), want %q", name, got, ok, want)
			}
		}
		if p, err := l.HAPrimary(ctx); err != nil || p.Name != "node1" {
			t.Errorf("HAPrimary = %v, %v; want node1", p, err)
		}
		routes, err := l.HAProxyRoutes()
		if err != nil || strings.Join(routes["primary"], ",") != "node1" || strings.Join(routes["replicas"], ",") != "node2" {
			t.Errorf("HAProxyRoutes = %v, %v", routes, err)
		}
	})

	t.Run("routes", func(t *testing.T) {
		conn := connectT(ctx, t, l.HAMultiHostDSN())
		if _, err := conn.Exec(ctx, "CREATE TABLE ha_probe (id serial PRIMARY KEY, note text)"); err != nil {
			t.Fatal(err)
		}
		var app string
		var rules int
		if err := conn.QueryRow(ctx, "SELECT current_setting('application_name'), (SELECT count(*) FROM pg_hba_file_rules WHERE '10.231.0.0' = address)").Scan(&app, &rules); err != nil {
			t.Fatal(err)
		}
		if app != "from-settings" || rules != 1 {
			t.Errorf("Settings and HBA did not reach the node: application_name %q, %d extra HBA rules", app, rules)
		}
		conn.Close(ctx)
		for name, dsn := range map[string]string{"multi-host": l.HAMultiHostDSN(), "haproxy primary": l.HAPrimaryDSN(), "direct": l.DirectDSN(), "pooler": l.PoolerDSN("session")} {
			if port := insertRow(ctx, t, dsn, name); port != node1.Port {
				t.Errorf("%s: the write went to port %d, want node1's %d", name, port, node1.Port)
			}
		}
		if err := reachesReplica(ctx, l.HAReplicaDSN(), node2.Port); err != nil {
			t.Errorf("haproxy replicas: %v", err)
		}
		eventually(t, 10*time.Second, "the writes reach the replica", func() error {
			if n, err := countRows(ctx, l.HAReplicaDSN()); err != nil || n != 4 {
				return fmt.Errorf("%d rows (%v)", n, err)
			}
			return nil
		})
	})

	t.Run("switchover", func(t *testing.T) {
		ch, err := l.Switchover(ctx)
		if err != nil {
			t.Fatalf("switchover: %v", err)
		}
		t.Logf("switchover %s -> %s: writable after %v, HAProxy after %v, old primary streaming after %v", ch.From, ch.To, ch.Writable, ch.Routed, ch.Rejoined)
		if ch.From != "node1" || ch.To != "node2" {
			t.Fatalf("switchover went %s -> %s", ch.From, ch.To)
		}
		if p, err := l.HAPrimary(ctx); err != nil || p.Name != "node2" {
			t.Fatalf("HAPrimary = %v, %v; want node2", p, err)
		}
		if l.Primary.Port != node2.Port || l.Standby.Port != node1.Port {
			t.Errorf("Primary %d, Standby %d: want node2 %d, node1 %d", l.Primary.Port, l.Standby.Port, node2.Port, node1.Port)
		}
		if saved, err := lab.Load(dir); err != nil || saved.Primary.Port != node2.Port {
			t.Errorf("lab.json does not record node2 as the primary: %v", err)
		}
		for name, dsn := range map[string]string{"haproxy primary": l.HAPrimaryDSN(), "multi-host": l.HAMultiHostDSN(), "direct": l.DirectDSN(), "pooler": l.PoolerDSN("session")} {
			if port := insertRow(ctx, t, dsn, "after switchover "+name); port != node2.Port {
				t.Errorf("%s after the switchover: the write went to port %d, want node2's %d", name, port, node2.Port)
			}
		}
		if err := reachesReplica(ctx, l.HAReplicaDSN(), node1.Port); err != nil {
			t.Errorf("haproxy replicas after the switchover: %v", err)
		}
	})

	killAndRevive := func(t *testing.T, victim, survivor *lab.HANode) {
		ch, err := l.KillPrimary(ctx)
		if err != nil {
			t.Fatalf("kill primary: %v", err)
		}
		t.Logf("killed %s: %s writable after %v, HAProxy after %v", ch.From, ch.To, ch.Writable, ch.Routed)
		if ch.From != victim.Name || ch.To != survivor.Name {
			t.Fatalf("failover went %s -> %s, want %s -> %s", ch.From, ch.To, victim.Name, survivor.Name)
		}
		if lab.PatroniPID(victim) != 0 || lab.ServerPID(&victim.Server) != 0 {
			t.Errorf("%s still runs: patroni %d, postgres %d", victim.Name, lab.PatroniPID(victim), lab.ServerPID(&victim.Server))
		}
		if left := lab.ProcessesUsing(filepath.Dir(victim.ConfigFile)); len(left) > 0 {
			t.Errorf("processes of the killed %s: %v", victim.Name, left)
		}
		for name, dsn := range map[string]string{"haproxy primary": l.HAPrimaryDSN(), "multi-host": l.HAMultiHostDSN(), "pooler": l.PoolerDSN("session")} {
			if port := insertRow(ctx, t, dsn, "after kill "+name); port != survivor.Port {
				t.Errorf("%s after the kill: the write went to port %d, want %s's %d", name, port, survivor.Name, survivor.Port)
			}
		}
		for _, c := range l.Status() {
			if c.Name == victim.Name && c.Up {
				t.Errorf("status shows the killed %s up: %+v", victim.Name, c)
			}
		}
		if _, err := l.Switchover(ctx); err == nil || !strings.Contains(err.Error(), "revive") {
			t.Errorf("switchover with a dead replica: %v, want an error that says to revive it", err)
		}

		took, err := l.ReviveNode(ctx, victim.Name)
		if err != nil {
			t.Fatalf("revive %s: %v", victim.Name, err)
		}
		t.Logf("revived %s: streaming after %v", victim.Name, took)
		if p, err := l.HAPrimary(ctx); err != nil || p.Name != survivor.Name {
			t.Fatalf("after the revival HAPrimary = %v, %v; want %s", p, err, survivor.Name)
		}
		if err := reachesReplica(ctx, l.HAReplicaDSN(), victim.Port); err != nil {
			t.Errorf("haproxy replicas after the revival: %v", err)
		}
		want, err := countRows(ctx, l.HAPrimaryDSN())
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the revived node has every row", func() error {
			if n, err := countRows(ctx, l.DSN(victim.Port, l.User, "postgres")); err != nil || n != want {
				return fmt.Errorf("%d rows of %d (%v)", n, want, err)
			}
			return nil
		})
	}
	t.Run("kill node2", func(t *testing.T) { killAndRevive(t, node2, node1) })
	t.Run("kill node1", func(t *testing.T) { killAndRevive(t, node1, node2) })

	t.Run("stop", func(t *testing.T) {
		// One node dies first, as after a KillPrimary that nobody revived:
		// its postmaster's shared memory segment is left for Stop.
		var shm []int
		for _, n := range l.HA.Nodes {
			if id := lab.ServerShmID(&n.Server); id >= 0 && lab.ShmSegmentExists(id) {
				shm = append(shm, id)
			}
		}
		if len(shm) != 2 {
			t.Fatalf("want a shared memory segment per node, found %v", shm)
		}
		if err := l.KillNode("node1"); err != nil {
			t.Fatal(err)
		}
		if !lab.ShmSegmentExists(shm[0]) {
			t.Fatal("the killed node1's shared memory segment is gone already: the check below would be blind")
		}
		runDir := l.RunDir
		stopped = true
		if err := l.Stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if left := lab.ProcessesUsing(runDir); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
		if _, err := os.Stat(runDir); !os.IsNotExist(err) {
			t.Errorf("run dir %s still there (%v)", runDir, err)
		}
		for _, id := range shm {
			if lab.ShmSegmentExists(id) {
				t.Errorf("shared memory segment %d left behind", id)
			}
		}
		if _, err := lab.Load(dir); err == nil {
			t.Error("lab state still present after Stop")
		}
	})
}

// TestHAOptionErrors: HA settings that cannot work are refused before
// anything starts.
func TestHAOptionErrors(t *testing.T) {
	for name, spec := range map[string]lab.HASpec{
		"fractional ttl":     {TTL: 1500 * time.Millisecond},
		"retries exceed ttl": {TTL: 5 * time.Second, RetryTimeout: 3 * time.Second},
		"negative fall":      {CheckFall: -1},
		"tiny interval":      {CheckInterval: time.Millisecond},
	} {
		dir := t.TempDir()
		_, err := lab.Start(context.Background(), lab.Options{Dir: dir, HA: &spec})
		if err == nil || !strings.Contains(err.Error(), "lab options: HA") {
			t.Errorf("%s: got %v, want a lab options error", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
			t.Errorf("%s: a lab.json was written", name)
		}
	}
}

// TestHAStartFailureLeavesNothing: a setting that Patroni drops as invalid
// (where PostgreSQL would refuse to start) fails Start soon, with the
// reason from Patroni's log, after etcd and node1 ran; Start stops and
// removes everything it started.
func TestHAStartFailureLeavesNothing(t *testing.T) {
	base := pgtest.TempBase(t, "leasectl-ha-fail-")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var steps strings.Builder
	began := time.Now()
	l, err := lab.Start(ctx, lab.Options{Log: &steps, HA: &lab.HASpec{}, Poolers: []lab.PoolerSpec{}, Settings: map[string]string{"work_mem": "'lots'"}})
	if err == nil {
		l.Stop(context.Background())
		t.Fatal("started with work_mem = lots")
	}
	t.Logf("failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "work_mem") || !strings.Contains(err.Error(), "Settings") {
		t.Errorf("the error does not name the bad setting and what to fix: %v", err)
	}
	if !strings.Contains(steps.String(), "start etcd") || !strings.Contains(steps.String(), "start patroni node1") {
		t.Fatalf("etcd and node1 did not run before the failure, so this test proves nothing:\n%s", steps.String())
	}
	if left := lab.ProcessesUsing(base); len(left) > 0 {
		t.Fatalf("processes left behind by the failed start: %v", left)
	}
	if entries, _ := os.ReadDir(base); len(entries) > 0 {
		t.Fatalf("files left behind by the failed start: %v", entries)
	}
}

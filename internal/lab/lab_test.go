package lab_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
)

func psqlPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"psql"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("psql not found (sudo apt-get install -y postgresql-client)")
	return ""
}

// TestStartServeStop starts a lab with every kind of pooler and a standby,
// checks that each DSN answers (through pgx and through psql), and that Stop
// leaves no process behind.
func TestStartServeStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, err := lab.Start(ctx, lab.Options{
		Dir:     dir,
		Standby: true,
		Poolers: []lab.PoolerSpec{
			{Name: "transaction", Mode: lab.Transaction, PoolSize: 20},
			{Name: "tx1", Mode: lab.Transaction, PoolSize: 1},
			{Name: "session", Mode: lab.Session, PoolSize: 20},
			{Name: "statement", Mode: lab.Statement, PoolSize: 5},
		},
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = l.Stop(context.Background())
		}
	}()

	if _, err := lab.Load(dir); err != nil {
		t.Fatalf("load state: %v", err)
	}
	if _, err := lab.Start(ctx, lab.Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second start in the same dir: got %v, want already running", err)
	}

	dsns := map[string]string{
		"direct":  l.DirectDSN(),
		"socket":  l.SocketDSN(),
		"standby": l.StandbyDSN(),
	}
	for _, p := range l.Poolers {
		dsns[p.Name] = l.PoolerDSN(p.Name)
	}
	pw, err := l.Password()
	if err != nil {
		t.Fatal(err)
	}
	for name, dsn := range dsns {
		if strings.Contains(dsn, pw) {
			t.Errorf("%s DSN carries the password", name)
		}
		cfg, err := dbconn.Parse(dsn, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: parse: %v", name, err)
		}
		conn, err := dbconn.Connect(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: connect: %v", name, err)
		}
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			t.Fatalf("%s: query: %v", name, err)
		}
		if want := name == "standby"; inRecovery != want {
			t.Errorf("%s: pg_is_in_recovery = %v, want %v", name, inRecovery, want)
		}
		conn.Close(ctx)

		out, err := exec.CommandContext(ctx, psqlPath(t), "-X", "-At", "-d", dsn, "-c", "select 41+1").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Errorf("%s: psql: %v: %s", name, err, out)
		}
	}

	for _, c := range l.Status() {
		if !c.Up || c.PID == 0 {
			t.Errorf("status: %s is not up: %+v", c.Name, c)
		}
	}
	runDir := l.RunDir
	if len(lab.ProcessesUsing(runDir)) == 0 {
		t.Fatal("no process found in the run dir of a running lab: the leftover check would be blind")
	}

	stopped = true
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if left := lab.ProcessesUsing(runDir); len(left) > 0 {
		t.Fatalf("processes left behind after Stop: %v", left)
	}
	for _, c := range l.Status() {
		if c.Up || c.PID != 0 {
			t.Errorf("after stop, %s still up: %+v", c.Name, c)
		}
	}
	if _, err := lab.Load(dir); err == nil {
		t.Error("lab state still present after Stop")
	}
}

func TestWrongPasswordIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer l.Stop(context.Background())
	dsn := strings.Replace(l.DirectDSN(), "postgres@", "postgres:not-the-password@", 1)
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dbconn.Connect(ctx, cfg)
	var ce *dbconn.ConnectError
	if err == nil {
		t.Fatal("connected with a wrong password: the lab does not check passwords")
	}
	if !asConnectError(err, &ce) || !ce.IsAuth() {
		t.Fatalf("want an authentication ConnectError, got %T %v", err, err)
	}
	if strings.Contains(err.Error(), "not-the-password") {
		t.Fatalf("error shows the password: %v", err)
	}
}

// TestHBAAndMultiHost: extra pg_hba lines and settings reach the servers,
// and the multi-host DSN with target_session_attrs=primary lands on the
// primary even when the standby is listed too.
func TestHBAAndMultiHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{
		Poolers:  []lab.PoolerSpec{},
		Standby:  true,
		Settings: map[string]string{"application_name": "'from-settings'"},
		HBA:      []string{"host all all 10.231.0.0/24 scram-sha-256"},
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer l.Stop(context.Background())
	cfg, err := dbconn.Parse(l.MultiHostDSN(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	info, err := dbconn.Server(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if info.InRecovery || info.Port != l.Primary.Port {
		t.Errorf("multi-host DSN reached %+v, want the primary on %d", info, l.Primary.Port)
	}
	var rules int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_hba_file_rules WHERE '10.231.0.0' = address").Scan(&rules); err != nil {
		t.Fatal(err)
	}
	if rules != 1 {
		t.Errorf("the extra pg_hba line is not in effect (%d rules)", rules)
	}
	var app string
	if err := conn.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil || app != "from-settings" {
		t.Errorf("extra setting not in effect: application_name = %q (%v)", app, err)
	}
}

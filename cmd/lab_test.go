package cmd

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lab"
)

// TestLabUpEnvStatusDown drives the lab commands end to end, checks the
// exported DSNs with psql, and that down leaves no process behind.
func TestLabUpEnvStatusDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	up := runCLIWith(t, ctx, nil, false, "", "lab", "up", "--dir", dir, "--pooler", "stmt=statement:2")
	defer runCLI(t, nil, "lab", "down", "--dir", dir)
	if up.Code != 0 {
		t.Fatalf("lab up: exit %d\n%s%s", up.Code, up.Stdout, up.Stderr)
	}
	env := runCLI(t, nil, "lab", "env", "--dir", dir, "-o", "json")
	if env.Code != 0 {
		t.Fatalf("lab env: exit %d: %s", env.Code, env.Stderr)
	}
	var vars map[string]string
	if err := json.Unmarshal([]byte(env.Stdout), &vars); err != nil {
		t.Fatalf("lab env -o json: %v\n%s", err, env.Stdout)
	}
	for _, name := range []string{"LEASECTL_DSN", "LEASECTL_LAB_DSN", "LEASECTL_LAB_SOCKET_DSN", "LEASECTL_LAB_TX_DSN", "LEASECTL_LAB_SESSION_DSN", "LEASECTL_LAB_STMT_DSN"} {
		dsn := vars[name]
		if dsn == "" {
			t.Fatalf("lab env: no %s in %v", name, vars)
		}
		out, err := exec.CommandContext(ctx, "psql", "-X", "-At", "-d", dsn, "-c", "select 'ok'").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Errorf("psql through %s: %v: %s", name, err, out)
		}
	}
	sh := runCLI(t, nil, "lab", "env", "--dir", dir)
	if !strings.Contains(sh.Stdout, "export LEASECTL_LAB_TX_DSN='postgres://") {
		t.Errorf("lab env: no export line for the transaction pooler:\n%s", sh.Stdout)
	}
	st := runCLI(t, nil, "lab", "status", "--dir", dir)
	if st.Code != 0 || strings.Count(st.Stdout, " up\n") != 4 {
		t.Errorf("lab status: exit %d, want 4 processes up:\n%s", st.Code, st.Stdout)
	}
	again := runCLI(t, nil, "lab", "up", "--dir", dir)
	if again.Code != ExitUsage || !strings.Contains(again.Stderr, "already running") {
		t.Errorf("second lab up: exit %d: %s", again.Code, again.Stderr)
	}

	l, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	down := runCLI(t, nil, "lab", "down", "--dir", dir)
	if down.Code != 0 {
		t.Fatalf("lab down: exit %d: %s", down.Code, down.Stderr)
	}
	if left := lab.ProcessesUsing(l.RunDir); len(left) > 0 {
		t.Fatalf("lab down left processes behind: %v", left)
	}
	if st := runCLI(t, nil, "lab", "status", "--dir", dir); st.Code != ExitUsage {
		t.Errorf("status after down: exit %d, want 2 (no lab)", st.Code)
	}
}

package cmd

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestLabUpEnvStatusDown drives the lab commands end to end, checks the
// exported DSNs with psql, and that down leaves no process behind.
func TestLabUpEnvStatusDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	up := runCLIWith(t, ctx, nil, false, "", "lab", "up", "--dir", dir, "--pooler", "stmt=statement:2", "-o", "json")
	defer runCLI(t, nil, "lab", "down", "--dir", dir)
	if up.Code != 0 {
		t.Fatalf("lab up: exit %d\n%s%s", up.Code, up.Stdout, up.Stderr)
	}
	checkJSONDoc(t, up.Stdout, up.Code, "lab up")
	env := runCLI(t, nil, "lab", "env", "--dir", dir, "-o", "json")
	if env.Code != 0 {
		t.Fatalf("lab env: exit %d: %s", env.Code, env.Stderr)
	}
	checkJSONDoc(t, env.Stdout, env.Code, "lab env")
	var doc labEnvJSON
	if err := json.Unmarshal([]byte(env.Stdout), &doc); err != nil {
		t.Fatalf("lab env -o json: %v\n%s", err, env.Stdout)
	}
	vars := doc.Env
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
	down := runCLI(t, nil, "lab", "down", "--dir", dir, "-o", "json")
	if down.Code != 0 {
		t.Fatalf("lab down: exit %d: %s", down.Code, down.Stderr)
	}
	checkJSONDoc(t, down.Stdout, down.Code, "lab down")
	if left := lab.ProcessesUsing(l.RunDir); len(left) > 0 {
		t.Fatalf("lab down left processes behind: %v", left)
	}
	if st := runCLI(t, nil, "lab", "status", "--dir", dir); st.Code != ExitUsage {
		t.Errorf("status after down: exit %d, want 2 (no lab)", st.Code)
	}
}

// TestLabHAUpEnvSwitchoverKillReviveDown drives an HA lab through the CLI:
// up --ha, the exported HA DSNs checked with psql, status with each node's
// role, a switchover, a kill of the primary (status then fails), the dead
// node's revival, and down leaving no process behind.
func TestLabHAUpEnvSwitchoverKillReviveDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if res := runCLI(t, nil, "lab", "up", "--ha", "--standby", "--dir", dir); res.Code != ExitUsage || !strings.Contains(res.Stderr, "drop --standby") {
		t.Errorf("up --ha --standby: exit %d: %s", res.Code, res.Stderr)
	}
	up := runCLIWith(t, ctx, nil, false, "", "lab", "up", "--ha", "--dir", dir, "-o", "json")
	defer runCLI(t, nil, "lab", "down", "--dir", dir)
	if up.Code != 0 {
		t.Fatalf("lab up --ha: exit %d\n%s%s", up.Code, up.Stdout, up.Stderr)
	}
	var started labJSONOut
	if err := json.Unmarshal([]byte(up.Stdout), &started); err != nil || started.HA == nil || started.HA.Primary != "node1" {
		t.Fatalf("lab up --ha -o json: %v\n%s", err, up.Stdout)
	}
	checkJSONDoc(t, up.Stdout, up.Code, "lab up")
	t.Logf("lab up --ha took %.0f ms; checks: %s, timeout check %.0f ms", started.StartMS, started.HA.Checks, started.HA.CheckTimeoutMS)

	env := runCLI(t, nil, "lab", "env", "--dir", dir, "-o", "json")
	var doc labEnvJSON
	if err := json.Unmarshal([]byte(env.Stdout), &doc); err != nil {
		t.Fatalf("lab env -o json: exit %d: %v\n%s%s", env.Code, err, env.Stdout, env.Stderr)
	}
	vars := doc.Env
	psql := func(dsn, sql string) string {
		out, err := exec.CommandContext(ctx, "psql", "-X", "-At", "-d", dsn, "-c", sql).CombinedOutput()
		if err != nil {
			t.Errorf("psql %q: %v: %s", sql, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for name, want := range map[string]string{"LEASECTL_LAB_HA_DSN": "f", "LEASECTL_LAB_HA_PRIMARY_DSN": "f", "LEASECTL_LAB_HA_REPLICA_DSN": "t", "LEASECTL_DSN": "f"} {
		if vars[name] == "" {
			t.Fatalf("lab env: no %s in %v", name, vars)
		}
		if got := psql(vars[name], "select pg_is_in_recovery()"); got != want {
			t.Errorf("%s: pg_is_in_recovery() = %q, want %q", name, got, want)
		}
	}
	st := runCLI(t, nil, "lab", "status", "--dir", dir)
	for _, want := range []string{"etcd", "patroni primary", "patroni replica", "postgres primary", "postgres replica", "haproxy primary", "haproxy replicas"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("lab status lacks %q:\n%s", want, st.Stdout)
		}
	}
	if st.Code != 0 {
		t.Errorf("lab status: exit %d\n%s%s", st.Code, st.Stdout, st.Stderr)
	}

	sw := runCLIWith(t, ctx, nil, false, "", "lab", "switchover", "--dir", dir)
	if sw.Code != 0 || !strings.Contains(sw.Stdout, "switchover node1 → node2") {
		t.Fatalf("lab switchover: exit %d\n%s%s", sw.Code, sw.Stdout, sw.Stderr)
	}
	t.Log(strings.SplitN(sw.Stdout, "\n", 2)[0])
	if got := psql(vars["LEASECTL_LAB_HA_PRIMARY_DSN"], "select inet_server_port()"); got != psql(vars["LEASECTL_LAB_STANDBY_DSN"], "select inet_server_port()") {
		t.Errorf("after the switchover HAProxy's primary port leads to port %s, not to node2", got)
	}

	kill := runCLIWith(t, ctx, nil, false, "", "lab", "kill-primary", "--dir", dir, "-o", "json")
	var ch labChangeJSON
	if err := json.Unmarshal([]byte(kill.Stdout), &ch); err != nil || kill.Code != 0 || ch.From != "node2" || ch.To != "node1" {
		t.Fatalf("lab kill-primary: exit %d: %v\n%s%s", kill.Code, err, kill.Stdout, kill.Stderr)
	}
	checkJSONDoc(t, kill.Stdout, kill.Code, "lab kill-primary")
	if ch.RejoinedMS != nil {
		t.Errorf("lab kill-primary: rejoined_ms %v, want null (the old primary is dead)", *ch.RejoinedMS)
	}
	t.Logf("kill-primary: node1 writable after %.0f ms, HAProxy after %.0f ms", ch.WritableMS, ch.RoutedMS)
	if st := runCLI(t, nil, "lab", "status", "--dir", dir); st.Code != ExitCheckFailed || !strings.Contains(st.Stderr, "lab revive node2") {
		t.Errorf("lab status with node2 dead: exit %d, want 1 and a hint to revive node2\n%s%s", st.Code, st.Stdout, st.Stderr)
	}
	st = runCLI(t, nil, "lab", "status", "--dir", dir, "-o", "json")
	checkJSONDoc(t, st.Stdout, st.Code, "lab status")
	if ok, _ := jsonValue(t, st.Stdout, "ok"); st.Code != ExitCheckFailed || ok != false {
		t.Errorf("lab status -o json with node2 dead: exit %d, want 1 and ok false\n%s", st.Code, st.Stdout)
	}
	if res := runCLI(t, nil, "lab", "switchover", "--dir", dir); res.Code == 0 || !strings.Contains(res.Stderr, "lab revive node2") {
		t.Errorf("switchover with node2 dead: exit %d: %s", res.Code, res.Stderr)
	}
	if res := runCLI(t, nil, "lab", "revive", "node3", "--dir", dir); res.Code != ExitUsage {
		t.Errorf("revive node3: exit %d, want 2: %s", res.Code, res.Stderr)
	}
	rev := runCLIWith(t, ctx, nil, false, "", "lab", "revive", "node2", "--dir", dir)
	if rev.Code != 0 || !strings.Contains(rev.Stdout, "node2 is back as the replica") {
		t.Fatalf("lab revive node2: exit %d\n%s%s", rev.Code, rev.Stdout, rev.Stderr)
	}
	// The same in JSON: a second switchover (node1 is primary again after
	// the kill, node2 its replica), and status.
	sw = runCLIWith(t, ctx, nil, false, "", "lab", "switchover", "--dir", dir, "-o", "json")
	checkJSONDoc(t, sw.Stdout, sw.Code, "lab switchover")
	var back labChangeJSON
	if err := json.Unmarshal([]byte(sw.Stdout), &back); err != nil || back.From != "node1" || back.To != "node2" || back.RejoinedMS == nil {
		t.Errorf("lab switchover -o json: %v\n%s", err, sw.Stdout)
	}
	if st := runCLI(t, nil, "lab", "status", "--dir", dir); st.Code != 0 {
		t.Errorf("lab status after the revival: exit %d\n%s", st.Code, st.Stdout)
	}

	l, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if down := runCLI(t, nil, "lab", "down", "--dir", dir); down.Code != 0 {
		t.Fatalf("lab down: exit %d: %s", down.Code, down.Stderr)
	}
	if left := lab.ProcessesUsing(l.RunDir); len(left) > 0 {
		t.Fatalf("lab down left processes behind: %v", left)
	}
}

// TestLabHACommandsNeedAnHALab: switchover, kill-primary and revive on a
// lab started without --ha exit 2 and say how to start an HA lab.
func TestLabHACommandsNeedAnHALab(t *testing.T) {
	for _, args := range [][]string{{"switchover"}, {"kill-primary"}, {"revive", "node1"}} {
		res := runCLI(t, nil, append([]string{"lab"}, append(args, "--dir", needLab(t).Dir)...)...)
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, "lab up --ha") {
			t.Errorf("lab %v on a lab without HA: exit %d: %s", args, res.Code, res.Stderr)
		}
	}
}

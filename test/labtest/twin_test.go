package labtest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestTwin starts a lab whose front doors need the twin (HAProxy leastconn
// over the primary and the twin, pgpool-II in native replication mode over
// both) and checks that the twin is a second primary that shares nothing
// with the first, that each front door reaches both, and that Stop, from
// the saved state, leaves nothing behind.
func TestTwin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, d, err := labtest.Start(ctx, lab.Options{Dir: dir, Poolers: []lab.PoolerSpec{}}, labtest.Spec{
		PgPool:  &labtest.PgPoolSpec{Mode: labtest.NativeReplication},
		HAProxy: []labtest.HAProxySpec{{Name: "split", Backends: []string{"primary", labtest.TwinBackend}, Balance: "leastconn"}},
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
	twin := d.Twin()
	if twin == nil || d.TwinDSN() == "" || twin.Port == l.Primary.Port {
		t.Fatalf("no twin of its own: %+v", twin)
	}
	saved, sd, err := labtest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sd.TwinDSN() != d.TwinDSN() || sd.PgPool == nil || sd.PgPool.Mode != labtest.NativeReplication {
		t.Fatalf("lab.json lacks the twin: %q, pgpool %+v", sd.TwinDSN(), sd.PgPool)
	}
	up := map[string]bool{}
	for _, c := range l.Status() {
		up[c.Name] = c.Up && c.PID > 0
	}
	if !up["twin"] || !up["split"] || !up["pgpool"] {
		t.Errorf("status: %v", up)
	}

	// Two primaries, two systems.
	const idSQL = `SELECT (SELECT system_identifier FROM pg_control_system()), pg_is_in_recovery()`
	ids := map[string]int64{}
	for name, dsn := range map[string]string{"primary": l.DirectDSN(), "twin": d.TwinDSN()} {
		var id int64
		var recovery bool
		if err := connectT(ctx, t, dsn).QueryRow(ctx, idSQL).Scan(&id, &recovery); err != nil || recovery {
			t.Fatalf("%s: system %d, in recovery %v, %v", name, id, recovery, err)
		}
		ids[name] = id
	}
	if ids["primary"] == ids["twin"] {
		t.Fatalf("the twin shares the primary's system identifier %d", ids["primary"])
	}

	// HAProxy leastconn: two connections held open reach one server each.
	seen := map[int64]bool{}
	for range 2 {
		var id int64
		var recovery bool
		if err := connectT(ctx, t, d.HAProxyDSN("split")).QueryRow(ctx, idSQL).Scan(&id, &recovery); err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
	if !seen[ids["primary"]] || !seen[ids["twin"]] {
		t.Errorf("two connections through split reached %v, want both %v", seen, ids)
	}

	// pgpool-II in native replication mode takes a lock on both servers.
	const key = 4242001
	held := connectT(ctx, t, d.PgPoolDSN())
	var took bool
	if err := held.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&took); err != nil || !took {
		t.Fatalf("take the key through pgpool: %v %v", took, err)
	}
	if advisoryHolder(ctx, t, l.DirectDSN(), key) == 0 || advisoryHolder(ctx, t, d.TwinDSN(), key) == 0 {
		t.Errorf("in native replication mode the key is not held on both servers (primary %d, twin %d)",
			advisoryHolder(ctx, t, l.DirectDSN(), key), advisoryHolder(ctx, t, d.TwinDSN(), key))
	}
	held.Close(ctx)

	twinPID := lab.ServerPID(twin)
	if twinPID == 0 {
		t.Fatal("the twin has no postmaster pid")
	}
	stopped = true
	if err := saved.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if left := lab.ProcessesUsing(l.RunDir); len(left) > 0 {
		t.Fatalf("processes left behind after Stop: %v", left)
	}
	if _, err := os.Stat(l.RunDir); err == nil {
		t.Errorf("run dir %s still exists", l.RunDir)
	}
	if ids := sharedMemoryOf(twinPID); len(ids) > 0 {
		t.Errorf("the twin's shared memory is left behind: shmids %v", ids)
	}
}

// TestTwinStartFailureLeavesNothing: when the HAProxy instance that needs
// the twin fails to start, after the twin runs, Start stops the twin too.
func TestTwinStartFailureLeavesNothing(t *testing.T) {
	base := pgtest.TempBase(t, "leasectl-twin-fail-")
	var steps strings.Builder
	l, _, err := labtest.Start(context.Background(), lab.Options{Log: &steps, Poolers: []lab.PoolerSpec{}},
		labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "bad", Backends: []string{"primary", labtest.TwinBackend}, Balance: "no-such-algorithm"}}})
	if err == nil {
		l.Stop(context.Background())
		t.Fatal("started with an unknown balance algorithm")
	}
	if !strings.Contains(steps.String(), "the twin") {
		t.Fatalf("the twin was not started before haproxy failed, so this test proves nothing:\n%s", steps.String())
	}
	if left := lab.ProcessesUsing(base); len(left) > 0 {
		t.Fatalf("processes left behind by the failed start: %v", left)
	}
	if entries, _ := os.ReadDir(base); len(entries) > 0 {
		t.Fatalf("files left behind by the failed start: %v", entries)
	}
}

// TestTwinOptionErrors: a pgpool mode that does not exist is refused
// before anything starts, and native replication needs no standby.
func TestTwinOptionErrors(t *testing.T) {
	_, _, err := labtest.Start(context.Background(), lab.Options{}, labtest.Spec{PgPool: &labtest.PgPoolSpec{Mode: "snapshot_isolation"}})
	if err == nil || !strings.Contains(err.Error(), labtest.NativeReplication) || !strings.Contains(err.Error(), labtest.Raw) {
		t.Errorf("pgpool mode snapshot_isolation: %v", err)
	}
}

//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/leasetest"
)

// haLab is the Patroni lab of the HA scenarios (etcd, two Patroni nodes,
// HAProxy routing by Patroni's checks), started by the first of them.
var (
	haLabOnce sync.Once
	haLabErr  error
	haLabRef  *lab.Lab
)

func patroniLab(t *testing.T) *lab.Lab {
	t.Helper()
	haLabOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		haLabRef, haLabErr = lab.Start(ctx, lab.Options{HA: &lab.HASpec{}})
	})
	if haLabErr != nil {
		t.Fatal(haLabErr)
	}
	return haLabRef
}

// stopPatroniLab stops the Patroni lab if a scenario started it.
func stopPatroniLab() error {
	if haLabRef == nil {
		return nil
	}
	return haLabRef.Stop(context.Background())
}

// patroniFaults runs three replicas over dsn (the multi-host DSN, or
// HAProxy's primary port) and one over HAProxy's replicas port, which must
// never lead, through switchovers and node deaths of the Patroni lab, with
// default flags. After every fault a program starts on the new primary, its
// backend holds the key there, `who` and `verify` over the multi-host DSN
// see it, and the lag from the new primary accepting writes to that start
// is measured.
func patroniFaults(t *testing.T, f *fleet, res *result, form kind, switchovers, deaths int) {
	h, ctx := f.h, context.Background()
	l := patroniLab(t)
	dsn := l.HAMultiHostDSN()
	if form == haPrimary {
		dsn = l.HAPrimaryDSN()
	}
	from := h.mark()
	for range 3 {
		f.start(form, dsn, nil)
	}
	f.start(haReplica, l.HAReplicaDSN(), nil)
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))

	var lags []time.Duration
	var each []string
	viaReplicas := 0
	faults := make([]string, 0, switchovers+deaths)
	for i := 0; i < max(switchovers, deaths); i++ {
		if i < switchovers {
			faults = append(faults, "switchover")
		}
		if i < deaths {
			faults = append(faults, "node death")
		}
	}
	for i, fault := range faults {
		w := labtest.WatchWrites(l, 5*time.Millisecond)
		from := h.mark()
		t0 := time.Now()
		var ch *lab.HAChange
		var err error
		if fault == "switchover" {
			ch, err = l.Switchover(ctx)
		} else {
			ch, err = l.KillPrimary(ctx)
		}
		if err != nil {
			w.Stop()
			t.Fatalf("%s %d: %v", fault, i+1, err)
		}
		res.faults++
		first := h.await(t, from, hang, fmt.Sprintf("a leader after %s %d", fault, i+1), isStart)
		next := first
		if f.of(first).kind == haReplica {
			// It reached the new primary through HAProxy's replicas port
			// before HAProxy's check caught up (safe: the lease proves it
			// is on a primary); HAProxy then shuts that session down, and
			// a replica of the DSN under test takes over.
			viaReplicas++
			// Its backend holds the key on the new primary, unless HAProxy
			// has already shut that session down, in which case its
			// program must have been stopped (and the witness reports an
			// overlap if the next one started before it was gone).
			if holder, ok := roleKeyHolder(t, pgtestConn(t, l.DSN(l.HANode(ch.To).Port, l.User, "postgres"))); !ok || strconv.Itoa(int(holder.PID)) != first.BackendPID {
				h.await(t, from, hang, fmt.Sprintf("the stop of the replicas-port leader's program after %s %d", fault, i+1), isTermOf(first.PID))
			}
			next = h.await(t, from, hang, fmt.Sprintf("a leader over the %s DSN after %s %d", form, fault, i+1), f.isStartOf(form))
		}
		w.Stop()
		primary := l.HANode(ch.To)
		writable, ok := w.WritableAt(primary.Port)
		if !ok {
			t.Fatalf("%s %d: no write was seen on the new primary %s", fault, i+1, ch.To)
		}
		lags = append(lags, first.At.Sub(writable))
		res.takeovers = append(res.takeovers, first.At.Sub(t0))
		each = append(each, fmt.Sprintf("%s %s→%s: writable after %s, the next program started %s after that", fault, ch.From, ch.To, fmtDur(writable.Sub(t0)), fmtDur(first.At.Sub(writable))))
		leader := f.of(next)
		if leader.kind != form {
			t.Fatalf("%s %d: %s leads", fault, i+1, leader.name)
		}
		checkHolder(t, pgtestConn(t, l.DSN(primary.Port, l.User, "postgres")), "the new primary "+ch.To, next.BackendPID)
		if fault == "node death" {
			if _, err := l.ReviveNode(ctx, ch.From); err != nil {
				t.Fatalf("revive %s: %v", ch.From, err)
			}
		}
		f.settled(leader)
		checkWhoAndVerify(t, h, l.HAMultiHostDSN(), next.BackendPID)
	}
	res.lags = append(res.lags, lags...)
	res.notes = append(res.notes, fmt.Sprintf("lag from the new primary accepting writes (polled every 5 ms) to the next program's start: %s; %s; the replica over HAProxy's replicas port led %d time(s), on the new primary, before HAProxy's check caught up", spread(lags), strings.Join(each, "; "), viaReplicas))
}

// pgtestConn opens a connection for the test's own queries.
func pgtestConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dbconn.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// checkWhoAndVerify runs `leasectl who` and `leasectl verify` over dsn (the
// multi-host DSN): both must reach the primary and name the leader's
// backend.
func checkWhoAndVerify(t *testing.T, h *harness, dsn, backendPID string) {
	t.Helper()
	run := func(args ...string) ([]byte, int) {
		cmd := exec.Command(h.leasectl, args...)
		cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+h.keys)
		out, err := cmd.Output()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return out, code
	}
	out, code := run("who", role, "-o", "json")
	var doc struct {
		Server struct {
			InRecovery bool `json:"in_recovery"`
		} `json:"server"`
		Leases []struct {
			Holders []struct {
				PID int `json:"pid"`
			} `json:"holders"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || code != 0 {
		t.Fatalf("who over the multi-host DSN: exit %d, %v\n%s", code, err, out)
	}
	if doc.Server.InRecovery || len(doc.Leases) != 1 || len(doc.Leases[0].Holders) != 1 || strconv.Itoa(doc.Leases[0].Holders[0].PID) != backendPID {
		t.Errorf("who over the multi-host DSN does not show the leader %s on a primary:\n%s", backendPID, out)
	}
	if out, code := run("verify", role); code != 0 {
		t.Errorf("verify over the multi-host DSN: exit %d\n%s", code, out)
	}
}

// checkPatroniProbe: HAProxy's primary port is STABLE (a proxy hint, the
// port is forwarded), its replicas port is REFUSED (a standby).
func checkPatroniProbe(t *testing.T, h *harness, l *lab.Lab) {
	t.Helper()
	for _, tc := range []struct {
		dsn  string
		code int
		says string
	}{
		{l.HAPrimaryDSN(), 0, "! proxy"},
		{l.HAReplicaDSN(), 1, "the server is a standby"},
		{l.HAMultiHostDSN(), 0, "STABLE"},
	} {
		out, err := exec.Command(h.leasectl, "--no-color", "probe", tc.dsn).Output()
		code := 0
		if err != nil {
			code = err.(*exec.ExitError).ExitCode()
		}
		if code != tc.code || !strings.Contains(string(out), tc.says) {
			t.Errorf("probe %s: exit %d, want %d and %q:\n%s", tc.dsn, code, tc.code, tc.says, out)
		}
	}
}

// lagSummary renders the lags of each Patroni scenario. The goal (median
// ≤ 100 ms, max ≤ 500 ms) is leasectl's: over HAProxy's primary port the
// lag also holds HAProxy's own delay in routing to the new primary, which
// no client can beat (test/bench/ha measures both against a client
// polling every 5 ms).
func lagSummary(results []*result) string {
	var b strings.Builder
	for _, r := range results {
		if len(r.lags) == 0 {
			continue
		}
		s := benchutil.Summarize(r.lags)
		fmt.Fprintf(&b, "%s: lag from the new primary accepting writes to the next program's start, %d faults: median %s, max %s\n", r.name, len(r.lags), fmtDur(s.Median), fmtDur(s.Max))
	}
	return b.String()
}

// isStartOf matches a program start by a replica of kind k.
func (f *fleet) isStartOf(k kind) func(leasetest.Event) bool {
	return func(ev leasetest.Event) bool {
		if !isStart(ev) {
			return false
		}
		for _, r := range f.all {
			if r.pid() == ev.PPID {
				return r.kind == k
			}
		}
		return false
	}
}

package cmd

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

var foRoles = []int64{foPollerKey, foSchedulerKey, foReconcileKey}

// foReplica runs `leasectl failover --replica NAME ARGS...` with no
// terminal.
func foReplica(t *testing.T, name string, args ...string) cliResult {
	t.Helper()
	return failover(t, append([]string{"--replica", name}, args...)...)
}

// TestFailoverReplicaDrainsEveryRole: group vm1 leads poller and
// scheduler, group vm2 stands by for all three roles and leads reconciler.
// failover --replica vm1 asks vm1 to drain, on the channel of each role it
// leads; vm1 answers and releases both, and vm2 takes them over. Nothing is
// terminated. Then vm2 is drained by its full name with -o json, and a third
// group takes every role.
func TestFailoverReplicaDrainsEveryRole(t *testing.T) {
	withoutTermRecord(t) // simulated groups begin no term
	vm1 := startGroup(t, "leasectl run app@vm1", foRoles, []int64{foPollerKey, foSchedulerKey}, groupOptions{Passive: true})
	vm2 := startGroup(t, "leasectl run app@vm2", foRoles, []int64{foReconcileKey}, groupOptions{})

	// Unconfirmed, with no terminal: it says what it would do.
	res := foReplica(t, "vm1")
	if res.Code != ExitUsage || !strings.Contains(res.Stdout, "Would ask group replica pid "+itoa(vm1.pid)) ||
		!strings.Contains(res.Stdout, "to drain") || !strings.Contains(res.Stdout, "(poller, scheduler)") ||
		!strings.Contains(res.Stderr, "leasectl failover --replica vm1 --yes") || len(vm1.received()) != 0 {
		t.Fatalf("unconfirmed: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "leasectl", "run", "app@vm1", "group", itoa(vm1.pid), itoa(vm1.fencePID), "2", "1", "poller,", "scheduler")
	row(t, res.Stdout, "poller", strconv.Itoa(foPollerKey), "HELD,", "1", "waiting", itoa(vm1.pid))
	row(t, res.Stdout, "poller", strconv.Itoa(foPollerKey), "standing", "by", itoa(vm2.pid))

	res = foReplica(t, "vm1", "--yes")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{
		"pid " + itoa(vm1.pid) + " stepped down on request",
		"pid " + itoa(vm2.pid) + " took over poller within ",
		"pid " + itoa(vm2.pid) + " took over scheduler within ",
		"of the request",
		"moved 2 of 2 roles off replica \"leasectl run app@vm1\"",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	reqs := vm1.received()
	if len(reqs) != 2 || !reqs[0].Drain || !reqs[1].Drain {
		t.Errorf("requests vm1 answered: %+v; want two drains, one per role it led", reqs)
	}
	vm2.waitLeading(t, foRoles...)
	if !alive(t, vm1.pid) || !alive(t, vm1.fencePID) {
		t.Errorf("vm1's sessions were terminated")
	}

	// By its full application_name, with -o json: vm3 takes all three.
	vm3 := startGroup(t, "leasectl run app@vm3", foRoles, nil, groupOptions{})
	js := foReplica(t, "leasectl run app@vm2", "--yes", "-o", "json")
	if js.Code != 0 {
		t.Fatalf("-o json: exit %d\n%s%s", js.Code, js.Stdout, js.Stderr)
	}
	checkJSONDoc(t, js.Stdout, js.Code, "failover --replica")
	var doc failoverReplicaJSON
	decodeJSON(t, js.Stdout, &doc)
	if doc.Replica != "leasectl run app@vm2" || doc.Force || len(doc.Replicas) != 1 {
		t.Fatalf("JSON: %s", js.Stdout)
	}
	r := doc.Replicas[0]
	if r.BackendPID != vm2.pid || r.Kind != "group" || r.Drain != nil || r.LeadCount != 3 || len(r.Failovers) != 3 {
		t.Fatalf("JSON replica: %s", js.Stdout)
	}
	for _, f := range r.Failovers {
		if f.Path != "graceful" || f.Resign == nil || !f.Resign.Answered || !f.TookOver || f.NewHolder == nil || *f.NewHolder.PID != vm3.pid ||
			f.TakeoverMS == nil || f.Error != nil || f.Role == nil || *f.OldHolder.PID != vm2.pid {
			t.Errorf("failover of %v: %+v", f.Role, f)
		}
	}
	vm3.waitLeading(t, foRoles...)
}

// TestFailoverReplicaThatLeadsNothing: a group that only stands by is asked
// to drain once, and answers; a single-role stand-by leads nothing to move.
func TestFailoverReplicaThatLeadsNothing(t *testing.T) {
	withoutTermRecord(t)
	idle := startGroup(t, "leasectl run app@vm7", foRoles, nil, groupOptions{Passive: true})
	res := foReplica(t, "vm7", "--yes")
	if res.Code != 0 || !strings.Contains(res.Stdout, "answered the drain in") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if reqs := idle.received(); len(reqs) != 1 || !reqs[0].Drain {
		t.Errorf("requests: %+v, want one drain", reqs)
	}
	// --force has nothing to terminate there.
	if res := foReplica(t, "vm7", "--yes", "--force"); res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "leads no role") {
		t.Errorf("--force on a replica that leads nothing: exit %d, stderr %q", res.Code, res.Stderr)
	}
}

// TestFailoverReplicaNoMatch: a name no replica has is exit 1, listing
// the replicas seen.
func TestFailoverReplicaNoMatch(t *testing.T) {
	withoutTermRecord(t)
	startGroup(t, "leasectl run app@vm5", foRoles, []int64{foPollerKey}, groupOptions{})
	res := foReplica(t, "vm6", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, `no replica is named "vm6"`) ||
		!strings.Contains(res.Stderr, `"leasectl run app@vm5"`) || !strings.Contains(res.Stderr, "nothing to fail over") {
		t.Errorf("exit %d, stderr %q", res.Code, res.Stderr)
	}
	// Nor does part of a host name match.
	if res := foReplica(t, "vm", "--yes"); res.Code != ExitCheckFailed {
		t.Errorf("--replica vm: exit %d, want 1: %s", res.Code, res.Stderr)
	}
	if js := foReplica(t, "vm6", "--yes", "-o", "json"); js.Code != ExitCheckFailed || js.Stdout != "" {
		t.Errorf("-o json: exit %d, stdout %q; want 1 and no document", js.Code, js.Stdout)
	}
}

// TestFailoverReplicaSeveralMatches: two replicas on one host are both
// drained, and failover says so.
func TestFailoverReplicaSeveralMatches(t *testing.T) {
	withoutTermRecord(t)
	a := startGroup(t, "leasectl run web@vm1", foRoles, []int64{foPollerKey}, groupOptions{Passive: true})
	b := startGroup(t, "leasectl run jobs@vm1", foRoles, []int64{foSchedulerKey}, groupOptions{Passive: true})
	taker := startGroup(t, "leasectl run app@vm2", foRoles, []int64{foReconcileKey}, groupOptions{})
	res := foReplica(t, "vm1", "--yes")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{`"vm1" names 2 replicas`, "took over poller", "took over scheduler", "moved 2 of 2 roles off replicas"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if len(a.received()) != 1 || len(b.received()) != 1 {
		t.Errorf("requests: a %+v, b %+v", a.received(), b.received())
	}
	taker.waitLeading(t, foRoles...)
}

// TestFailoverReplicaThatDoesNotAnswer: a silent group is not terminated
// without --force (exit 1, its roles stay); with --force its lease session
// is, and every role moves at once, while its stop fence session is left.
func TestFailoverReplicaThatDoesNotAnswer(t *testing.T) {
	withoutTermRecord(t)
	hung := startGroup(t, "leasectl run app@vm1", foRoles, []int64{foPollerKey, foSchedulerKey}, groupOptions{Silent: true, Passive: true})
	taker := startGroup(t, "leasectl run app@vm2", foRoles, []int64{foReconcileKey}, groupOptions{})
	res := runCLI(t, nil, "--timeout", "1s", "--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "--replica", "vm1", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "nothing was terminated") || !strings.Contains(res.Stdout, "poller was not moved") ||
		!strings.Contains(res.Stdout, "moved 0 of 2 roles") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if !alive(t, hung.pid) || !hung.leading(foPollerKey) {
		t.Fatalf("the silent group was terminated, or lost its roles")
	}
	js := runCLI(t, nil, "--timeout", "1s", "--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "-o", "json", "failover", "--replica", "vm1", "--yes")
	checkJSONDoc(t, js.Stdout, js.Code, "failover --replica")
	var doc failoverReplicaJSON
	decodeJSON(t, js.Stdout, &doc)
	if f := doc.Replicas[0].Failovers[0]; f.Path != "none" || f.Error == nil || !strings.Contains(*f.Error, "nothing was terminated") || f.TookOver {
		t.Errorf("JSON failover: %+v", f)
	}

	// Unconfirmed, --force says what moves.
	res = foReplica(t, "vm1", "--force")
	if res.Code != ExitUsage || !strings.Contains(res.Stdout, "Would terminate the lease session of pid "+itoa(hung.pid)) ||
		!strings.Contains(res.Stdout, "every role it leads moves at once (poller, scheduler)") || !strings.Contains(res.Stdout, "stop fence session, pid "+itoa(hung.fencePID)+", is left alone") {
		t.Errorf("unconfirmed --force: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = foReplica(t, "vm1", "--yes", "--force")
	if res.Code != 0 {
		t.Fatalf("--force: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"terminated pid " + itoa(hung.pid), "pid " + itoa(taker.pid) + " took over poller", "pid " + itoa(taker.pid) + " took over scheduler"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if alive(t, hung.pid) || !alive(t, hung.fencePID) {
		t.Errorf("lease session alive %v (want gone), fence session alive %v (want alive)", alive(t, hung.pid), alive(t, hung.fencePID))
	}
}

// TestFailoverRoleOfAGroup: failover ROLE for a role a group leads moves
// that role alone, by a plain request; a group that does not answer is not
// terminated; --force says in its confirmation that the group's other
// roles move too.
func TestFailoverRoleOfAGroup(t *testing.T) {
	withoutTermRecord(t)
	vm1 := startGroup(t, "leasectl run app@vm1", foRoles, []int64{foPollerKey, foSchedulerKey}, groupOptions{Passive: true})
	vm2 := startGroup(t, "leasectl run app@vm2", foRoles, []int64{foReconcileKey}, groupOptions{})

	res := failover(t, "poller", "--yes")
	if res.Code != 0 || !strings.Contains(res.Stdout, "pid "+itoa(vm2.pid)+" took over poller") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", strconv.Itoa(foPollerKey), "standing", "by", itoa(vm2.pid))
	if reqs := vm1.received(); len(reqs) != 1 || reqs[0].Drain {
		t.Errorf("requests: %+v, want one plain request", reqs)
	}
	vm2.waitLeading(t, foPollerKey)
	if !vm1.leading(foSchedulerKey) || !alive(t, vm1.pid) {
		t.Errorf("vm1 lost scheduler, or its session")
	}

	// Unconfirmed: the prompts say what a group replica's failover moves.
	res = failover(t, "scheduler")
	if res.Code != ExitUsage || !strings.Contains(res.Stdout, "a group replica, to step down from scheduler alone") {
		t.Errorf("unconfirmed: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = failover(t, "scheduler", "--force")
	if res.Code != ExitUsage || !strings.Contains(res.Stdout, "the lease session of a group replica: every role it leads moves at once, not scheduler alone (scheduler)") {
		t.Errorf("unconfirmed --force: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestFailoverRoleOfASilentGroup: a group leader that does not answer is
// not terminated (that would move all its roles) unless --force.
func TestFailoverRoleOfASilentGroup(t *testing.T) {
	withoutTermRecord(t)
	hung := startGroup(t, "leasectl run app@vm1", foRoles, []int64{foPollerKey, foSchedulerKey}, groupOptions{Silent: true, Passive: true})
	taker := startGroup(t, "leasectl run app@vm2", foRoles, nil, groupOptions{})
	res := runCLI(t, nil, "--timeout", "1s", "--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "poller", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "group replica \"leasectl run app@vm1\", which also leads scheduler,") ||
		!strings.Contains(res.Stderr, "nothing was terminated") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if !alive(t, hung.pid) || !hung.leading(foPollerKey) {
		t.Fatalf("the silent group was terminated")
	}
	res = failover(t, "poller", "--yes", "--force")
	if res.Code != 0 || !strings.Contains(res.Stdout, "terminated pid "+itoa(hung.pid)) {
		t.Fatalf("--force: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	// Its other role went with its session.
	taker.waitLeading(t, foPollerKey, foSchedulerKey)
	if hs := holders(t, foSchedulerKey); !slices.Contains(hs, uint32(taker.pid)) {
		t.Errorf("scheduler holders %v, want %d", hs, taker.pid)
	}
}

func TestFailoverReplicaUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--replica", ""}, "--replica needs a NAME"},
		{[]string{"poller", "--replica", "vm1"}, "without a ROLE or --key"},
		{[]string{"--key", "5", "--replica", "vm1"}, "without a ROLE or --key"},
		{[]string{"--replica", "vm1", "--wait", "0s"}, "invalid --wait"},
		{nil, "or --replica NAME"},
	} {
		// Each is refused before failover connects: the DSN points nowhere.
		res := runCLI(t, nil, append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "--keys", foKeys(t), "failover"}, tc.args...)...)
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, tc.want) {
			t.Errorf("failover %q: exit %d, stderr %q; want 2 and %q", tc.args, res.Code, res.Stderr, tc.want)
		}
	}
}

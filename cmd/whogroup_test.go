package cmd

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
)

const reconcilerKey = 1840100003

// presenceKey is the two-int4 form of key's presence lock, as who prints it.
func presenceKey(key int64) string { return locks.BigintKey(key).Presence().String() }

// TestWhoShowsGroupStandBys: two group replicas serve poller and scheduler,
// each leading one; a single-role stand-by queues for poller too. who shows
// each role's leader by its application_name, counts the other group as
// standing by next to the queued waiter, never takes a presence lock for a
// lock of its own, and labels presence locks in --all.
func TestWhoShowsGroupStandBys(t *testing.T) {
	withoutTermRecord(t) // simulated groups begin no term
	keysPath := whoKeys(t)
	a := startGroup(t, "leasectl run app@vm1", []int64{pollerKey, schedulerKey}, []int64{pollerKey}, groupOptions{Passive: true})
	b := startGroup(t, "leasectl run app@vm2", []int64{pollerKey, schedulerKey}, []int64{schedulerKey}, groupOptions{Passive: true})
	queuedPID := itoa(queue(t, "poller-single", pollerKey))
	var res cliResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		res = who(t, keysPath)
		if _, ok := findRow(res.Stdout, "poller", "waiting", queuedPID); ok || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	apid, bpid := itoa(a.pid), itoa(b.pid)
	row(t, res.Stdout, "poller", strconv.Itoa(pollerKey), "HELD,", "2", "waiting", apid, needLab(t).User, "leasectl", "run", "app@vm1")
	row(t, res.Stdout, "poller", strconv.Itoa(pollerKey), "waiting", queuedPID, "poller-single")
	row(t, res.Stdout, "poller", strconv.Itoa(pollerKey), "standing", "by", bpid, "leasectl", "run", "app@vm2", "idle")
	row(t, res.Stdout, "scheduler", strconv.Itoa(schedulerKey), "HELD,", "1", "waiting", bpid, "app@vm2")
	row(t, res.Stdout, "scheduler", strconv.Itoa(schedulerKey), "standing", "by", apid, "app@vm1")
	if _, ok := findRow(res.Stdout, "poller", "standing", "by", apid); ok {
		t.Errorf("the leader is shown as its own stand-by:\n%s", res.Stdout)
	}

	// JSON: the stand-bys beside the queued waiters, counted with them.
	var doc whoJSON
	js := who(t, keysPath, "-o", "json", "poller", "scheduler")
	checkJSONConvention(t, js.Stdout, true, "who")
	decodeJSON(t, js.Stdout, &doc)
	p, s := doc.Leases[0], doc.Leases[1]
	if p.Kind != "lease" || p.WaiterCount != 2 || len(p.Waiters) != 1 || itoa(*p.Waiters[0].PID) != queuedPID ||
		len(p.StandBys) != 1 || *p.StandBys[0].PID != b.pid || p.StandBys[0].ApplicationName != "leasectl run app@vm2" ||
		len(p.Present) != 2 || len(p.Holders) != 1 || *p.Holders[0].PID != a.pid || p.Health != "ok" || p.PresenceOf != nil {
		t.Errorf("poller: %+v", p)
	}
	if s.WaiterCount != 1 || len(s.Waiters) != 0 || len(s.StandBys) != 1 || *s.StandBys[0].PID != a.pid || s.Health != "ok" {
		t.Errorf("scheduler: %+v", s)
	}

	// --all: the presence locks are labelled after their roles, and no
	// holder of any lease.
	all := who(t, keysPath, "--all")
	row(t, all.Stdout, "presence", "of", "poller", presenceKey(pollerKey), "present,", "leads", apid, "app@vm1")
	row(t, all.Stdout, "presence", "of", "poller", presenceKey(pollerKey), "present", bpid, "app@vm2")
	row(t, all.Stdout, "presence", "of", "scheduler", presenceKey(schedulerKey), "present,", "leads", bpid)
	for _, k := range []int64{pollerKey, schedulerKey} {
		if l, ok := findRow(all.Stdout, "-", presenceKey(k)); ok {
			t.Errorf("a presence lock shown as a lock of no role: %s\n%s", l, all.Stdout)
		}
		if strings.Contains(all.Stdout, presenceKey(k)+"  HELD") {
			t.Errorf("a presence lock shown as held:\n%s", all.Stdout)
		}
	}
	var allDoc whoJSON
	alljs := who(t, keysPath, "-o", "json", "--all")
	checkJSONConvention(t, alljs.Stdout, false, "who") // reconciler has no holder
	decodeJSON(t, alljs.Stdout, &allDoc)
	presences := 0
	for _, l := range allDoc.Leases {
		if l.Kind != "presence" {
			continue
		}
		presences++
		if l.PresenceOf == nil || l.State != "PRESENT" || l.Health != "presence" || len(l.Holders) != 0 || len(l.Present) != 2 || l.Role != nil || l.WaiterCount != 0 {
			t.Errorf("presence lock %s: %+v", l.Key, l)
		}
	}
	if presences != 2 {
		t.Errorf("%d presence locks in who --all -o json, want 2", presences)
	}

	// --check: both roles have a live leader; only reconciler fails.
	chk := who(t, keysPath, "--check")
	if chk.Code != ExitCheckFailed || !strings.Contains(chk.Stderr, "reconciler has no holder") || strings.Contains(chk.Stderr, "poller") || strings.Contains(chk.Stderr, "scheduler") {
		t.Errorf("--check: exit %d, stderr %q", chk.Code, chk.Stderr)
	}
	if chk := who(t, keysPath, "--check", "poller", "scheduler"); chk.Code != 0 {
		t.Errorf("--check poller scheduler: exit %d, stderr %q", chk.Code, chk.Stderr)
	}
}

// TestWhoShowsAFreeRoleWithGroupStandBys: nobody leads reconciler, but a
// group stands by for it: FREE, 1 waiting, and the stand-by's line.
func TestWhoShowsAFreeRoleWithGroupStandBys(t *testing.T) {
	withoutTermRecord(t)
	g := startGroup(t, "leasectl run app@vm3", []int64{reconcilerKey}, nil, groupOptions{Passive: true})
	res := who(t, whoKeys(t), "reconciler")
	row(t, res.Stdout, "reconciler", strconv.Itoa(reconcilerKey), "FREE,", "1", "waiting", "-")
	row(t, res.Stdout, "reconciler", strconv.Itoa(reconcilerKey), "standing", "by", itoa(g.pid), "app@vm3")
	if chk := who(t, whoKeys(t), "reconciler", "--check"); chk.Code != ExitCheckFailed || !strings.Contains(chk.Stderr, "reconciler has no holder") {
		t.Errorf("--check: exit %d, stderr %q", chk.Code, chk.Stderr)
	}
}

// TestWhoReplicas lists the replicas: two groups, with the roles each leads
// and waits for, and a single-role run that queues.
func TestWhoReplicas(t *testing.T) {
	withoutTermRecord(t)
	keysPath := whoKeys(t)
	a := startGroup(t, "leasectl run app@vm1", []int64{pollerKey, schedulerKey, reconcilerKey}, []int64{pollerKey, schedulerKey}, groupOptions{Passive: true})
	b := startGroup(t, "leasectl run app@vm2", []int64{pollerKey, schedulerKey, reconcilerKey}, []int64{reconcilerKey}, groupOptions{Passive: true})
	queuedPID := itoa(queue(t, "leasectl run poller@vm9", pollerKey))
	var res cliResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		res = who(t, keysPath, "--replicas")
		if _, ok := findRow(res.Stdout, "poller@vm9", "single", queuedPID); ok || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	row(t, res.Stdout, "REPLICA", "KIND", "BACKEND", "FENCE", "USER", "ADDR", "CONNECTED", "LEADS", "WAITS", "ROLES")
	row(t, res.Stdout, "leasectl", "run", "app@vm1", "group", itoa(a.pid), itoa(a.fencePID), needLab(t).User, "2", "1", "poller,", "scheduler")
	row(t, res.Stdout, "leasectl", "run", "app@vm2", "group", itoa(b.pid), itoa(b.fencePID), "1", "2", "reconciler")
	row(t, res.Stdout, "leasectl", "run", "poller@vm9", "single", queuedPID, "-", "0", "1", "-")
	if strings.Contains(res.Stdout, itoa(a.fencePID)+"  group") {
		t.Errorf("a fence session listed as a replica:\n%s", res.Stdout)
	}

	// Narrowed to the replicas that serve a role; on a terminal's width the
	// ROLES are cut to fit.
	one := who(t, keysPath, "--replicas", "reconciler")
	if _, ok := findRow(one.Stdout, "poller@vm9"); ok || !strings.Contains(one.Stdout, "app@vm1") || !strings.Contains(one.Stdout, "app@vm2") {
		t.Errorf("--replicas reconciler:\n%s", one.Stdout)
	}
	narrow := runCLIWidth(t, 70, "--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who", "--replicas")
	row(t, narrow.Stdout, "REPLICA", "BACKEND", "ADDR", "LEADS", "WAITS", "ROLES")
	if l := row(t, narrow.Stdout, "app@vm1", itoa(a.pid)); !strings.Contains(l, "poller, sched") || !strings.HasSuffix(l, "…") || strings.Contains(l, "group") {
		t.Errorf("narrow: ROLES not cut to the width (or KIND shown): %q\n%s", l, narrow.Stdout)
	}

	// JSON.
	js := who(t, keysPath, "--replicas", "-o", "json")
	checkJSONConvention(t, js.Stdout, true, "who --replicas")
	var doc replicasDocJSON
	decodeJSON(t, js.Stdout, &doc)
	byPID := map[int32]replicaJSON{}
	for _, r := range doc.Replicas {
		byPID[r.BackendPID] = r
	}
	qpid, _ := strconv.Atoi(queuedPID)
	ra, rb, rq := byPID[a.pid], byPID[b.pid], byPID[int32(qpid)]
	if ra.Kind != "group" || ra.ApplicationName != "leasectl run app@vm1" || ra.Host == nil || *ra.Host != "vm1" || ra.FencePID == nil || *ra.FencePID != a.fencePID ||
		ra.LeadCount != 2 || ra.WaitCount != 1 || len(ra.Leads) != 2 || *ra.Leads[0].Role != "poller" || ra.Leads[0].Key != strconv.Itoa(pollerKey) ||
		ra.Waits[0].Key != strconv.Itoa(reconcilerKey) || ra.ClientAddr == nil {
		t.Errorf("replica a: %+v", ra)
	}
	if rb.LeadCount != 1 || rb.WaitCount != 2 || *rb.Leads[0].Role != "reconciler" {
		t.Errorf("replica b: %+v", rb)
	}
	if rq.Kind != "single" || rq.LeadCount != 0 || rq.WaitCount != 1 || rq.FencePID != nil || *rq.Waits[0].Role != "poller" {
		t.Errorf("single-role replica: %+v", rq)
	}
	if doc.Replicas[0].ApplicationName > doc.Replicas[len(doc.Replicas)-1].ApplicationName {
		t.Errorf("replicas not ordered by name: %+v", doc.Replicas)
	}

	for _, args := range [][]string{{"--replicas", "--check"}, {"--replicas", "--all"}} {
		if res := who(t, keysPath, args...); res.Code != ExitUsage {
			t.Errorf("who %v: exit %d, want 2: %s", args, res.Code, res.Stderr)
		}
	}
	// Without a keys file the groups are still found by their presence
	// locks.
	t.Chdir(t.TempDir())
	nokeys := runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "who", "--replicas")
	row(t, nokeys.Stdout, "app@vm1", "group", itoa(a.pid), "2", "1", "key", strconv.Itoa(pollerKey)+",")
}

// runCLIWidth runs leasectl as if on a terminal width columns wide.
func runCLIWidth(t *testing.T, width int, args ...string) cliResult {
	t.Helper()
	var out, errOut strings.Builder
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Width: width},
		Getenv: func(string) string { return "" },
	}
	code := Run(context.Background(), app, args)
	return cliResult{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

package lease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestGroupTakesBackSpreadRolesWhenTheirReplicaDies: a replica that gave
// roles up to spread them, and keeps off them for a while, takes them again
// in its first round after the replica they went to died. It used to keep
// off them until its next count of the replicas, up to a second later, and
// the roles had no leader meanwhile: the replica that led every role until
// the others joined has given most of them up, and the SIGKILL of one of
// the others (run --procfile) left its roles without a leader for 1.2 s.
func TestGroupTakesBackSpreadRolesWhenTheirReplicaDies(t *testing.T) {
	f := newGroupFleet(t, 9200300, 6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := lease.Group{
		Config: lease.Config{DSN: testLab.DirectDSN(), RetryInterval: 200 * time.Millisecond,
			HeartbeatInterval: time.Second, HeartbeatTimeout: 5 * time.Second,
			ApplicationName: "group test s"},
		Name: "s",
	}
	for _, k := range f.keys {
		g.Roles = append(g.Roles, lease.GroupRole{Role: fmt.Sprintf("r%d", k), Key: k, Work: f.work("s", k)})
	}
	s, err := lease.StartSteppedGroup(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// rounds runs s's loop until cond holds, failing after a generous limit
	// (a hang, not a timing assertion).
	rounds := func(what string, cond func() bool) {
		t.Helper()
		for limit := time.Now().Add(time.Minute); !cond(); {
			if time.Now().After(limit) {
				by, n := f.leaders()
				t.Fatalf("not %s within a minute: %d roles run, by replica %v; s holds %v and keeps off %v", what, n, by, s.Holding(), s.HeldBack())
			}
			if err := s.Round(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rounds("all led by s", func() bool { by, n := f.leaders(); return n == 6 && by["s"] == 6 })

	// v joins; s, above its share + 1, gives roles up to it.
	v := f.start("v", nil)
	var given []int64
	rounds("roles given up by s and led by v", func() bool {
		given = s.HeldBack()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range given {
			if f.runs[k] != "v" {
				return false
			}
		}
		return len(given) > 0
	})
	s.HoldBackLonger(time.Hour)
	if err := s.Round(); err != nil { // one in which s finds them held by v
		t.Fatal(err)
	}

	// v dies, and takes its keys and its presence locks with it.
	v.cancel()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "")
	pgtest.Exec(t, conn, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = 'group test v'")
	recv(t, v.done, "v's RunGroup returning")
	for limit := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var left int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'group test v'").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("%d sessions of v are still there a minute after it ended", left)
		}
	}

	if err := s.Round(); err != nil {
		t.Fatal(err)
	}
	if holding := s.Holding(); !isSubset(given, holding) {
		t.Errorf("in its first round after v died, s did not take back the roles it gave v: it holds %v, gave v %v and keeps off %v", holding, given, s.HeldBack())
	}
	rounds("all led by s again", func() bool { by, n := f.leaders(); return n == 6 && by["s"] == 6 })
	f.noOverlap()
}

func isSubset(sub, set []int64) bool {
	for _, k := range sub {
		if !slices.Contains(set, k) {
			return false
		}
	}
	return true
}

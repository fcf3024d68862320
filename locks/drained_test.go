package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestReadShowsDrainedGroups: a lease session that holds the drained mark
// and no key (a group drained by failover --replica) comes back with every
// reading, whatever its filter, as one of the snapshot's Drained, with its
// lease mark's bound; the mark is no key of the snapshot; and Replicas
// lists it as a drained group that leads and waits for nothing.
func TestReadShowsDrainedGroups(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.DirectDSN()
	observer := pgtest.Conn(t, dsn, "observer")
	drained := pgtest.Conn(t, dsn, "leasectl run app@vm7#77")
	if ok, err := locks.TakeMark(ctx, drained, 35*time.Second); err != nil || !ok {
		t.Fatalf("TakeMark: %v, %v", ok, err)
	}
	if ok, err := locks.TakeDrainedMark(ctx, drained); err != nil || !ok {
		t.Fatalf("TakeDrainedMark: %v, %v", ok, err)
	}
	pid := pgtest.PID(t, drained)
	for _, f := range []locks.Filter{{All: true}, {Keys: []locks.Key{locks.BigintKey(1840600011)}, Presence: true}} {
		snap, err := locks.Read(ctx, observer, f)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, s := range snap.Drained {
			if s.PID == pid {
				found = true
				if s.LeaseBound != 35*time.Second || s.Application != "leasectl run app@vm7#77" {
					t.Errorf("filter %+v: the drained session %+v: want its lease mark's bound 35s and its name", f, s)
				}
			}
		}
		if !found {
			t.Errorf("filter %+v: pid %d is not among the drained: %+v", f, pid, snap.Drained)
		}
		if l := snap.Find(locks.DrainedMark); l.Held() {
			t.Errorf("filter %+v: the drained mark is a key of the snapshot: %+v", f, l)
		}
		var r *locks.Replica
		for _, x := range snap.Replicas(nil) {
			if x.Session.PID == pid {
				r = &x
			}
		}
		if r == nil || !r.Drained || !r.Group || len(r.Leads) != 0 || len(r.Waits) != 0 || r.Host() != "vm7" {
			t.Errorf("filter %+v: replica %+v; want a drained group of host vm7 that leads and waits for nothing", f, r)
		}
	}
}

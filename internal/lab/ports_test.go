package lab_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestLabReservesItsPorts: a running lab has its ports recorded in the
// host's registry, so that no other lab picks them while a server of this
// one is down or not yet listening, and Stop releases them.
func TestLabReservesItsPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{{Name: "session", Mode: lab.Session, PoolSize: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = l.Stop(context.Background())
		}
	})
	reg := "/tmp/leasectl-lab-ports"
	recorded := func(p int) bool {
		owner, err := os.ReadFile(filepath.Join(reg, strconv.Itoa(p)))
		return err == nil && string(owner) == l.RunDir
	}
	for _, p := range []int{l.Primary.Port, l.Poolers[0].Port} {
		if !slices.Contains(l.Ports, p) || !recorded(p) {
			t.Errorf("port %d: among the lab's ports %v: %v; recorded for it in %s: %v", p, l.Ports, slices.Contains(l.Ports, p), reg, recorded(p))
		}
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, p := range l.Ports {
		if recorded(p) {
			t.Errorf("port %d is still recorded after Stop", p)
		}
	}
}

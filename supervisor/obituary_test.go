//go:build linux

package supervisor_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/leasetest"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/supervisor"
)

// TestObituaryIsNotPartOfTheProgramsTree: a subreaper's program tree is
// every descendant of this process, but the obituary, a child of this
// process too, is not the program's: stopping what is left of a program's
// tree must not stop it, or a later SIGKILL of this process would leave
// nobody to record the end of its term.
func TestObituaryIsNotPartOfTheProgramsTree(t *testing.T) {
	const key = 9100040
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	obit, err := supervisor.StartObituary(self, nil, testLab.DirectDSN(), "test", "text")
	if err != nil {
		t.Fatal(err)
	}
	defer obit.Close()
	events, err := leasetest.Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	w := witnessBin(t)
	cmd := &supervisor.Command{Path: w, Args: []string{w, "-notify", events.Path, "-exit", "0"}, Grace: time.Second, Subreaper: true, Obituary: obit}
	if err := lease.Run(context.Background(), baseConfig(key), cmd.Work); err != nil {
		t.Fatalf("Run = %v, want the program's exit status 0", err)
	}
	if pid := obit.PID(); syscall.Kill(pid, 0) != nil {
		t.Fatalf("the obituary (pid %d) was stopped with the program's tree", pid)
	}
}

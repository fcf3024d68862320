package lease_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
)

// TestDefaultApplicationNameTellsReplicasApart: the default name is
// "PREFIX ROLE@HOST#PID", the process id telling two replicas on one host
// apart; however long the role, it fits PostgreSQL's 63 bytes with " fence"
// after it, cut in the role, its "@HOST#PID" whole, so that the host reads
// back (locks.HostOf).
func TestDefaultApplicationNameTellsReplicasApart(t *testing.T) {
	host, _ := os.Hostname()
	pid := strconv.Itoa(os.Getpid())
	if got, want := lease.DefaultApplicationName("leasectl run", "poller"), "leasectl run poller@"+host+"#"+pid; got != want {
		t.Errorf("DefaultApplicationName = %q, want %q", got, want)
	}
	long := lease.DefaultApplicationName("leasectl run", strings.Repeat("r", 80))
	if len(long)+len(" fence") > 63 || !strings.HasSuffix(long, "#"+pid) || !strings.HasPrefix(long, "leasectl run rrr") {
		t.Errorf("a long role's name %q (%d bytes): want it cut to 57 bytes, keeping #%s", long, len(long), pid)
	}
	if len(host)+len(pid) < 40 {
		if h, p := locks.HostOf(long); h != host || p != pid {
			t.Errorf("HostOf(%q) = %q, %q; want %q, %q", long, h, p, host, pid)
		}
	}
}

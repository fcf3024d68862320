package lab_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestRemoveOrphanedShmOf: a process that created a segment and exited
// without removing it (as a SIGKILLed pgpool-II does) leaves it behind;
// RemoveOrphanedShmOf removes it, and leaves other processes' segments.
func TestRemoveOrphanedShmOf(t *testing.T) {
	if os.Getenv("LAB_SHM_CHILD") == "1" {
		id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(strconv.Itoa(id))
		os.Exit(0)
	}
	makeOne := func() (pid, id int) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRemoveOrphanedShmOf$")
		cmd.Env = append(os.Environ(), "LAB_SHM_CHILD=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		id, err = strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("child printed %q", out)
		}
		t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
		return cmd.Process.Pid, id
	}
	pid, id := makeOne()
	otherPid, other := makeOne()
	if !lab.ShmSegmentExists(id) || !lab.ShmSegmentExists(other) {
		t.Fatal("the children's segments are not there")
	}
	if err := lab.RemoveOrphanedShmOf(pid); err != nil {
		t.Fatal(err)
	}
	if lab.ShmSegmentExists(id) {
		t.Errorf("segment %d of pid %d is still there", id, pid)
	}
	if !lab.ShmSegmentExists(other) {
		t.Errorf("segment %d of another pid (%d) was removed", other, otherPid)
	}
}

//go:build linux

package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree starts sh with script as a program would be started (its own
// process group, LEASECTL_PROGRAM_ID=id in its environment), waits until
// the script has written the pids of what it started, one per line, to
// $PIDS, and returns the program's pid and those pids. The test's end
// kills them all.
func startTree(t *testing.T, id, script string) (*exec.Cmd, []int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", script+"\necho done >>\"$PIDS\"\nwait")
	cmd.Env = append(os.Environ(), programIDVar+"="+id, "PIDS="+pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reaps it, as init would
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	var pids []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		data, _ := os.ReadFile(pidFile)
		if strings.HasSuffix(string(data), "done\n") {
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
					t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				}
			}
			// Until each has become sleep: a fork of sh that has not yet
			// run setsid or env is in the group, with the id.
			for _, pid := range pids {
				for comm := ""; comm != "sleep\n"; time.Sleep(time.Millisecond) {
					b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
					comm = string(b)
					if time.Now().After(deadline) {
						t.Fatalf("pid %d did not become sleep (%q)", pid, comm)
					}
				}
			}
			return cmd, pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program did not start its processes; $PIDS: %q", data)
		}
	}
}

// pidsOf returns the pids of ps, sorted.
func pidsOf(ps []proc) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.pid)
	}
	slices.Sort(out)
	return out
}

// The tree's processes: in its group with its id (1), in its group
// without it (2), out of its group with it (3: a daemon), and out of it
// without it (4: a daemon that cleared its environment, which only a
// subreaper finds).
const treeScript = `sleep 61 & echo $! >>"$PIDS"
env -u LEASECTL_PROGRAM_ID sleep 62 & echo $! >>"$PIDS"
setsid sleep 63 & echo $! >>"$PIDS"
setsid env -u LEASECTL_PROGRAM_ID sleep 64 & echo $! >>"$PIDS"`

// TestScanTreesFollowsTheTreeRules: the obituary's look at /proc finds the
// program's process group and every process that carries its id, and
// nothing else; without the program's pid, what carries the id.
func TestScanTreesFollowsTheTreeRules(t *testing.T) {
	id, err := programID()
	if err != nil {
		t.Fatal(err)
	}
	before := bootTicks()
	cmd, pids := startTree(t, id, treeScript)
	prog := cmd.Process.Pid
	start := startTime(prog)
	if before == 0 || before > start {
		t.Fatalf("bootTicks before the program started = %d, its start time %d: the lower bound is above it", before, start)
	}
	// Another user of the id's variable name, outside the tree.
	other := exec.Command("sleep", "65")
	other.Env = append(os.Environ(), programIDVar+"=someone-else")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()

	got := pidsOf(scanTrees([]*programTree{{pid: prog, id: id, start: start}})[0])
	want := []int{prog, pids[0], pids[1], pids[2]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("members %v, want %v (the program, its group, its daemon with the id)", got, want)
	}
	got = pidsOf(scanTrees([]*programTree{{id: id, start: before}})[0])
	want = []int{prog, pids[0], pids[2]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("members by id %v, want %v", got, want)
	}
	// A program started later than the tree's start does not count.
	if got := scanTrees([]*programTree{{id: id, start: start + 1<<20}})[0]; len(got) != 0 {
		t.Errorf("members started after a bound in the future: %v, want none", pidsOf(got))
	}
	// Two trees at once: each its own.
	id2, _ := programID()
	cmd2, pids2 := startTree(t, id2, `sleep 66 & echo $! >>"$PIDS"`)
	both := scanTrees([]*programTree{{pid: prog, id: id, start: start}, {pid: cmd2.Process.Pid, id: id2, start: startTime(cmd2.Process.Pid)}})
	if got, want := pidsOf(both[1]), []int{cmd2.Process.Pid, pids2[0]}; !slices.Equal(got, want) {
		t.Errorf("second tree's members %v, want %v", got, want)
	}
	if len(both[0]) != 4 {
		t.Errorf("first tree's members %v, want 4", pidsOf(both[0]))
	}
}

// TestObituaryStopsATreeWhosePidItNeverHeard: a program the obituary
// knows only by its id (its leader died before it said begin) is found by
// it, its process group is taken for the tree's, and all of it is killed:
// what a subreaper alone would find (a daemon that cleared its
// environment) is left.
func TestObituaryStopsATreeWhosePidItNeverHeard(t *testing.T) {
	id, err := programID()
	if err != nil {
		t.Fatal(err)
	}
	before := bootTicks()
	cmd, pids := startTree(t, id, treeScript)
	ot := &obituaryTerm{note: obituaryNote{ProgramID: id, Start: before}}
	if code := stopPrograms([]*obituaryTerm{ot}); code != 0 {
		t.Fatalf("stopPrograms = %d, want 0", code)
	}
	if ot.tree.pid != cmd.Process.Pid {
		t.Errorf("the tree's pid is %d, want the program's %d", ot.tree.pid, cmd.Process.Pid)
	}
	for _, pid := range append([]int{cmd.Process.Pid}, pids[:3]...) {
		if alive(pid) {
			t.Errorf("pid %d of the tree is still alive", pid)
		}
	}
	if !alive(pids[3]) {
		t.Errorf("the daemon without the id (pid %d) was killed; only a subreaper knows it", pids[3])
	}
}

// TestObituaryStopsATreeWithoutPidfd: on a kernel without pidfd (no
// watch) the obituary kills the program's group and looks at /proc until
// the tree, its daemon with the id included, is gone.
func TestObituaryStopsATreeWithoutPidfd(t *testing.T) {
	id, err := programID()
	if err != nil {
		t.Fatal(err)
	}
	cmd, pids := startTree(t, id, treeScript)
	pid := cmd.Process.Pid
	ot := &obituaryTerm{note: obituaryNote{PID: pid, ProgramID: id, Start: startTime(pid)}}
	if code := stopPrograms([]*obituaryTerm{ot}); code != 0 {
		t.Fatalf("stopPrograms = %d, want 0", code)
	}
	for _, p := range append([]int{pid}, pids[:3]...) {
		if alive(p) {
			t.Errorf("pid %d of the tree is still alive", p)
		}
	}
}

// TestAwaitTreesHearsTheProgramsExit: the obituary SIGKILLs the program and
// its group and hears of the program's exit from its pidfd; a pid whose
// start time is not the program's is never watched.
func TestAwaitTreesHearsTheProgramsExit(t *testing.T) {
	id, err := programID()
	if err != nil {
		t.Fatal(err)
	}
	cmd, pids := startTree(t, id, `sleep 61 & echo $! >>"$PIDS"`)
	pid := cmd.Process.Pid
	start := startTime(pid)
	if w := watchExit(pid, start+1); w == nil || !w.gone || w.fd >= 0 {
		t.Errorf("a watch of pid %d with another start time: %+v, want it gone", pid, w)
	}
	w := watchExit(pid, start)
	if w == nil || w.fd < 0 {
		t.Skip("no pidfd on this kernel: the obituary looks at /proc instead")
	}
	defer w.close()
	t0 := time.Now()
	awaitTrees([]*programTree{{pid: pid, id: id, start: start}}, []*exitWatch{w}, time.Now().Add(10*time.Second))
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("awaitTrees took %s", d)
	}
	if p, ok := readProc(pid); ok && !p.zombie {
		t.Errorf("the program (pid %d) has not exited when awaitTrees returns", pid)
	}
	if alive(pids[0]) {
		t.Errorf("pid %d of the program's group was not killed", pids[0])
	}
	// Reaped or not yet (a zombie), the program has exited.
	if w := watchExit(pid, start); w == nil || (!w.gone && !readable(w.fd)) {
		t.Errorf("a watch of the exited program: %+v, want it gone or readable", w)
	} else {
		w.close()
	}
}

// readable reports whether fd polls readable now.
func readable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1
}

// alive reports whether pid runs (not gone, not a zombie), a little after
// it was killed.
func alive(pid int) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if p, ok := readProc(pid); !ok || p.zombie {
			return false
		}
	}
	return true
}

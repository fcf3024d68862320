//go:build linux

package cmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestRunAsPID1ReapsEveryOrphan: as a container's entrypoint leasectl is
// PID 1 of its PID namespace, so every orphan in the container becomes its
// child, not only those of its program's tree: a process that a `docker
// exec` or `kubectl exec` session left behind, for one. A stand-by, which
// runs no program, must reap them too, or they stay zombies for the
// container's life. leasectl runs as PID 1 of a new PID namespace with its
// own /proc, as in a container (unshare), stands by behind a key the test
// holds, and a shell entered into the namespace (nsenter) leaves a short
// sleep behind.
func TestRunAsPID1ReapsEveryOrphan(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("unshare (util-linux) is needed: apt-get install -y util-linux")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatal("nsenter (util-linux) is needed: apt-get install -y util-linux")
	}
	const key = 9200041
	f := newRunFixture(t, "poller", key)
	holder := pgtest.Conn(t, needLab(t).DirectDSN(), "holder")
	if ok, err := locks.TryLock(context.Background(), holder, key); err != nil || !ok {
		t.Fatalf("take the key: %v %v", ok, err)
	}

	ns := []string{"--pid", "--fork", "--mount-proc", "--kill-child"}
	enter := []string{"--pid", "--mount"}
	if os.Geteuid() != 0 {
		// Without root, a user namespace of our own allows the PID one.
		ns = append([]string{"--user", "--map-root-user"}, ns...)
		enter = append([]string{"--user", "--preserve-credentials"}, enter...)
	}
	cmd := exec.Command(unshare, append(ns, append([]string{f.leasectl, "run", "--role", "poller", "--"}, f.witnessArgs()...)...)...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	var log leasetest.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // --kill-child: leasectl goes with unshare
		_ = cmd.Wait()
	})
	pid1 := awaitChild(t, cmd.Process.Pid, "leasectl")
	if ns := nsPIDs(t, pid1); !strings.HasSuffix(ns, "\t1") {
		t.Fatalf("leasectl %d is not PID 1 of its namespace (NSpid %q)", pid1, ns)
	}
	log.WaitFor(t, "standing by", 1, time.Minute)

	enterCmd := exec.Command(nsenter, append(append([]string{"--target", strconv.Itoa(pid1)}, enter...), "--", "sh", "-c", "sleep 2 </dev/null >/dev/null 2>&1 & exit 0")...)
	if out, err := enterCmd.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	orphan := awaitChild(t, pid1, "sleep")
	// The sleep ends after 2 s; a PID 1 that reaps removes it then.
	deadline := time.Now().Add(15 * time.Second)
	for procState(orphan) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan %d, a child of leasectl as PID 1, is still there (state %s) 13 s after it exited: leasectl does not reap it\n%s", orphan, procState(orphan), log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(log.String(), "program started") {
		t.Fatalf("leasectl was meant to stand by:\n%s", log.String())
	}

	// Leading, the reaper leaves the program to os/exec: leasectl sees
	// its exit status, and passes SIGTERM on to it.
	if _, err := locks.Unlock(context.Background(), holder, key); err != nil {
		t.Fatal(err)
	}
	start := f.next(leasetest.Start)
	if out, err := exec.Command(nsenter, append(append([]string{"--target", strconv.Itoa(pid1)}, enter...), "--", "sh", "-c", "sleep 0.2 </dev/null >/dev/null 2>&1 & exit 0")...).CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leasectl as PID 1 after SIGTERM: %v (want exit 0)\n%s", err, log.String())
	}
	for _, want := range []string{"program started", "program stopped", "stopped"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "no child processes") || strings.Contains(log.String(), "waitid") {
		t.Errorf("os/exec lost the program %d to the reaper:\n%s", start.PID, log.String())
	}
}

// awaitChild returns the pid of parent's first child whose command name is
// comm, waiting up to 30 s for it.
func awaitChild(t *testing.T, parent int, comm string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", parent))
		for _, task := range tasks {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", parent, task.Name()))
			for _, field := range bytes.Fields(data) {
				pid, _ := strconv.Atoi(string(field))
				if name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(name)) == comm {
					return pid
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no child %q of %d within 30 s", comm, parent)
	return 0
}

// nsPIDs is the NSpid line of pid's status: its pid in each namespace.
func nsPIDs(t *testing.T, pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return v
		}
	}
	return ""
}

// procState is the state letter of pid (Z for a zombie), or "" once it is
// gone.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2 : i+3]
	}
	return "?"
}

package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// ProcessesUsing returns the pids of processes whose working directory or
// command line lies in dir: every postgres process of a lab has its data
// directory as working directory, every pgbouncer names its config file, and
// the other daemons (etcd, Patroni, HAProxy, an extension's) run from their
// directories in the run dir.
// macOS has no /proc: the command lines come from sysctl kern.procargs2 and
// the working directories from lsof, where they are reported with symbolic
// links resolved (/private/var/folders for a TMPDIR in /var/folders).
// Without lsof only the command lines count.
func ProcessesUsing(dir string) []int {
	self := os.Getpid()
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		dirs = append(dirs, real)
	}
	found := map[int]bool{}
	if kps, err := unix.SysctlKinfoProcSlice("kern.proc.all"); err == nil {
		for _, kp := range kps {
			pid := int(kp.Proc.P_pid)
			if pid <= 0 || pid == self {
				continue
			}
			buf, err := unix.SysctlRaw("kern.procargs2", pid)
			if err != nil {
				continue // gone, or another user's
			}
			args := procArgs(buf)
			for _, d := range dirs {
				if argsMention(args, d) {
					found[pid] = true
				}
			}
		}
	}
	out, _ := exec.Command("/usr/sbin/lsof", "-w", "-n", "-P", "-d", "cwd", "-F", "pn").Output()
	for pid, cwd := range parseLsofCwd(out) {
		for _, d := range dirs {
			if pid != self && within(cwd, d) {
				found[pid] = true
			}
		}
	}
	pids := make([]int, 0, len(found))
	for pid := range found {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// zombie reports whether pid is a zombie, from sysctl kern.proc.pid; known
// is false when the kernel does not say.
func zombie(pid int) (z, known bool) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || int(kp.Proc.P_pid) != pid {
		return false, false
	}
	return kp.Proc.P_stat == 5, true // SZOMB
}

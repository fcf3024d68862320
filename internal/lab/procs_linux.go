package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcessesUsing returns the pids of processes whose working directory or
// command line lies in dir: every postgres process of a lab has its data
// directory as working directory, every pgbouncer names its config file, and
// the other daemons (etcd, Patroni, HAProxy, an extension's) run from their
// directories in the run dir.
// On Linux it reads /proc.
func ProcessesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") || bytes.Contains(cmdline, []byte(dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// zombie reports whether pid is a zombie, from /proc/PID/stat; known is
// false when that cannot be read.
func zombie(pid int) (z, known bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false, false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z', true
	}
	return false, true
}

package lab

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// shmSegment looks up a System V shared memory segment in
// /proc/sysvipc/shm.
func shmSegment(id int) (shmInfo, bool) {
	data, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return shmInfo{}, false
	}
	lines := strings.Split(string(data), "\n")
	head := strings.Fields(lines[0])
	col := func(name string) int {
		for i, h := range head {
			if h == name {
				return i
			}
		}
		return -1
	}
	ki, si, ni := col("key"), col("shmid"), col("nattch")
	if ki < 0 || si < 0 || ni < 0 {
		return shmInfo{}, false
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) <= max(ki, si, ni) {
			continue
		}
		if sid, _ := strconv.Atoi(f[si]); sid == id {
			key, _ := strconv.ParseInt(f[ki], 10, 64)
			n, _ := strconv.Atoi(f[ni])
			return shmInfo{key: key, nattch: n}, true
		}
	}
	return shmInfo{}, false
}

// shmCreatedBy returns the ids of the segments that the process pid
// created (the cpid column of /proc/sysvipc/shm).
func shmCreatedBy(pid int) []int {
	data, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return nil
	}
	lines := strings.Split(string(data), "\n")
	head := strings.Fields(lines[0])
	si, ci := -1, -1
	for i, h := range head {
		switch h {
		case "shmid":
			si = i
		case "cpid":
			ci = i
		}
	}
	if si < 0 || ci < 0 {
		return nil
	}
	var ids []int
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) <= max(si, ci) || f[ci] != strconv.Itoa(pid) {
			continue
		}
		if id, err := strconv.Atoi(f[si]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// removeShmSegment removes a System V shared memory segment; one that is
// gone already is no error.
func removeShmSegment(id int) error {
	if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EIDRM) {
		return err
	}
	return nil
}

package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// removeOrphanedShm removes the System V shared memory segment of s's
// PostgreSQL when no process is attached to it any more: a postmaster
// killed with SIGKILL leaves it behind, and only the next postmaster of the
// same data directory would remove it.
func removeOrphanedShm(s *Server) error {
	key, id, ok := postmasterShm(s)
	if !ok {
		return nil
	}
	seg, ok := shmSegment(id)
	if !ok || seg.key != key || seg.nattch != 0 {
		return nil // gone already, another segment by now, or in use
	}
	if err := removeShmSegment(id); err != nil {
		return fmt.Errorf("remove the shared memory segment %d left by %s: %w", id, s.DataDir, err)
	}
	return nil
}

// postmasterShm returns the key and id of the System V shared memory
// segment named on the seventh line of s's postmaster.pid, which only a
// clean shutdown removes.
func postmasterShm(s *Server) (key int64, id int, ok bool) {
	if s.DataDir == "" {
		return 0, 0, false
	}
	data, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 7 {
		return 0, 0, false
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return 0, 0, false
	}
	key, err1 := strconv.ParseInt(f[0], 10, 64)
	id, err2 := strconv.Atoi(f[1])
	return key, id, err1 == nil && err2 == nil
}

type shmInfo struct {
	key    int64
	nattch int
}

// RemoveOrphanedShmOf removes the System V shared memory segments that the
// process pid created and that no process is attached to any more. A
// program that keeps its state in such segments (pgpool-II) removes them
// only on a clean shutdown; one that had to be killed leaves them behind.
// Call it once pid has exited.
func RemoveOrphanedShmOf(pid int) error {
	for _, id := range shmCreatedBy(pid) {
		if seg, ok := shmSegment(id); !ok || seg.nattch != 0 {
			continue
		}
		if err := removeShmSegment(id); err != nil {
			return fmt.Errorf("remove the shared memory segment %d left by pid %d: %w", id, pid, err)
		}
	}
	return nil
}

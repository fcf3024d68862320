package lab

import (
	"errors"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmSegment looks up a System V shared memory segment with IPC_STAT
// (macOS has no /proc/sysvipc). The lab's segments belong to the user who
// runs it, who may read their state.
func shmSegment(id int) (shmInfo, bool) {
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err != nil {
		return shmInfo{}, false
	}
	return shmInfo{key: int64(ipcKey(&desc.Perm)), nattch: int(desc.Nattch)}, true
}

// ipcKey returns the key of a segment's permissions. macOS's ipc_perm
// ends in the key (uid, gid, cuid, cgid as 32 bits, mode and a sequence
// number as 16, then the 32-bit key_t at byte 20), which
// unix.SysvIpcPerm holds in a blank field.
func ipcKey(p *unix.SysvIpcPerm) int32 {
	const keyOffset = 20
	if unsafe.Sizeof(*p) != keyOffset+4 {
		return 0
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(p), keyOffset))
}

// removeShmSegment removes a System V shared memory segment; one that is
// gone already is no error.
func removeShmSegment(id int) error {
	if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EIDRM) {
		return err
	}
	return nil
}

// shmCreatedBy finds nothing on macOS, which has no table of segments to
// read: RemoveOrphanedShmOf removes nothing there.
func shmCreatedBy(int) []int { return nil }

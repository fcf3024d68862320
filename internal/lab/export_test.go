package lab

// Exported for the tests of package lab_test alone.

// ServerShmID returns the id of the System V shared memory segment that
// s's postmaster.pid names, or -1 when it names none. Tests use it with
// [ShmSegmentExists] to check that Stop leaves no segment behind.
func ServerShmID(s *Server) int {
	if _, id, ok := postmasterShm(s); ok {
		return id
	}
	return -1
}

// ShmSegmentExists reports whether the System V shared memory segment with
// this id exists.
func ShmSegmentExists(id int) bool {
	_, ok := shmSegment(id)
	return ok
}

package lab

// Windows has no System V shared memory, and the lab starts no PostgreSQL
// there (Start refuses: see Support).

func shmSegment(int) (shmInfo, bool) { return shmInfo{}, false }
func removeShmSegment(int) error     { return nil }
func shmCreatedBy(int) []int         { return nil }

//go:build !linux

package lease

import "time"

// setUserTimeout does nothing where the system has no TCP_USER_TIMEOUT:
// the lease's own heartbeat timeout still notices a silent network, and the
// keepalives still apply.
func setUserTimeout(uintptr, time.Duration) error { return nil }

package locks

import "github.com/leasectl/leasectl/internal/errkind"

// Is makes a PermissionError of kind errkind.Unavailable: the server
// refused the request.
func (e *PermissionError) Is(target error) bool { return target == errkind.Unavailable }

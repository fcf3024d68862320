package lab

import "github.com/leasectl/leasectl/internal/errkind"

// Is makes a MissingBinaryError of kind errkind.Unavailable: the servers
// cannot be started on this machine as it is.
func (e *MissingBinaryError) Is(target error) bool { return target == errkind.Unavailable }

// Is makes an AlreadyRunningError of kind errkind.Input.
func (e *AlreadyRunningError) Is(target error) bool { return target == errkind.Input }

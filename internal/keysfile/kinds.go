package keysfile

import "github.com/leasectl/leasectl/internal/errkind"

// Every error of this package is about its input, a keys file:
// errkind.Input.

func (e *InvalidError) Is(target error) bool  { return target == errkind.Input }
func (e *NotFoundError) Is(target error) bool { return target == errkind.Input }

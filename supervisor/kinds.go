package supervisor

import "github.com/leasectl/leasectl/internal/errkind"

// Is makes a StartError of kind errkind.Input: the program cannot be run
// as given.
func (e *StartError) Is(target error) bool { return target == errkind.Input }

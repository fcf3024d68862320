package lease

import "github.com/leasectl/leasectl/errkind"

// Is makes a ConfigError of kind errkind.Input.
func (e *ConfigError) Is(target error) bool { return target == errkind.Input }

// Is makes a StartError of kind errkind.Input: the program cannot be run
// as given.
func (e *StartError) Is(target error) bool { return target == errkind.Input }

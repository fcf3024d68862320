package lease

import "github.com/leasectl/leasectl/internal/errkind"

// Is makes a ConfigError of kind errkind.Input.
func (e *ConfigError) Is(target error) bool { return target == errkind.Input }

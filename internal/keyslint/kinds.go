package keyslint

import "github.com/leasectl/leasectl/internal/errkind"

// Every error of this package is about its input (a git ref, the
// repository a keys file lives in): errkind.Input.

func (e *GitError) Is(target error) bool         { return target == errkind.Input }
func (e *NotRepoError) Is(target error) bool     { return target == errkind.Input }
func (e *RefNotFoundError) Is(target error) bool { return target == errkind.Input }
func (e *NotAtRefError) Is(target error) bool    { return target == errkind.Input }
func (e *NoBaseError) Is(target error) bool      { return target == errkind.Input }
func (e *ShallowError) Is(target error) bool     { return target == errkind.Input }

// Package errkind names the few kinds of failure that leasectl's packages
// report, so that a caller can tell them apart without knowing every error
// type: errors.Is(err, errkind.Unavailable) holds for any error whose chain
// carries that kind, whichever package made it.
//
//   - Input: the request itself is wrong (a malformed DSN, an invalid keys
//     file, a git ref that does not exist, a standby where a primary is
//     needed). Asking again the same way fails again.
//   - Unavailable: the database (or a program the lab needs) could not be
//     reached, or refused the request (authentication, permission).
//   - CheckFailed: the work was done and its verdict is negative (no holder,
//     no takeover).
//   - Interrupted: the work was stopped before it reached a verdict.
//
// The command line maps each kind to one exit code; library callers can use
// the kinds to decide whether to retry.
package errkind

// Kind is one kind of failure. The kinds are the package's variables; a
// Kind is itself an error, so that errors.Is can match it.
type Kind struct{ name string }

func (k *Kind) Error() string { return k.name }

// The kinds.
var (
	Input       = &Kind{"invalid input"}
	Unavailable = &Kind{"unavailable"}
	CheckFailed = &Kind{"check failed"}
	Interrupted = &Kind{"interrupted"}
)

// New returns an error with the text msg that is of kind k. Each call
// returns a distinct error, for use as a package's sentinel.
func New(k *Kind, msg string) error { return &sentinel{kind: k, msg: msg} }

type sentinel struct {
	kind *Kind
	msg  string
}

func (e *sentinel) Error() string        { return e.msg }
func (e *sentinel) Is(target error) bool { return target == e.kind }

// Mark returns err, unchanged in text and chain, as also of kind k. It
// returns nil for a nil err.
func Mark(err error, k *Kind) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, kind: k}
}

type marked struct {
	err  error
	kind *Kind
}

func (e *marked) Error() string        { return e.err.Error() }
func (e *marked) Unwrap() error        { return e.err }
func (e *marked) Is(target error) bool { return target == e.kind }

package cmd

import (
	"errors"
	"fmt"
	"io"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/spf13/cobra"
)

// The exit codes of every leasectl command.
const (
	ExitOK          = 0 // the check passed, the action was done
	ExitCheckFailed = 1 // the check failed: the verdict is negative
	ExitUsage       = 2 // usage or input error
	ExitUnavailable = 3 // the database could not be reached, or refused the request
	// ExitInterrupted is for a check interrupted before its verdict (Ctrl-C):
	// 128 + SIGINT, as shells report it.
	ExitInterrupted = 130
)

// UsageError is a mistake in how the command was called: a flag, an
// argument. It is printed as one line and a hint to the command's help.
type UsageError struct{ Err error }

func (e *UsageError) Error() string        { return e.Err.Error() }
func (e *UsageError) Unwrap() error        { return e.Err }
func (e *UsageError) Is(target error) bool { return target == errkind.Input }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// InputError is bad input that is not about the command line itself (a file,
// a git ref): exit 2, without the hint to the help.
type InputError struct{ Err error }

func (e *InputError) Error() string        { return e.Err.Error() }
func (e *InputError) Unwrap() error        { return e.Err }
func (e *InputError) Is(target error) bool { return target == errkind.Input }

// CheckFailedError means the command ran and its verdict is negative. The
// command has already rendered why; Message, if set, is printed to stderr.
type CheckFailedError struct{ Message string }

func (e *CheckFailedError) Error() string {
	if e.Message == "" {
		return "check failed"
	}
	return e.Message
}

func (e *CheckFailedError) Is(target error) bool { return target == errkind.CheckFailed }

// ExitCode maps an error returned by a command to its exit code. This is the
// one place where that mapping lives: packages mark their errors with the
// kinds of package errkind, and dbconn classifies what the server and the
// network said.
func ExitCode(err error) int {
	var childExit *supervisor.ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &childExit): // leasectl run passes its program's status through
		return childExit.Code
	case errors.Is(err, errkind.Interrupted):
		return ExitInterrupted
	case errors.Is(err, errkind.Input):
		return ExitUsage
	case errors.Is(err, errkind.Unavailable):
		return ExitUnavailable
	case errors.Is(err, errkind.CheckFailed):
		return ExitCheckFailed
	case dbconn.Unavailable(err):
		return ExitUnavailable
	default:
		return ExitCheckFailed
	}
}

// printError writes err to w the way every command reports a failure: one
// "error:" line (more for multi-line errors) and, for usage errors, a line
// that points to the failing command's help.
func printError(w io.Writer, c *cobra.Command, err error) {
	var check *CheckFailedError
	if errors.As(err, &check) && check.Message == "" {
		return // the verdict was rendered already
	}
	var childExit *supervisor.ExitError
	if errors.As(err, &childExit) {
		return // leasectl run: the program's own status, logged already
	}
	if errors.Is(err, errPromptInterrupted) {
		fmt.Fprintln(w, err.Error())
		return
	}
	if errors.Is(err, errkind.Interrupted) {
		fmt.Fprintln(w, "interrupted: no verdict")
		return
	}
	// Errors carry text from the server and from files (role and
	// database names): escaped, so they cannot act on the terminal.
	fmt.Fprintf(w, "error: %s\n", termSafeLines(err.Error()))
	printUsageHint(w, c, err)
}

// printUsageHint points to the help of c after a usage error.
func printUsageHint(w io.Writer, c *cobra.Command, err error) {
	var usage *UsageError
	if errors.As(err, &usage) && c != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", c.CommandPath())
	}
}

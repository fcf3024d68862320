package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/lab"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
	"github.com/spf13/cobra"
)

// The exit codes of every leasectl command (DESIGN.md).
const (
	ExitOK          = 0 // the check passed, the action was done
	ExitCheckFailed = 1 // the check failed: the verdict is negative
	ExitUsage       = 2 // usage or input error
	ExitUnavailable = 3 // the database could not be reached, or refused the request
	// ExitInterrupted is for a check interrupted before its verdict (Ctrl-C):
	// 128 + SIGINT, as shells report it.
	ExitInterrupted = 130
)

// UsageError is a mistake in how the command was called. It is the only error
// after which the usage text is shown.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// InputError is bad input that is not about the command line itself (a file,
// a git ref): exit 2, without the usage text.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// CheckFailedError means the command ran and its verdict is negative. The
// command has already rendered why; Message, if set, is printed to stderr.
type CheckFailedError struct{ Message string }

func (e *CheckFailedError) Error() string {
	if e.Message == "" {
		return "check failed"
	}
	return e.Message
}

// ExitCode maps an error returned by a command to its exit code. This is the
// one place where that mapping lives.
func ExitCode(err error) int {
	var (
		usage       *UsageError
		input       *InputError
		check       *CheckFailedError
		dsnErr      *dbconn.DSNError
		connErr     *dbconn.ConnectError
		keysInvalid *keys.InvalidError
		keysMissing *keys.NotFoundError
		missingBin  *lab.MissingBinaryError
		running     *lab.AlreadyRunningError
		pgErr       *pgconn.PgError
		gitErr      *keys.GitError
		notRepo     *keys.NotRepoError
		refMissing  *keys.RefNotFoundError
		notAtRef    *keys.NotAtRefError
		noBase      *keys.NoBaseError
		shallow     *keys.ShallowError
		permission  *locks.PermissionError
		childExit   *lease.ExitError
		leaseCfg    *lease.ConfigError
		startErr    *lease.StartError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &childExit): // leasectl run passes its program's status through
		return childExit.Code
	case errors.Is(err, probe.ErrInterrupted):
		return ExitInterrupted
	case errors.As(err, &leaseCfg), errors.As(err, &startErr):
		return ExitUsage
	case errors.As(err, &usage), errors.As(err, &input), errors.As(err, &dsnErr),
		errors.As(err, &keysInvalid), errors.As(err, &keysMissing), errors.As(err, &running),
		errors.Is(err, lab.ErrNoLab), errors.Is(err, lab.ErrUnsupported):
		// ErrUnsupported: the lab on Windows, refused as leasectl run is
		return ExitUsage
	case errors.As(err, &gitErr), errors.As(err, &notRepo), errors.As(err, &refMissing),
		errors.As(err, &notAtRef), errors.As(err, &noBase), errors.As(err, &shallow):
		// keys diff could not read its base version: a wrong ref or path, no
		// release yet, or a shallow clone that hides it
		return ExitUsage
	case errors.Is(err, locks.ErrStandby), errors.Is(err, locks.ErrOwnSession):
		// failover or verify pointed at the wrong server: a standby, or the
		// holder itself through a pooler
		return ExitUsage
	case errors.As(err, &permission):
		return ExitUnavailable
	case errors.As(err, &check), errors.Is(err, locks.ErrNoHolder), errors.Is(err, locks.ErrHolderChanged),
		errors.Is(err, locks.ErrNotALease), errors.Is(err, locks.ErrNoTakeover):
		return ExitCheckFailed
	case errors.As(err, &connErr), errors.As(err, &missingBin):
		return ExitUnavailable
	case errors.As(err, &pgErr) && (pgErr.Code == "42501" || strings.HasPrefix(pgErr.Code, "28") ||
		strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")):
		// insufficient privilege, authorization, connection exception, operator intervention
		return ExitUnavailable
	case pgconn.SafeToRetry(err), errors.Is(err, context.DeadlineExceeded), isConnLoss(err):
		return ExitUnavailable
	default:
		return ExitCheckFailed
	}
}

func isConnLoss(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "timeout")
}

// printError writes err to w the way every command reports a failure: one
// "Error:" line (more for multi-line errors) and, for usage errors only, the
// failing command's usage.
func printError(w io.Writer, c *cobra.Command, err error) {
	var check *CheckFailedError
	if errors.As(err, &check) && check.Message == "" {
		return // the verdict was rendered already
	}
	var childExit *lease.ExitError
	if errors.As(err, &childExit) {
		return // leasectl run: the program's own status, logged already
	}
	if errors.Is(err, probe.ErrInterrupted) {
		fmt.Fprintln(w, "interrupted: no verdict")
		return
	}
	// Errors carry text from the server and from files (role and
	// database names): escaped, so they cannot act on the terminal.
	fmt.Fprintf(w, "Error: %s\n", termSafeLines(err.Error()))
	var usage *UsageError
	if errors.As(err, &usage) && c != nil {
		fmt.Fprintf(w, "\n%s", c.UsageString())
	}
}

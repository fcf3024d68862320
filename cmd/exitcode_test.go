package cmd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/internal/keyslint"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/supervisor"
)

// TestExitCodesByKind: the packages' errors, wrapped as commands wrap them,
// map to the documented exit codes through their kinds.
func TestExitCodesByKind(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("leasectl: %w", err) }
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{&supervisor.ExitError{Code: 42}, 42},
		{wrap(probe.ErrInterrupted), ExitInterrupted},
		{usageErrorf("bad flag"), ExitUsage},
		{&InputError{Err: errors.New("bad file")}, ExitUsage},
		{wrap(&dbconn.DSNError{Reason: "x"}), ExitUsage},
		{wrap(&keys.InvalidError{Path: "keys.yaml"}), ExitUsage},
		{wrap(&keys.NotFoundError{Path: "keys.yaml"}), ExitUsage},
		{wrap(&keysfile.InvalidError{Path: "keys.yaml"}), ExitUsage},
		{wrap(&keysfile.NotFoundError{Path: "keys.yaml"}), ExitUsage},
		{wrap(&keyslint.RefNotFoundError{Ref: "v9"}), ExitUsage},
		{wrap(&keyslint.ShallowError{}), ExitUsage},
		{wrap(&lab.AlreadyRunningError{Dir: "/tmp/x"}), ExitUsage},
		{wrap(lab.ErrNoLab), ExitUsage},
		{wrap(lab.ErrUnsupported), ExitUsage},
		{wrap(&lease.ConfigError{Field: "Key", Reason: "x"}), ExitUsage},
		{wrap(locks.ErrStandby), ExitUsage},
		{wrap(locks.ErrOwnSession), ExitUsage},
		{wrap(&locks.PermissionError{PID: 1}), ExitUnavailable},
		{wrap(&dbconn.ConnectError{Addr: "h:1", Err: errors.New("refused")}), ExitUnavailable},
		{wrap(&lab.MissingBinaryError{Name: "postgres"}), ExitUnavailable},
		{wrap(&pgconn.PgError{Code: "57P01"}), ExitUnavailable},
		{wrap(context.DeadlineExceeded), ExitUnavailable},
		{&CheckFailedError{}, ExitCheckFailed},
		{wrap(locks.ErrNoHolder), ExitCheckFailed},
		{wrap(locks.ErrNoTakeover), ExitCheckFailed},
		{wrap(locks.ErrHolderChanged), ExitCheckFailed},
		{wrap(&pgconn.PgError{Code: "42601"}), ExitCheckFailed},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

package lease

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/internal/term"
)

// Querier runs a query: a pgx.Tx, a *pgx.Conn, a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Fence checks, inside tx, that the term named by token (Session.FenceToken)
// is still current, and returns its epoch. Call it in the transaction whose
// writes it guards, on any connection to the lease's database (a pool, a
// transaction pooler): that transaction then either commits before the next
// term begins, or does not commit, under any isolation level. A token of a
// term that is no longer current fails with a *StaleTermError; roll back.
func Fence(ctx context.Context, tx Querier, token string) (int64, error) {
	var epoch int64
	if err := tx.QueryRow(ctx, term.FenceSQL, token).Scan(&epoch); err != nil {
		if term.IsStale(err) {
			return 0, &StaleTermError{Token: token, Err: err}
		}
		return 0, fmt.Errorf("leasectl.fence: %w", err)
	}
	return epoch, nil
}

// StaleTermError says that a fencing token names a term that is no longer
// current: a newer term has begun (or this one ended), and the transaction
// that checked it must not commit.
type StaleTermError struct {
	Token string
	// Err is the server's error (SQLSTATE LF001), whose message names the
	// role, the stale epoch and the current one.
	Err error
}

func (e *StaleTermError) Error() string { return e.Err.Error() }

// Unwrap returns the server's error.
func (e *StaleTermError) Unwrap() error { return e.Err }

// Is makes a StaleTermError of kind errkind.CheckFailed.
func (e *StaleTermError) Is(target error) bool { return target == errkind.CheckFailed }

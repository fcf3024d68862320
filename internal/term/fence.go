package term

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Fencing. A term's token names it: the role's key, the epoch and the
// term id, and the role for people. A program passes it to
// leasectl.fence(token) inside each transaction whose writes must not land
// once a newer term has begun; the function holds the role's fencing lock
// shared until the transaction ends, and a new term takes that lock
// exclusively (Start), so that it begins only once every such transaction
// is over.

// StaleCode is the SQLSTATE with which leasectl.fence refuses a token of a
// term that is no longer current.
const StaleCode = "LF001"

// Token is the fencing token of term id (epoch) of key, named role.
func Token(key, epoch int64, id, role string) string {
	return "leasectl:" + strconv.FormatInt(key, 10) + ":" + strconv.FormatInt(epoch, 10) + ":" + id + ":" + role
}

// ParseToken reads a token made by Token.
func ParseToken(token string) (key, epoch int64, id, role string, err error) {
	f := strings.SplitN(token, ":", 5)
	if len(f) != 5 || f[0] != "leasectl" {
		return 0, 0, "", "", fmt.Errorf("%q is not a fencing token", token)
	}
	if key, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, "", "", fmt.Errorf("%q is not a fencing token: its key: %w", token, err)
	}
	if epoch, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return 0, 0, "", "", fmt.Errorf("%q is not a fencing token: its epoch: %w", token, err)
	}
	return key, epoch, f[3], f[4], nil
}

// FenceSQL checks a token inside the caller's transaction.
const FenceSQL = `SELECT leasectl.fence($1)`

// Fence runs leasectl.fence(token) on q, which should be the transaction
// whose writes it guards, and returns the term's epoch. A token of a term
// that is no longer current fails with an error for which IsStale is true.
func Fence(ctx context.Context, q Querier, token string) (int64, error) {
	var epoch int64
	if err := q.QueryRow(ctx, FenceSQL, token).Scan(&epoch); err != nil {
		return 0, err
	}
	return epoch, nil
}

// IsStale reports whether err is leasectl.fence refusing a token of a term
// that is no longer current.
func IsStale(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == StaleCode
}

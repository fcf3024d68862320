package dbconn

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// Is makes a DSNError of kind errkind.Input.
func (e *DSNError) Is(target error) bool { return target == errkind.Input }

// Is makes a ConnectError of kind errkind.Unavailable.
func (e *ConnectError) Is(target error) bool { return target == errkind.Unavailable }

// Unavailable reports whether err means that the database could not be
// reached, went away, did not answer in time, or refused the request. It is
// the one place where SQLSTATEs and network errors are classified:
//
//   - an error already of kind errkind.Unavailable (a ConnectError);
//   - SQLSTATE 42501 (insufficient privilege) and the classes 08
//     (connection exception), 28 (invalid authorization), 53 (insufficient
//     resources: too many connections) and 57P (operator intervention: the
//     server shuts down, or ended the session);
//   - a lost connection: pgx's closed connection, EOF in the middle of a
//     message, a reset or broken connection, a refused connection;
//   - a timeout: a network timeout or a context deadline.
//
// Other server errors (a syntax error, a constraint) are not: they are
// answers, not outages.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errkind.Unavailable) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "42501" || strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "28") ||
			strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "57P")
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// LoginRefused reports whether err is the server refusing a login for a
// reason that retrying at once cannot fix: a role that may not log in or
// a wrong password (class 28), a database that does not exist (3D000), or
// no CONNECT privilege (42501). A client that retries must back off: each
// attempt is a failed login in the server's log.
func LoginRefused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000" || pgErr.Code == "42501"
}

// TooManyConnections reports whether err is the server refusing a
// connection because it has no slot left (53300, too_many_connections).
func TooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

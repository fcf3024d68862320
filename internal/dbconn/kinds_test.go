package dbconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// TestUnavailableClassifies: outages and refusals are Unavailable, answers
// (a syntax error, a unique violation) are not, wrapped or not.
func TestUnavailableClassifies(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("something else"), false},
		{pg("42601"), false}, // syntax error
		{pg("23505"), false}, // unique violation
		{pg("42501"), true},  // insufficient privilege
		{pg("28P01"), true},  // invalid password
		{pg("08006"), true},  // connection failure
		{pg("53300"), true},  // too many connections
		{pg("57P01"), true},  // admin shutdown
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("query: %w", pgconn.ErrConnClosed), true},
		{&ConnectError{Addr: "127.0.0.1:1", Err: syscall.ECONNREFUSED}, true},
		{errkind.Mark(errors.New("refused"), errkind.Unavailable), true},
		{&DSNError{Reason: "bad"}, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", &DSNError{Reason: "bad"}), errkind.Input) {
		t.Error("a DSNError is not of kind Input")
	}
}

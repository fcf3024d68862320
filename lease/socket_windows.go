package lease

import (
	"errors"
	"os"

	"github.com/jackc/pgx/v5"
)

// dupSocket is not available on Windows: a child process cannot inherit a
// socket there the way Command needs.
func dupSocket(*pgx.Conn, string) (*os.File, error) {
	return nil, errors.New("lease socket: a program cannot inherit the session's socket on Windows")
}

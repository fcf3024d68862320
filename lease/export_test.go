package lease

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// WithTermWait returns c with poll as the longest wait for the previous
// term's end between two readings of it, and after run on the lease
// session after each reading.
func WithTermWait(c Config, poll time.Duration, after func(conn *pgx.Conn)) Config {
	c.termPoll, c.afterTermRead = poll, after
	return c
}

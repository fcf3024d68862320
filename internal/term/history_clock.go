package term

import (
	"context"
	"time"
)

// ServerClock returns the server's clock: every time History returns is on
// it, so how long a live term has lasted, and a window such as "the last
// 24 hours", are measured against it rather than the caller's clock.
func ServerClock(ctx context.Context, q Querier) (time.Time, error) {
	var now time.Time
	err := q.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now)
	return now, wrap("read the server's clock", err)
}

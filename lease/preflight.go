package lease

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// defaultPreflight is the session-stability probe.
// TODO(probe): call probe.Run once package probe lands on main.
func defaultPreflight(timeout time.Duration) func(context.Context, *pgx.ConnConfig) error {
	return func(ctx context.Context, cfg *pgx.ConnConfig) error { return nil }
}

package locks_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// TestGrantStatementsRunAsShown: the GRANT statements leasectl suggests
// run as printed, for role names that are keywords, mixed case or carry
// quotes and spaces.
func TestGrantStatementsRunAsShown(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Conn(t, testLab.DirectDSN(), "grants")
	for _, role := range []string{"user", "select", "App Reader", `o"brien`, "plain_role"} {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Fatalf("create role %q: %v", role, err)
		}
		t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) })
		for _, stmt := range []string{locks.RevealGrant(role), (&locks.PermissionError{Role: role}).Grant()} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Errorf("role %q: %s: %v", role, stmt, err)
			}
		}
	}
}

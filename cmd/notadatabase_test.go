package cmd

import (
	"strings"
	"testing"
)

// TestAdminConsoleIsNotADatabase: PgBouncer's admin console (database
// pgbouncer) as the DSN is an input error, exit 2, that says what it is,
// for every command that reads the database, not the admin console's own
// complaint about the extended protocol (exit 3).
func TestAdminConsoleIsNotADatabase(t *testing.T) {
	admin := strings.Replace(needLab(t).PoolerDSN("transaction"), "/postgres?", "/pgbouncer?", 1)
	keys := whoKeys(t)
	for _, args := range [][]string{
		{"probe"},
		{"who", "poller"},
		{"who", "--all"},
		{"who", "--replicas"},
		{"history", "poller"},
		{"failover", "poller", "--yes"},
		{"verify"},
		{"fence", "init"},
	} {
		res := runCLI(t, nil, append([]string{"--dsn", admin, "--keys", keys}, args...)...)
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, "is PgBouncer's admin console (PgBouncer ") ||
			!strings.Contains(res.Stderr, "not a database") || strings.Contains(res.Stderr, "SQLSTATE") || res.Stdout != "" {
			t.Errorf("%s: exit %d, want %d:\n%s%s", strings.Join(args, " "), res.Code, ExitUsage, res.Stdout, res.Stderr)
		}
	}
}

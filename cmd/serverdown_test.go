package cmd

import (
	"context"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestServerDownBehindTransactionPooler: with the server behind PgBouncer
// (transaction mode) stopped, PgBouncer still accepts the login and keeps
// the first statement waiting while it retries the server. Every command
// then says that the server behind the pooler cannot be reached, exit 3,
// as the probe does, and not that the pooler had no free connection (the
// first) or PgBouncer's bare 08P01 (the others).
func TestServerDownBehindTransactionPooler(t *testing.T) {
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{{Name: "t", Mode: lab.Transaction, PoolSize: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	keys := whoKeys(t)
	dsn := l.PoolerDSN("t")
	if res := runCLI(t, nil, "--dsn", dsn, "--keys", keys, "who", "--all"); res.Code != ExitOK {
		t.Fatalf("who with the server up: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if err := l.StopServer(ctx, &l.Primary, "fast"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"who", "--all"},
		{"who", "poller"},
		{"history", "poller"},
		{"failover", "poller", "--yes"},
		{"fence", "init"},
		{"verify"},
		{"probe"},
		{"who", "--all"},
	} {
		res := runCLI(t, nil, append([]string{"--dsn", dsn, "--keys", keys, "--timeout", "2s"}, args...)...)
		if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, "the database server behind it cannot be reached") ||
			strings.Contains(res.Stderr, "no free server connection") {
			t.Errorf("%s: exit %d, want %d:\n%s%s", strings.Join(args, " "), res.Code, ExitUnavailable, res.Stdout, res.Stderr)
		}
	}
}

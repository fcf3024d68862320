package benchutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
)

// TrustOverTCP creates a role that pg_hba.conf trusts over TCP from
// 127.0.0.1 and that reads every session (pg_read_all_stats), as the lab's
// superuser does, and returns a DSN for it: TCP without the cost of SCRAM,
// the baseline where a command's fixed costs show (bench probe and who).
func TrustOverTCP(ctx context.Context, l *lab.Lab) (string, error) {
	const role = "bench_trust"
	hba := filepath.Join(l.Primary.DataDir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		return "", err
	}
	rule := "host all " + role + " 127.0.0.1/32 trust\n"
	if err := os.WriteFile(hba, append([]byte(rule), old...), 0o600); err != nil {
		return "", err
	}
	connect := func(dsn string) (*pgx.Conn, error) {
		cfg, err := dbconn.Parse(dsn, 10*time.Second)
		if err != nil {
			return nil, err
		}
		return dbconn.Connect(ctx, cfg)
	}
	conn, err := connect(l.DirectDSN())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	for _, sql := range []string{"CREATE ROLE " + role + " LOGIN", "GRANT pg_read_all_stats TO " + role, "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("%s: %w", sql, err)
		}
	}
	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", role, l.Primary.Port)
	// The reload is asynchronous: wait until the rule lets the role in.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := connect(dsn)
		if err == nil {
			c.Close(ctx)
			return dsn, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the trust rule for %s did not take effect: %w", role, err)
		}
	}
}

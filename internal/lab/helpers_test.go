package lab_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasectl/leasectl/internal/dbconn"
)

func asConnectError(err error, target **dbconn.ConnectError) bool { return errors.As(err, target) }

func connectT(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

package locks_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dbconn.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestTryLockExcludesAndUnlockReleasesStackedHolds shows the two facts the
// rest of leasectl builds on, on a direct connection: a second session
// cannot take a held key, and a key taken twice needs two releases.
func TestTryLockExcludesAndUnlockReleasesStackedHolds(t *testing.T) {
	ctx := context.Background()
	a, b := connect(t, testLab.DirectDSN()), connect(t, testLab.DirectDSN())
	const key = -4242
	for i := 0; i < 2; i++ {
		if ok, err := locks.TryLock(ctx, a, key); err != nil || !ok {
			t.Fatalf("A TryLock #%d = %v, %v", i+1, ok, err)
		}
	}
	if ok, err := locks.TryLock(ctx, b, key); err != nil || ok {
		t.Fatalf("B TryLock on A's key = %v, %v; want false", ok, err)
	}
	n, err := locks.Unlock(ctx, a, key)
	if err != nil || n != 2 {
		t.Fatalf("Unlock released %d holds (%v), want 2", n, err)
	}
	if ok, err := locks.TryLock(ctx, b, key); err != nil || !ok {
		t.Fatalf("B TryLock after release = %v, %v; want true", ok, err)
	}
	if n, err := locks.Unlock(ctx, b, key); err != nil || n != 1 {
		t.Fatalf("B Unlock = %d, %v", n, err)
	}
}

func TestServerInfo(t *testing.T) {
	ctx := context.Background()
	info, err := dbconn.Server(ctx, connect(t, testLab.DirectDSN()))
	if err != nil {
		t.Fatal(err)
	}
	if info.Port != testLab.Primary.Port || info.InRecovery || info.VersionNum < 140000 || info.BackendPID == 0 || info.Database != "postgres" {
		t.Errorf("unexpected server info %+v (lab primary port %d)", info, testLab.Primary.Port)
	}
}

func TestKeyHoldersSeesTheHolder(t *testing.T) {
	ctx := context.Background()
	a, b := connect(t, testLab.DirectDSN()), connect(t, testLab.DirectDSN())
	for _, key := range []int64{-1, 1 << 31, 1<<32 + 5, math.MaxInt64, math.MinInt64} {
		pidA, ok, err := locks.TryLockPID(ctx, a, key)
		if err != nil || !ok {
			t.Fatalf("key %d: A TryLockPID = %v, %v", key, ok, err)
		}
		self, holders, err := locks.KeyHolders(ctx, b, key)
		if err != nil {
			t.Fatal(err)
		}
		if self == pidA || len(holders) != 1 || holders[0] != pidA {
			t.Errorf("key %d: B (pid %d) sees holders %v, want [%d]", key, self, holders, pidA)
		}
		if _, err := locks.Unlock(ctx, a, key); err != nil {
			t.Fatal(err)
		}
		if _, holders, _ := locks.KeyHolders(ctx, b, key); len(holders) != 0 {
			t.Errorf("key %d: still held after Unlock: %v", key, holders)
		}
	}
}

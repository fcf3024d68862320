//go:build worker

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/lease"
)

// startPoller runs the poller under the "poller" role's lease until ctx
// ends. It returns early only when the configuration is unusable.
var startPoller = func(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	keysPath := getenv("LEASECTL_KEYS")
	if keysPath == "" {
		keysPath = "keys.yaml"
	}
	f, err := keys.Load(keysPath)
	if err != nil {
		return err
	}
	role, ok := f.Role("poller")
	if !ok {
		return fmt.Errorf("%s has no role \"poller\"", keysPath)
	}
	// Fencing: the poller's writes check its term in their own
	// transactions, so a poller frozen past its term cannot write.
	err = lease.Run(ctx, lease.Config{Role: role.Name, Key: role.Key, DSN: getenv("DATABASE_URL"), Logger: log, Fencing: true},
		pollLoop(getenv("DATABASE_URL"), log))
	if ctx.Err() != nil {
		return nil // shutdown
	}
	return err
}

// pollLoop is the leader-only work: it polls the queue until the lease is
// lost or the service stops. A real poller would claim and process jobs
// here; this one records each poll, in a transaction that checks the
// term's fencing token first: once a newer term has begun, the write is
// refused (lease.StaleTermError) and does not commit.
func pollLoop(dsn string, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		log.Info("poller started", "backend_pid", s.BackendPID, "epoch", s.Epoch)
		db, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer db.Close(context.Background())
		if _, err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS worker_polls (epoch bigint, n int, at timestamptz DEFAULT now())"); err != nil {
			return err
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				log.Info("poller stopped", "why", context.Cause(ctx).Error())
				return nil
			case <-t.C:
			}
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				epoch, err := lease.Fence(ctx, tx, s.FenceToken())
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, "INSERT INTO worker_polls (epoch, n) VALUES ($1, $2)", epoch, n)
				return err
			})
			var stale *lease.StaleTermError
			switch {
			case errors.As(err, &stale):
				log.Warn("a newer term has begun: not writing", "err", err.Error())
				<-ctx.Done() // the lease notices and stops this work
				return nil
			case err != nil && ctx.Err() == nil:
				log.Warn("poll failed", "err", err.Error())
			case err == nil:
				log.Info("polling the queue", "poll", n, "epoch", s.Epoch)
			}
		}
	}
}

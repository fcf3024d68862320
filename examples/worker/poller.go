//go:build worker

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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
	err = lease.Run(ctx, lease.Config{Role: role.Name, Key: role.Key, DSN: getenv("DATABASE_URL"), Logger: log}, pollLoop(log))
	if ctx.Err() != nil {
		return nil // shutdown
	}
	return err
}

// pollLoop is the leader-only work: it polls the queue until the lease is
// lost or the service stops. A real poller would claim and process jobs
// here; this one logs each poll.
func pollLoop(log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		log.Info("poller started", "backend_pid", s.BackendPID)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				log.Info("poller stopped", "why", context.Cause(ctx).Error())
				return nil
			case <-t.C:
				log.Info("polling the queue", "poll", n)
			}
		}
	}
}

// Command worker is an example service with a leader-only queue poller
// behind two gates:
//
//  1. The poller is compiled in only with a build tag: go build -tags worker.
//     A default build carries no poller code at all (poller_off.go).
//  2. Even then it runs only when WORKER_POLLER=on; otherwise the service
//     starts without it.
//
// With both gates open, the poller runs only while this replica holds the
// "poller" role's lease (package lease): one poller across all replicas.
// The key comes from keys.yaml ($LEASECTL_KEYS, else ./keys.yaml) and the
// database from $DATABASE_URL (else libpq's PG* variables).
//
//	go build -tags worker -o worker ./examples/worker
//	WORKER_POLLER=on DATABASE_URL=postgres://... ./worker
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Getenv, os.Stderr))
}

// run is the service: whatever it serves to everyone (here: nothing but a
// log line), plus the poller when both gates are open. It returns the exit
// status once ctx ends.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("service up", "poller_compiled_in", startPoller != nil)
	switch {
	case startPoller == nil:
		log.Info("poller not compiled in: build with -tags worker to include it")
	case getenv("WORKER_POLLER") != "on":
		log.Info("poller compiled in but off: set WORKER_POLLER=on to run it")
	default:
		done := make(chan error, 1)
		go func() { done <- startPoller(ctx, getenv, log) }()
		select {
		case err := <-done: // the poller gave up before shutdown: a configuration error
			log.Error("poller stopped", "err", err)
			return 1
		case <-ctx.Done():
			<-done // the lease stops the poller and releases the key
		}
	}
	<-ctx.Done()
	log.Info("service stopped")
	return 0
}

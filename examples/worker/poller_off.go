//go:build !worker

package main

import (
	"context"
	"log/slog"
)

// startPoller is nil without the worker build tag: the first gate. No poller
// code is compiled into this binary.
var startPoller func(ctx context.Context, getenv func(string) string, log *slog.Logger) error

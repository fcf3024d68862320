package lease

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/timing"
)

// ProbeError is the default preflight's refusal: the session-stability
// probe's verdict was not Stable.
type ProbeError struct {
	Report *probe.Report
}

func (e *ProbeError) Error() string {
	reasons := e.Report.Reasons()
	if len(reasons) == 0 {
		return "probe verdict " + string(e.Report.Verdict)
	}
	return "probe verdict " + string(e.Report.Verdict) + ": " + strings.Join(reasons, "; ")
}

// defaultPreflight runs the session-stability probe (package probe) with
// the lease's heartbeat settings, and refuses unless its verdict is Stable.
// Each run takes a key of its own from the probe's range, so replicas that
// probe at the same moment (they all reconnect after a server restart) do
// not find each other's probe key held.
func defaultPreflight(t timing.Lease) func(context.Context, *pgx.ConnConfig) error {
	return func(ctx context.Context, cfg *pgx.ConnConfig) error {
		rep, err := probe.Run(ctx, probe.Options{
			ConnConfig:        cfg,
			Timeout:           t.HeartbeatTimeout,
			HeartbeatInterval: t.HeartbeatInterval,
			HeartbeatTimeout:  t.HeartbeatTimeout,
		})
		if err != nil {
			return err
		}
		if rep.Verdict != probe.Stable {
			return &ProbeError{Report: rep}
		}
		return nil
	}
}

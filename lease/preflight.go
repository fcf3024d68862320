package lease

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/probe"
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

// probe runs the session-stability probe (package probe) with the lease's
// heartbeat settings on conn, the lease session, as its connection A, and
// refuses unless its verdict is Stable. Each run takes a key of its own
// from the probe's range, so replicas that probe at the same moment (they
// all reconnect after a server restart) do not find each other's probe key
// held.
func (r *runner) probe(ctx context.Context, conn *pgx.Conn, cfg *pgx.ConnConfig) error {
	t := r.cfg.timing()
	rep, err := probe.Run(ctx, probe.Options{
		ConnConfig:        cfg,
		Conn:              conn,
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

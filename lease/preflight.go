package lease

import (
	"context"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
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
func defaultPreflight(t timing.Lease) func(context.Context, *pgx.ConnConfig) error {
	key := probeKey()
	return func(ctx context.Context, cfg *pgx.ConnConfig) error {
		rep, err := probe.Run(ctx, probe.Options{
			ConnConfig:        cfg,
			Key:               key,
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

// probeKey is the probe key of one Run: the default probe key's high 32
// bits ("leas", so that `leasectl who` can tell probe keys apart) and random
// low 32 bits. Replicas that probe at the same moment (they all reconnect
// after a server restart) would otherwise find the key held by each other's
// probe and refuse; one key per Run also bounds what a transaction pooler
// can strand to one key per process.
func probeKey() int64 {
	high := locks.DefaultProbeKey &^ 0xffffffff
	for {
		k := high | int64(rand.Uint32())
		if k != locks.DefaultProbeKey {
			return k
		}
	}
}

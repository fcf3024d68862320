package labtest

import (
	"context"
	"slices"

	"github.com/leasectl/leasectl/internal/lab"
)

// The twin is a second primary that shares nothing with the lab's primary:
// a server of its own initdb (so its own system identifier), with the same
// superuser and password, replicating nothing. Behind one front door with
// the primary it is split brain, or a host name that resolves to two
// unrelated servers: each holds its own advisory locks. HAProxy and nginx
// name it as the backend "twin"; pgpool-II in native replication mode
// (PgPoolSpec.Mode) writes to the primary and the twin alike. It is started
// when a front door needs it, before the front doors, and stopped after
// them. Its files are always under the run dir's "twin", so that Stop finds
// it even when the front door that needs it failed to start.

// TwinBackend is the HAProxySpec and NginxSpec backend that names the twin.
const TwinBackend = "twin"

const twinName = "twin"

// needsTwin reports whether a front door of s needs the twin.
func (s Spec) needsTwin() bool {
	if s.PgPool != nil && twinMode(s.PgPool.Mode) {
		return true
	}
	for _, h := range s.HAProxy {
		if slices.Contains(h.Backends, TwinBackend) {
			return true
		}
	}
	for _, n := range s.Nginx {
		if slices.Contains(n.Backends, TwinBackend) {
			return true
		}
	}
	return false
}

// startTwin creates the twin with initdb, as the lab creates the primary
// (the same superuser, password and authentication), and starts it.
func (d *FrontDoors) startTwin(ctx context.Context, port int, password string) (*lab.Server, error) {
	l := d.lab
	s := l.NewServer(twinName, port)
	l.Logf("initdb %s (the twin: a second, unrelated primary)", s.DataDir)
	if err := l.InitServer(ctx, &s, password); err != nil {
		return nil, err
	}
	if err := l.StartServer(ctx, &s); err != nil {
		return &s, err
	}
	return &s, nil
}

// Twin returns the lab's twin, or nil when no front door needs one.
func (d *FrontDoors) Twin() *lab.Server {
	if d.PgPool != nil && d.PgPool.Twin != nil {
		return d.PgPool.Twin
	}
	for i := range d.HAProxies {
		if t := d.HAProxies[i].Twin; t != nil {
			return t
		}
	}
	for i := range d.Nginxes {
		if t := d.Nginxes[i].Twin; t != nil {
			return t
		}
	}
	return nil
}

// TwinDSN is the twin over TCP, as the superuser; empty when the lab has no
// twin.
func (d *FrontDoors) TwinDSN() string {
	if t := d.Twin(); t != nil {
		return d.lab.DSN(t.Port, d.lab.User, "postgres")
	}
	return ""
}

// stopTwin stops the twin, found by its data directory, and removes the
// shared memory a kill would leave.
func (d *FrontDoors) stopTwin() []error {
	if d.lab.RunDir == "" {
		return nil
	}
	s := d.lab.NewServer(twinName, 0)
	return d.lab.ShutdownServer(&s)
}

// twinAlive reports whether the twin's postmaster runs.
func (d *FrontDoors) twinAlive() bool {
	if d.lab == nil || d.lab.RunDir == "" {
		return false
	}
	s := d.lab.NewServer(twinName, 0)
	return lab.ServerPID(&s) > 0
}

// twinStatus is the twin's Component, when the lab has one.
func (d *FrontDoors) twinStatus() []lab.Component {
	t := d.Twin()
	if t == nil {
		return nil
	}
	pid := lab.ServerPID(t)
	return []lab.Component{{Name: twinName, Kind: "postgres (unrelated primary)", Port: t.Port, PID: pid, Up: pid > 0 && lab.DialOK(t.Port)}}
}

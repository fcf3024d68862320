package lab

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// The twin is a second primary that shares nothing with the lab's primary:
// a server of its own initdb (so its own system identifier), with the same
// superuser and password, replicating nothing. Behind one front door with
// the primary it is split brain, or a host name that resolves to two
// unrelated servers: each holds its own advisory locks. HAProxy names it as
// the backend "twin"; pgpool-II in native replication mode
// (PgPoolSpec.Mode) writes to the primary and the twin alike. It is started
// when a front door needs it, before the front doors, and stopped after
// them. Its files are always under the run dir's "twin", so that Stop finds
// it even when the front door that needs it failed to start.

// TwinBackend is the HAProxySpec backend that names the twin.
const TwinBackend = "twin"

const twinName = "twin"

// needsTwin reports whether a front door of opts needs the twin.
func needsTwin(opts Options) bool {
	if opts.PgPool != nil && opts.PgPool.Mode == NativeReplication {
		return true
	}
	for _, h := range opts.HAProxy {
		if slices.Contains(h.Backends, TwinBackend) {
			return true
		}
	}
	return false
}

// twinServer is the twin's Server on port; its data directory does not
// depend on the port.
func (l *Lab) twinServer(port int) Server { return l.newServer(twinName, port) }

// startTwin creates the twin with initdb, as initPrimary creates the
// primary (the same superuser, password and authentication), and starts it.
func (l *Lab) startTwin(ctx context.Context, port int, password string) (*Server, error) {
	s := l.twinServer(port)
	pwfile := filepath.Join(l.RunDir, "pwfile-"+twinName)
	if err := l.writeFile(pwfile, password+"\n"); err != nil {
		return nil, err
	}
	defer os.Remove(pwfile)
	l.logf("initdb %s (the twin: a second, unrelated primary)", s.DataDir)
	if _, err := l.run(ctx, l.Bin.Initdb, "-D", s.DataDir, "-U", l.User, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	if err := l.writeServerConf(&s); err != nil {
		return nil, err
	}
	if err := l.startServer(ctx, &s); err != nil {
		return &s, err
	}
	return &s, nil
}

// Twin returns the lab's twin, or nil when no front door needs one.
func (l *Lab) Twin() *Server {
	if l.PgPool != nil && l.PgPool.Twin != nil {
		return l.PgPool.Twin
	}
	for i := range l.HAProxies {
		if t := l.HAProxies[i].Twin; t != nil {
			return t
		}
	}
	return nil
}

// TwinDSN is the twin over TCP, as the superuser; empty when the lab has no
// twin.
func (l *Lab) TwinDSN() string {
	if t := l.Twin(); t != nil {
		return l.DSN(t.Port, l.User, "postgres")
	}
	return ""
}

// stopTwin stops the twin, found by its data directory, and removes the
// shared memory a kill would leave.
func (l *Lab) stopTwin() []error {
	if l.RunDir == "" {
		return nil
	}
	s := l.twinServer(0)
	pid := ServerPID(&s)
	if pid == 0 {
		return []error{removeOrphanedShm(&s)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var errs []error
	if err := l.StopServer(ctx, &s, "fast"); err != nil {
		errs = append(errs, killAndWait(pid, syscall.SIGQUIT, 5*time.Second))
	}
	return append(errs, removeOrphanedShm(&s))
}

// twinAlive reports whether the twin's postmaster runs.
func (l *Lab) twinAlive() bool {
	if l.RunDir == "" {
		return false
	}
	s := l.twinServer(0)
	return ServerPID(&s) > 0
}

// twinStatus is the twin's Component, when the lab has one.
func (l *Lab) twinStatus() []Component {
	t := l.Twin()
	if t == nil {
		return nil
	}
	pid := ServerPID(t)
	return []Component{{Name: twinName, Kind: "postgres (unrelated primary)", Port: t.Port, PID: pid, Up: pid > 0 && dialOK(t.Port)}}
}

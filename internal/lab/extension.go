package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"time"
)

// An Extension is a part of a lab that package lab starts and stops
// without knowing what it is: the test front doors of test/labtest
// (pgpool-II, HAProxy, socat relays) are extensions, so that the leasectl
// binary carries none of them. A value serves one lab.
//
// Start calls Check for each extension before it starts anything, and the
// extension's Start, in the order of Options.Extensions, once the servers
// and poolers run. Status, Running, AddLogin and Stop include it; Stop
// stops the extensions first, the last started first, and calls Stop on
// an extension that was never started too. The lab saves each extension,
// marshalled as JSON, in lab.json under its name; a lab from Load knows
// that state only as ExtensionState until the extension is attached again
// (see [Lab.Attach]): until then Stop ends its processes by the final
// sweep of the run dir alone.
type Extension interface {
	// Name is its key in lab.json, unique among a lab's extensions.
	Name() string
	// Check refuses options it cannot work with, and finds its programs,
	// before Start starts anything; it returns how many loopback ports it
	// needs.
	Check(opts Options) (ports int, err error)
	// Start starts it for l on the ports Check asked for; password is the
	// superuser's. It must record each process as soon as it runs, so that
	// Stop ends it whatever happens next.
	Start(ctx context.Context, l *Lab, ports []int, password string) error
	// Status reports its processes, as Lab.Status does.
	Status() []Component
	// Alive reports whether any of its processes still runs.
	Alive() bool
	// Stop stops its processes and waits until they are gone.
	Stop() []error
	// AddLogin gives it the password of an extra login role (see
	// Lab.AddLogin).
	AddLogin(role, password string) error
}

// checkExtensions runs each extension's Check and returns the ports each
// needs.
func checkExtensions(opts Options) ([]int, error) {
	ports := make([]int, len(opts.Extensions))
	seen := map[string]bool{}
	for i, e := range opts.Extensions {
		if seen[e.Name()] {
			return nil, fmt.Errorf("lab options: two extensions are called %q", e.Name())
		}
		seen[e.Name()] = true
		n, err := e.Check(opts)
		if err != nil {
			return nil, err
		}
		ports[i] = n
	}
	return ports, nil
}

// startExtensions starts each extension on its share of ports.
func (l *Lab) startExtensions(ctx context.Context, counts, ports []int, password string) error {
	for i, e := range l.ext {
		if err := e.Start(ctx, l, ports[:counts[i]], password); err != nil {
			return err
		}
		ports = ports[counts[i]:]
	}
	return nil
}

// stopExtensions stops the extensions, the last started first.
func (l *Lab) stopExtensions() []error {
	var errs []error
	for i := len(l.ext) - 1; i >= 0; i-- {
		errs = append(errs, l.ext[i].Stop()...)
	}
	return errs
}

// saveExtensions records each attached extension's state in
// ExtensionState.
func (l *Lab) saveExtensions() error {
	for _, e := range l.ext {
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("save the state of %s: %w", e.Name(), err)
		}
		if l.ExtensionState == nil {
			l.ExtensionState = map[string]json.RawMessage{}
		}
		l.ExtensionState[e.Name()] = data
	}
	return nil
}

// Attach adds e, running already, to a lab from Load, so that Status,
// Running, AddLogin and Stop include it again. The caller restores e from
// ExtensionState[e.Name()] first.
func (l *Lab) Attach(e Extension) error {
	for _, x := range l.ext {
		if x.Name() == e.Name() {
			return fmt.Errorf("extension %s is attached already", e.Name())
		}
	}
	l.ext = append(l.ext, e)
	return nil
}

// ShutdownServer stops a server that an extension made with InitServer
// and StartServer: pg_ctl's fast mode, SIGQUIT when that fails, and then
// the shared memory segment that a killed postmaster leaves behind. A
// server that does not run is only cleaned up after.
func (l *Lab) ShutdownServer(s *Server) []error {
	pid := ServerPID(s)
	if pid == 0 {
		return []error{removeOrphanedShm(s)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var errs []error
	if err := l.StopServer(ctx, s, "fast"); err != nil {
		errs = append(errs, killAndWait(pid, syscall.SIGQUIT, 5*time.Second))
	}
	return append(errs, removeOrphanedShm(s))
}

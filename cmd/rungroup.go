package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/procfile"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/lease/leasehttp"
	"github.com/leasectl/leasectl/supervisor"
)

// groupRole is one line of the Procfile, resolved: its key from keys.yaml
// and its program's path.
type groupRole struct {
	procfile.Entry
	Key  int64
	Path string
}

// loadProcfile reads the Procfile and resolves each role through keys.yaml
// and each command on $PATH, before anything connects: every mistake is an
// input error naming the file and line.
func (o *runOptions) loadProcfile() ([]groupRole, error) {
	pf, err := procfile.Load(o.Procfile)
	if err != nil {
		return nil, &InputError{Err: err}
	}
	f, err := o.app.LoadKeys()
	if err != nil {
		return nil, err
	}
	roles := make([]groupRole, 0, len(pf.Entries))
	for _, e := range pf.Entries {
		where := fmt.Sprintf("%s:%d", pf.Path, e.Line)
		k, ok := f.Role(e.Role)
		if !ok {
			var list string
			if names := activeRoleNames(f); len(names) > 0 {
				list = " (it has " + strings.Join(names, ", ") + ")"
			}
			return nil, &InputError{Err: fmt.Errorf("%s: role %q is not in %s%s: add it there with a key of its own, or fix the name", where, e.Role, f.Path, list)}
		}
		path, err := exec.LookPath(e.Command[0])
		if err != nil {
			return nil, &InputError{Err: fmt.Errorf("%s: cannot run %q: %w (give a path or a program on $PATH; commands run without a shell)", where, e.Command[0], err)}
		}
		roles = append(roles, groupRole{Entry: e, Key: k.Key, Path: path})
	}
	return roles, nil
}

// procs passes a signal on to every running program of a group.
type procs []*supervisor.Command

func (ps procs) Signal(sig syscall.Signal) bool {
	sent := false
	for _, p := range ps {
		sent = p.Signal(sig) || sent
	}
	return sent
}

// runGroup is leasectl run --procfile: every role of the Procfile in this
// one process, over one lease session and one stop fence session.
func runGroup(ctx context.Context, opts *runOptions) error {
	app := opts.app
	if err := supervisor.Support(); err != nil {
		return &InputError{Err: fmt.Errorf("leasectl run: %w", err)}
	}
	roles, err := opts.loadProcfile()
	if err != nil {
		return err
	}
	name := filepath.Base(opts.Procfile)
	if app.OwnProcess {
		supervisor.SurviveBrokenPipes()
	}
	errOut := lockedWriter(app.IO.ErrOut)
	cfg := opts.leaseConfig(name)
	set := leasehttp.NewSet(leasehttp.HealthWindow(cfg, opts.Grace))
	// Every log record is a sign of life for /healthz, as in a single run.
	logger := slog.New(set.LogHandler(newRunLogger(dropFailedWrites(errOut), opts.LogFormat, app).Handler()))
	app.warn = func(msg string) { logger.Warn(msg) }
	connCfg, _, err := app.ConnConfig("")
	if err != nil {
		return err
	}
	app.warnNoDSN(connCfg)
	stopMetrics, err := opts.serveMetrics(set.Handler(), logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if app.OwnProcess {
		defer supervisor.ReapAsInit()()
	}
	// One obituary for every role, with a connection kept ready: the
	// next leaders of many roles wait for it.
	keys := make([]int64, len(roles))
	for i, r := range roles {
		keys[i] = r.Key
	}
	obit := opts.startObituary(connCfg.ConnString(), name, logger,
		supervisor.KeepConnection(cmp.Or(connCfg.RuntimeParams["application_name"], cfg.ApplicationName)),
		supervisor.ForKeys(keys...))
	if obit != nil {
		defer obit.Close()
	}
	g := lease.Group{Config: cfg, Name: name}
	var all procs
	for _, r := range roles {
		m := set.Add(r.Role, r.Key)
		proc := &supervisor.Command{
			Path: r.Path, Args: r.Command, Env: os.Environ(),
			Stdout: app.IO.Out, Stderr: errOut,
			Grace:     opts.Grace,
			Subreaper: app.OwnProcess,
			Logger:    logger.With("role", r.Role, "key", r.Key),
			OnStart:   m.OnStart,
			Obituary:  obit,
		}
		all = append(all, proc)
		role := r.Role
		again := supervisor.RestartPolicy{Restart: opts.Restart, Delay: opts.RetryInterval}.Again(func(err error, after time.Duration) {
			m.OnRestart(err, after)
			logger.Info("the program exited; --restart: standing by again", "role", role, "key", r.Key, "after", after)
		})
		g.Roles = append(g.Roles, lease.GroupRole{Role: r.Role, Key: r.Key, Work: proc.Work, Again: again})
	}
	g.ConnConfig = connCfg
	g.Logger = logger
	g.OnStateChange = set.OnStateChange
	g.OnHeartbeat = set.OnHeartbeat

	leaseCtx, stop := stopOnSignals(ctx, all, logger)
	defer stop()
	err = lease.RunGroup(leaseCtx, g)
	if leaseCtx.Err() != nil && errors.Is(err, context.Cause(leaseCtx)) {
		return nil
	}
	return err
}

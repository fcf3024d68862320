package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/procfile"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/lease/leaseapi"
	"github.com/leasectl/leasectl/lease/leasehttp"
	"github.com/spf13/cobra"
)

type serveOptions struct {
	app               *App
	Roles             []string
	Procfile          string
	Listen            string
	AppTTL            time.Duration
	RetryInterval     time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	Keep              int
	LogFormat         string
	MetricsAddr       string
}

// newServeCmd builds `leasectl serve`; runF, when not nil, runs instead of
// runServe with the parsed and checked options (tests).
func newServeCmd(app *App, runF func(*serveOptions) error) *cobra.Command {
	opts := &serveOptions{app: app}
	c := &cobra.Command{
		Use:   "serve (--role ROLE ... | --procfile FILE) [flags]",
		Short: "Hold leases for the application beside it, behind a local HTTP API",
		Long: `Hold the leases of the roles for the application beside it, in any
language, and answer its questions over a small local HTTP/JSON API: does
this replica lead, with which epoch and fencing token, and until when may it
assume so (valid_until). The leases are those of run --procfile: shared
sessions, the stop fence and the term record (leasectl fence init), whose
fencing token the application checks in its own transactions.

  GET  /v1/roles, /v1/roles/ROLE      the state of each role
  GET  /v1/roles/ROLE?epoch=E&wait=D  a blocking query: answers when the
                                      epoch differs from E, or after D
  GET  /v1/watch                      Server-Sent Events, one per change
  POST /v1/roles/ROLE/alive           the application checks in (--app-ttl)
  POST /v1/roles/ROLE/resign          step down now, then stand by again
  GET  /metrics, /healthz, /readyz    as run --metrics-addr serves them

--listen is unix:PATH (the default: leasectl-serve-NAME.sock in
$XDG_RUNTIME_DIR, else the temp dir, mode 0600) or HOST:PORT (127.0.0.1
when HOST is empty). --procfile takes the role names of a Procfile and runs
none of its commands: the application beside serve does the work.

The application must stop its work by valid_until unless a newer answer
extends it. serve keeps a lost term until the last valid_until it handed
out has passed, so that an application that obeys it has stopped before
the next leader begins; its late writes are refused by the fencing token.

Exit status: 0 when stopped (SIGINT, SIGTERM); 2 for bad input (unknown
role, address in use). An unreachable database is retried, as by run.
docs/serve.md has the API, the safety rules and clients in Python, Node,
Ruby and Go.`,
		Example: `  leasectl serve --role scheduler
  leasectl serve --procfile Procfile --listen 127.0.0.1:8765 --app-ttl 30s
  curl --unix-socket $XDG_RUNTIME_DIR/leasectl-serve-scheduler.sock http://serve/v1/roles/scheduler`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			opts.LogFormat = app.Global.Output
			if !c.Flags().Changed("heartbeat-timeout") {
				opts.HeartbeatTimeout = app.Global.Timeout
			}
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runServe(c.Context(), opts)
		},
	}
	f := c.Flags()
	f.StringArrayVar(&opts.Roles, "role", nil, "role whose lease to hold, from keys.yaml (repeat for more roles)")
	f.Var(&onceFlag{value: &opts.Procfile, why: "give one Procfile, with every role in it"}, "procfile", "hold the lease of every role of a Procfile (its commands are not run)")
	f.StringVar(&opts.Listen, "listen", "", "where to serve the API: unix:PATH or HOST:PORT (default: a socket leasectl-serve-NAME.sock in $XDG_RUNTIME_DIR)")
	f.DurationVar(&opts.AppTTL, "app-ttl", 0, "step down from a role whose application has not checked in (POST /v1/roles/ROLE/alive) for this long (0: never)")
	f.DurationVar(&opts.RetryInterval, "retry-interval", lease.DefaultRetryInterval, "longest wait between reconnect attempts")
	f.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", lease.DefaultHeartbeatInterval, "time between the leader's heartbeats (the proof of its hold, and the renewal of its term); valid_until reaches this plus --heartbeat-timeout ahead")
	f.DurationVar(&opts.HeartbeatTimeout, "heartbeat-timeout", 0, "time limit of each heartbeat (default: --timeout)")
	f.IntVar(&opts.Keep, "keep", lease.DefaultHistoryKeep, "terms of each role's history to keep in the database (leasectl history); older ones are deleted")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", "", "also serve /metrics, /healthz and /readyz (not the API) at ADDR, e.g. :9464 for a kubelet's probes")
	_ = c.RegisterFlagCompletionFunc("role", completeOneRole(app))
	_ = c.MarkFlagFilename("procfile")
	return c
}

func (o *serveOptions) validate() error {
	switch {
	case o.Procfile != "" && len(o.Roles) > 0:
		return usageErrorf("give either --procfile FILE or --role ROLE, not both: the Procfile names the roles")
	case o.Procfile == "" && len(o.Roles) == 0:
		return usageErrorf("give the roles to hold: --role ROLE (repeatable, from keys.yaml) or --procfile FILE")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--retry-interval", o.RetryInterval}, {"--heartbeat-interval", o.HeartbeatInterval}, {"--heartbeat-timeout", o.HeartbeatTimeout}} {
		if d.v <= 0 {
			return usageErrorf("invalid %s %s: it must be positive, e.g. 5s", d.name, d.v)
		}
	}
	if o.AppTTL < 0 {
		return usageErrorf("invalid --app-ttl %s: it must not be negative (0 turns it off)", o.AppTTL)
	}
	if o.Keep < 1 {
		return usageErrorf("invalid --keep %d: keep at least 1 term", o.Keep)
	}
	return nil
}

// serveRole is one role to hold, resolved through keys.yaml.
type serveRole struct {
	Role string
	Key  int64
}

// resolveRoles reads the roles from --role or the Procfile and finds their
// keys, before anything connects; it also names the group.
func (o *serveOptions) resolveRoles() (name string, roles []serveRole, err error) {
	names := o.Roles
	if o.Procfile != "" {
		pf, err := procfile.Load(o.Procfile)
		if err != nil {
			return "", nil, &InputError{Err: err}
		}
		names, name = pf.Roles(), filepath.Base(o.Procfile)
	}
	f, err := o.app.LoadKeys()
	if err != nil {
		return "", nil, err
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return "", nil, usageErrorf("role %s is given twice", n)
		}
		seen[n] = true
		rk, err := resolveRole(f, n, rolesOnly, "hold")
		if err != nil {
			return "", nil, err
		}
		roles = append(roles, serveRole{Role: rk.Role, Key: rk.Key.ID})
	}
	if name == "" {
		name = strings.Join(names, "+")
	}
	return name, roles, nil
}

// runServe is leasectl serve: the roles' leases over one lease session
// and one stop fence session, and the API on --listen.
func runServe(ctx context.Context, opts *serveOptions) error {
	app := opts.app
	name, roles, err := opts.resolveRoles()
	if err != nil {
		return err
	}
	errOut := lockedWriter(app.IO.ErrOut)
	cfg := lease.Config{
		RetryInterval:     opts.RetryInterval,
		HeartbeatInterval: opts.HeartbeatInterval,
		HeartbeatTimeout:  opts.HeartbeatTimeout,
		HistoryKeep:       opts.Keep,
		// The fencing token is what the application's writes rest on.
		Fencing:         true,
		ApplicationName: lease.DefaultApplicationName("leasectl serve", name),
	}
	// A role's work waits for the last valid_until it handed out.
	cfg.StopTimeout = leaseapi.StopTimeout(opts.HeartbeatInterval, opts.HeartbeatTimeout)
	set := leasehttp.NewSet(leasehttp.HealthWindow(cfg, cfg.StopTimeout))
	logger := slog.New(set.LogHandler(newRunLogger(dropFailedWrites(errOut), opts.LogFormat, app).Handler()))
	app.warn = func(msg string) { logger.Warn(msg) }
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.Role
	}
	api := leaseapi.New(leaseapi.Options{
		Roles:             names,
		HeartbeatInterval: opts.HeartbeatInterval,
		HeartbeatTimeout:  opts.HeartbeatTimeout,
		AppTTL:            opts.AppTTL,
		Logger:            logger,
	})
	connCfg, _, err := app.ConnConfig("")
	if err != nil {
		return err
	}
	app.warnNoDSN(connCfg)

	stopMetrics, err := (&runOptions{app: app, MetricsAddr: opts.MetricsAddr}).serveMetrics(set.Handler(), logger)
	if err != nil {
		return err
	}
	defer stopMetrics()

	addr := opts.Listen
	if addr == "" {
		addr = "unix:" + leaseapi.DefaultSocket(name)
	}
	ln, shown, err := leaseapi.Listen(addr)
	if err != nil {
		return &InputError{Err: fmt.Errorf("leasectl serve: %w", err)}
	}
	srv := &http.Server{Handler: api.Handler(set.Handler()), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close() // watchers and blocking queries end with the process
		<-served
	}()
	logger.Info("serving the API", "listen", shown, "roles", strings.Join(names, ","))

	g := lease.Group{Config: cfg, Name: name}
	for _, r := range roles {
		set.Add(r.Role, r.Key)
		g.Roles = append(g.Roles, api.GroupRole(r.Role, r.Key))
	}
	g.ConnConfig = connCfg
	g.Logger = logger
	g.OnStateChange = set.OnStateChange
	g.OnHeartbeat = func(at time.Time) {
		set.OnHeartbeat(at)
		api.OnHeartbeat(at)
	}
	leaseCtx, stop := stopOnSignals(ctx, noPrograms{}, logger)
	defer stop()
	err = lease.RunGroup(leaseCtx, g)
	if leaseCtx.Err() != nil && errors.Is(err, context.Cause(leaseCtx)) {
		return nil
	}
	return err
}

// noPrograms is the signaler of serve, which runs no program.
type noPrograms struct{}

func (noPrograms) Signal(syscall.Signal) bool { return false }

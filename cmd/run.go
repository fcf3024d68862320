package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/lease/leasehttp"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/spf13/cobra"
)

type runOptions struct {
	app               *App
	Role              string
	Key               *int64 // --key; nil: not given
	Grace             time.Duration
	Restart           bool
	RetryInterval     time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	TakeoverDelay     time.Duration
	Keep              int
	Fence             bool
	LogFormat         string
	MetricsAddr       string
	Procfile          string
	Command           []string

	keyFlag keyFlag
}

// newRunCmd builds `leasectl run`; runF, when not nil, runs instead of
// runRun with the parsed and checked options (tests).
func newRunCmd(app *App, runF func(*runOptions) error) *cobra.Command {
	opts := &runOptions{app: app}
	c := &cobra.Command{
		Use:   "run (--role ROLE | --procfile FILE) [flags] [-- CMD [ARGS...]]",
		Short: "Run a command only while this replica holds the role's lease",
		Long: `Run CMD only while this replica holds the role's lease: a session-level
advisory lock on the role's key from keys.yaml (or --key). Run one on every
replica; the others stand by and take over within milliseconds.

Before CMD starts, leasectl checks that the server is a primary and that the
DSN keeps sessions (the probe), takes the role's stop fence and begins a
term in the schema leasectl. CMD runs without a shell, with LEASECTL_ROLE,
LEASECTL_EPOCH and LEASECTL_FENCE_TOKEN set (see leasectl fence init).

Lease lost or asked to step down (leasectl failover): CMD's tree gets
SIGTERM, SIGKILL after --grace, and leasectl stands by again. SIGINT or
SIGTERM: the same, then leasectl exits. CMD exits: leasectl exits with its
status (--restart: runs it again).

--procfile FILE runs every role of a Procfile (ROLE: COMMAND ARGS... per
line) in this one process over shared sessions; the replicas spread the
roles among themselves.

Exit status: CMD's own; 0 when stopped while standing by; 2 for bad input.
How it works, the environment, metrics, health checks and the timing rules:
docs/guide/run.md.`,
		Example: `  leasectl run --role poller -- ./poller --batch 100
  leasectl run --procfile Procfile --metrics-addr :9464
  leasectl run --role scheduler -o json --metrics-addr :9464 -- ./scheduler
  leasectl run --key 1840000042 --restart -- python3 sweep.py`,
		Args: func(c *cobra.Command, args []string) error {
			if opts.Procfile != "" {
				if len(args) > 0 {
					return usageErrorf("--procfile runs the commands of the Procfile: give no command after it (found %q)", strings.Join(args, " "))
				}
				return nil
			}
			if len(args) == 0 {
				return usageErrorf("%q needs a command to run after --, e.g. leasectl run --role poller -- ./poller", c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			opts.Command = args
			if opts.keyFlag.set {
				opts.Key = &opts.keyFlag.key.ID
			}
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
			if opts.Procfile != "" {
				return runGroup(c.Context(), opts)
			}
			return runRun(c.Context(), opts)
		},
	}
	f := c.Flags()
	f.SetInterspersed(false) // everything from CMD on belongs to CMD, with or without --
	f.Var(&onceFlag{value: &opts.Role, why: "one run holds one role; list several roles in a Procfile and give --procfile"}, "role", "role whose lease to hold, from keys.yaml")
	f.Var(&onceFlag{value: &opts.Procfile, why: "give one Procfile, with every role in it"}, "procfile", "run every role of a Procfile (ROLE: COMMAND ARGS... per line) in this one process, over shared sessions")
	opts.keyFlag = keyFlag{noPairWhy: "a lease holds a bigint key (its stop fence is the two-int4 form of the same 64 bits): give one 64-bit integer"}
	f.Var(&opts.keyFlag, "key", "advisory key to hold instead of a role's, in decimal or 0x hex")
	f.DurationVar(&opts.Grace, "grace", lease.DefaultStopTimeout, "time CMD and what it started have after the first signal before SIGKILL")
	f.BoolVar(&opts.Restart, "restart", false, "when CMD exits, release the lease, stand by and run it again instead of exiting")
	f.DurationVar(&opts.RetryInterval, "retry-interval", lease.DefaultRetryInterval, "longest wait between reconnect attempts")
	f.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", lease.DefaultHeartbeatInterval, "time between the leader's heartbeats (the proof of its hold, and the renewal of its term)")
	f.DurationVar(&opts.HeartbeatTimeout, "heartbeat-timeout", 0, "time limit of each heartbeat (default: --timeout)")
	f.DurationVar(&opts.TakeoverDelay, "takeover-delay", 0, "hold the lease this long before starting CMD: a quiet period between leaders for systems outside the database (the fence and the term already wait for the old CMD)")
	f.BoolVar(&opts.Fence, "fence", false, "lead only with the term record, whose fencing token CMD checks in its own transactions (LEASECTL_FENCE_TOKEN; see leasectl fence init)")
	f.IntVar(&opts.Keep, "keep", lease.DefaultHistoryKeep, "terms of the role's history to keep in the database (leasectl history); older ones are deleted")
	f.String("log-format", "text", "log format on stderr: text or json")
	deprecatedAlias(f, "log-format", "output")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, and /healthz and /readyz for probes, e.g. 127.0.0.1:9464")
	_ = c.RegisterFlagCompletionFunc("role", completeOneRole(app))
	_ = c.MarkFlagFilename("procfile")
	return c
}

// signaler passes a signal on to the running programs.
type signaler interface{ Signal(sig syscall.Signal) bool }

// errStopped is the cause of the lease's context when leasectl was told to
// stop.
var errStopped = errors.New("leasectl run was told to stop")

func runRun(ctx context.Context, opts *runOptions) error {
	app := opts.app
	if err := supervisor.Support(); err != nil {
		return &InputError{Err: fmt.Errorf("leasectl run: %w", err)}
	}
	role, key, err := opts.roleKey()
	if err != nil {
		return err
	}
	path, err := exec.LookPath(opts.Command[0])
	if err != nil {
		return &InputError{Err: fmt.Errorf("cannot run %q: %w (give a path or a program on $PATH; CMD runs without a shell)", opts.Command[0], err)}
	}
	if app.OwnProcess {
		supervisor.SurviveBrokenPipes()
	}
	errOut := lockedWriter(app.IO.ErrOut)
	cfg := opts.leaseConfig(roleName(role, key))
	cfg.Role, cfg.Key = role, key
	metrics := leasehttp.New(role, key, leasehttp.HealthWindow(cfg, opts.Grace))
	// Every log record of the lease and the program is a sign of life for
	// /healthz: while the database is down, the retries only log.
	logger := slog.New(metrics.LogHandler(newRunLogger(dropFailedWrites(errOut), opts.LogFormat, app).Handler()))
	// Warnings (a password on the command line) are log records too, in
	// the log's format (-o).
	app.warn = func(msg string) { logger.Warn(msg) }
	connCfg, _, err := app.ConnConfig("")
	if err != nil {
		return err
	}
	app.warnNoDSN(connCfg)
	stopMetrics, err := opts.serveMetrics(metrics.Handler(), logger)
	if err != nil {
		return err
	}
	defer stopMetrics()

	if app.OwnProcess {
		// As a container's PID 1, every orphan in the container is ours
		// to reap, on a stand-by too.
		defer supervisor.ReapAsInit()()
	}
	proc := &supervisor.Command{
		Path: path, Args: opts.Command, Env: os.Environ(),
		Stdout: app.IO.Out, Stderr: errOut,
		Grace: opts.Grace,
		// Orphaned descendants (daemons) become leasectl's children, so
		// that they are stopped before the key is released.
		Subreaper: app.OwnProcess,
		Logger:    logger.With("role", roleName(role, key), "key", key),
		OnStart:   metrics.OnStart,
	}
	// The obituary keeps a connection ready, as for a group: the next
	// leader waits for it to record the end of the term.
	if obit := opts.startObituary(connCfg.ConnString(), roleName(role, key), logger,
		supervisor.KeepConnection(cmp.Or(connCfg.RuntimeParams["application_name"], cfg.ApplicationName)),
		supervisor.ForKeys(key)); obit != nil {
		proc.Obituary = obit
		defer obit.Close()
	}
	if !app.IO.InTTY {
		// In its own process group CMD cannot read a terminal (SIGTTIN).
		proc.Stdin = app.IO.In
	}
	cfg.ConnConfig = connCfg
	cfg.Logger = logger
	cfg.OnStateChange = metrics.OnStateChange
	cfg.OnHeartbeat = metrics.OnHeartbeat

	leaseCtx, stop := stopOnSignals(ctx, proc, logger)
	defer stop()
	err = supervisor.Run(leaseCtx, cfg, proc.Work, supervisor.RestartPolicy{
		Restart: opts.Restart,
		Delay:   opts.RetryInterval,
		OnRestart: func(err error, after time.Duration) {
			metrics.OnRestart(err, after)
			logger.Info("the program exited; --restart: standing by again", "role", roleName(role, key), "key", key, "after", after)
		},
	})
	if leaseCtx.Err() != nil && errors.Is(err, context.Cause(leaseCtx)) {
		return nil // stopped while standing by
	}
	return err
}

// leaseConfig is the lease configuration the run flags give, for a lease
// (or group) whose sessions are named "leasectl run NAME@HOST#PID".
func (o *runOptions) leaseConfig(name string) lease.Config {
	return lease.Config{
		RetryInterval:     o.RetryInterval,
		HeartbeatInterval: o.HeartbeatInterval,
		HeartbeatTimeout:  o.HeartbeatTimeout,
		// The program's stop takes up to --grace, then SIGKILL and reaping.
		StopTimeout:     timing.CommandStop(o.Grace),
		TakeoverDelay:   o.TakeoverDelay,
		HistoryKeep:     o.Keep,
		Fencing:         o.Fence,
		ApplicationName: lease.DefaultApplicationName("leasectl run", name),
	}
}

// serveMetrics serves h at --metrics-addr, when given.
func (o *runOptions) serveMetrics(h http.Handler, logger *slog.Logger) (stop func(), err error) {
	if o.MetricsAddr == "" {
		return func() {}, nil
	}
	stop, err = leasehttp.Serve(o.MetricsAddr, h, logger)
	if err != nil {
		return nil, &InputError{Err: fmt.Errorf("cannot serve metrics on --metrics-addr %s: %w", o.MetricsAddr, err)}
	}
	return stop, nil
}

// startObituary starts the obituary, which records the ends of this
// process's terms should it be killed (SIGKILL), once its programs are
// gone: the next leaders then need not wait for the terms' deadlines. Nil
// (and a warning) when there can be none.
func (o *runOptions) startObituary(connString, name string, logger *slog.Logger, opts ...supervisor.ObituaryOption) *supervisor.Obituary {
	if !o.app.OwnProcess || supervisor.Support() != nil {
		return nil
	}
	const warn = "no obituary process: if leasectl is killed, the next leader waits for the term's deadline"
	self, err := os.Executable()
	if err != nil {
		logger.Warn(warn, "err", err.Error())
		return nil
	}
	obit, err := supervisor.StartObituary(self, nil, connString, name, o.LogFormat, opts...)
	if err != nil {
		logger.Warn(warn, "err", err.Error())
		return nil
	}
	return obit
}

// roleName is how the lease names itself: the role, else "key N".
func roleName(role string, key int64) string {
	return locks.RoleName(role, locks.BigintKey(key))
}

func (o *runOptions) validate() error {
	switch {
	case o.Procfile != "" && (o.Role != "" || o.Key != nil):
		return usageErrorf("give either --procfile FILE or --role ROLE (or --key N), not both: the Procfile names the roles")
	case o.Procfile != "":
	case (o.Role == "") == (o.Key == nil):
		return usageErrorf("give exactly one of --role ROLE (from keys.yaml), --key N or --procfile FILE")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--grace", o.Grace}, {"--retry-interval", o.RetryInterval}, {"--heartbeat-interval", o.HeartbeatInterval}, {"--heartbeat-timeout", o.HeartbeatTimeout}} {
		if d.v <= 0 {
			return usageErrorf("invalid %s %s: it must be positive, e.g. 5s", d.name, d.v)
		}
	}
	if o.TakeoverDelay < 0 {
		return usageErrorf("invalid --takeover-delay %s: it must not be negative", o.TakeoverDelay)
	}
	if o.Keep < 1 {
		return usageErrorf("invalid --keep %d: keep at least 1 term", o.Keep)
	}
	return nil
}

// roleKey resolves --role through keys.yaml (resolveRole), or takes --key
// as it is.
func (o *runOptions) roleKey() (string, int64, error) {
	if o.Key != nil {
		return "", *o.Key, nil
	}
	f, err := o.app.LoadKeys()
	if err != nil {
		return "", 0, err
	}
	rk, err := resolveRole(f, o.Role, keysByFlag, "hold")
	if err != nil {
		return "", 0, err
	}
	return rk.Role, rk.Key.ID, nil
}

// stopOnSignals returns the lease's context and a function that ends it.
// The first SIGINT or SIGTERM ends the lease's context with a
// supervisor.StopSignal cause, which the running program gets (Command.Work
// passes it on); a later one is forwarded to the program at once. Ending
// the context before the program is signalled makes the outcome the same
// every time: the program's exit is a stop, never an exit by itself that
// --restart would restart. ctx ending without a signal (a caller's cancel)
// stops the lease as well. leasectl's own signal handling also cancels
// ctx, but without saying which signal, so the lease's context is detached
// from ctx and this handler decides.
func stopOnSignals(ctx context.Context, proc signaler, logger *slog.Logger) (context.Context, func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	leaseCtx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	if ctx.Err() != nil { // a signal that came before Notify
		stop(errStopped)
	}
	done := make(chan struct{})
	go func() {
		parent := ctx.Done()
		for {
			select {
			case s := <-sigs:
				sig := s.(syscall.Signal)
				logger.Info("signal received; stopping", "signal", sig.String())
				cause := &supervisor.StopSignal{Signal: sig, Err: errStopped}
				stop(cause)
				if context.Cause(leaseCtx) != error(cause) {
					// Stopping already: the program, if it runs, has
					// had its signal; pass this one on too.
					proc.Signal(sig)
				}
			case <-parent:
				if c := context.Cause(ctx); c == context.Canceled || c == context.DeadlineExceeded {
					stop(c)
				}
				parent = nil // a signal: it arrives on sigs as well
			case <-done:
				return
			}
		}
	}()
	return leaseCtx, func() {
		signal.Stop(sigs)
		close(done)
		stop(nil)
	}
}

func newRunLogger(w io.Writer, format string, app *App) *slog.Logger {
	if format == "text" && app.IO.ErrTTY {
		return slog.New(newTermLogHandler(w, !app.Global.NoColor && app.Getenv("NO_COLOR") == "" && app.Getenv("TERM") != "dumb"))
	}
	if format == "json" {
		h := slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: jsonLogAttr})
		return slog.New(h).With("schema_version", schemaVersion)
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// jsonLogAttr applies the JSON convention (docs/json.md) to a JSON log
// line: a key (an attribute named key or ending in _key) is a string, and
// a duration is a number of milliseconds named NAME_ms. Text logs keep
// 1840000001 and 1.5s.
func jsonLogAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch v := a.Value; {
	case v.Kind() == slog.KindDuration:
		return slog.Float64(a.Key+"_ms", msOf(v.Duration()))
	case (a.Key == "key" || strings.HasSuffix(a.Key, "_key")) && (v.Kind() == slog.KindInt64 || v.Kind() == slog.KindUint64):
		return slog.String(a.Key, v.String())
	}
	return a
}

// dropFailedWrites makes every write of a log line succeed: stderr may be
// a pipe whose reader has gone (leasectl run ... | head), and a log line
// that cannot be written is no reason to stop leading. Once the reader has
// gone (EPIPE), it writes nothing more.
func dropFailedWrites(w io.Writer) io.Writer { return &dropWriter{w: w} }

type dropWriter struct {
	w      io.Writer
	broken atomic.Bool
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if !d.broken.Load() {
		if _, err := d.w.Write(p); errors.Is(err, syscall.EPIPE) {
			d.broken.Store(true)
		}
	}
	return len(p), nil
}

// lockedWriter serializes writes: the logger and the program's stderr copier
// share stderr, which in tests is a buffer.
func lockedWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f // the program writes to the file itself
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/spf13/cobra"
)

// GlobalOptions are the flags every command accepts.
type GlobalOptions struct {
	DSN      string
	Keys     string
	Output   string
	NoColor  bool
	Timeout  time.Duration
	dsnGiven bool
}

// App is what every command gets: its streams, its environment and the
// global options. Tests build one with buffers and a fake environment.
type App struct {
	IO     *IOStreams
	Getenv func(string) string
	Global GlobalOptions
	// args is the command line, as Run was given it.
	args []string
	// OwnProcess says leasectl is the whole process (not a test driving a
	// command in-process): `leasectl run` then makes the process a child
	// subreaper, which changes how the process's orphans are reparented.
	OwnProcess bool
	// warn prints a warning: a "Warning:" line on stderr, or a log record
	// where the command logs (leasectl run).
	warn func(msg string)
	// passwordWarned: the warning about a password on the command line
	// was given (once per invocation).
	passwordWarned bool
}

// passwordOnCommandLine is the warning for a DSN with a password given as
// an argument or flag: every user of the machine can read the command line.
const passwordOnCommandLine = "a DSN on the command line holds a password, which other users of this machine can read in the process list (ps); " +
	"put the password in a pgpass file (PGPASSFILE) or PGPASSWORD, or the DSN in LEASECTL_DSN"

// warnPassword warns, once, when dsn, given on the command line, holds a
// password. A DSN from the environment is not shown by ps.
func (a *App) warnPassword(dsn string) {
	if a.passwordWarned || !dbconn.HasPassword(dsn) {
		return
	}
	a.passwordWarned = true
	if a.warn != nil {
		a.warn(passwordOnCommandLine)
		return
	}
	fmt.Fprintln(a.IO.ErrOut, "warning: "+passwordOnCommandLine)
}

// NewApp returns an App for the real process.
func NewApp() *App {
	return &App{IO: SystemStreams(), Getenv: os.Getenv, OwnProcess: true}
}

// Execute runs leasectl with args and returns the process exit code. Ctrl-C
// and SIGTERM cancel the command's context.
func Execute(args []string) int {
	if supervisor.IsObituary() {
		// Started by leasectl run to outlive it (supervisor.StartObituary).
		return supervisor.ServeObituary()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, NewApp(), args)
}

// Run executes the command line args with app and returns the exit code.
func Run(ctx context.Context, app *App, args []string) int {
	return runTree(ctx, app, NewRootCmd(app), args)
}

// runTree executes args with root, a tree NewRootCmd built for app (tests
// put commands with their own runF in it), and returns the exit code.
func runTree(ctx context.Context, app *App, root *cobra.Command, args []string) int {
	if args == nil {
		args = []string{} // cobra would read os.Args
	}
	app.args = args
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	if err != nil {
		var connErr *dbconn.ConnectError
		var first *dbconn.FirstStatementError
		if errors.As(err, &first) && ctx.Err() == nil {
			// A pooler that cannot reach its server keeps the first
			// statement waiting, or says so: ask it again.
			if why := dbconn.UnreachableBehind(ctx, first.Config, first.Err, app.Global.Timeout); why != nil {
				err = why
			}
		}
		if errors.As(err, &connErr) && connErr.TimedOut() {
			err = fmt.Errorf("%w; raise --timeout (now %s) if the network is slow", err, app.Global.Timeout)
		} else if errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &connErr) && ctx.Err() == nil {
			// Connected, then a statement got no answer in time.
			err = fmt.Errorf("%w (no answer within --timeout %s: a pooler with no free server connection, or an overloaded server? raise --timeout)", err, app.Global.Timeout)
		}
		err = withFlagHints(app, c, err)
		if wantsAnnotations(c, app, args) {
			// keys lint|diff -o github-actions: the error as
			// annotations, which the pull request shows.
			writeErrorAnnotations(ctx, app.IO.Out, app, c, err)
			printUsageHint(app.IO.ErrOut, c, err)
		} else {
			printError(app.IO.ErrOut, c, err)
		}
	}
	return ExitCode(err)
}

// NewRootCmd builds the command tree.
func NewRootCmd(app *App) *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:   "leasectl",
		Short: "Check, inspect and run PostgreSQL advisory-lock leases",
		Long: `leasectl is the operations tool for leader-only workers that elect a leader
with a PostgreSQL session-level advisory lock: every replica calls
pg_try_advisory_lock(key) on a stable 64-bit key per role, one wins, the
rest stand by, and the lock dies with its connection, which is the failover.

Behind a transaction-mode pooler there is no stable session and two replicas
both win. leasectl probes a DSN for that trap, shows who holds each role's
key, checks the role→key map in CI, forces failovers, and runs workers only
while they hold the lease.`,
		Example: `  leasectl probe "$DATABASE_URL"          # is a lease safe over this DSN?
  leasectl who poller                      # who leads the poller role right now
  leasectl run --role poller -- ./poller   # run ./poller only while leading
  leasectl lab up && eval "$(leasectl lab env)"   # a throwaway PostgreSQL + PgBouncer`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		// Arguments are checked: an unknown command is a usage error.
		Args: noArgs,
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			if err := settleDeprecated(app, c); err != nil {
				return err
			}
			if err := checkOutput(c, app.Global.Output); err != nil {
				return err
			}
			if err := checkEmptyDSNFlags(c); err != nil {
				return err
			}
			if app.Global.Timeout <= 0 {
				return usageErrorf("invalid --timeout %s: it must be positive, e.g. 5s", app.Global.Timeout)
			}
			app.Global.dsnGiven = c.Flags().Changed("dsn")
			return nil
		},
		// Runnable for --version, which honours -o json (cobra's own
		// version flag prints a template and ignores -o).
		RunE: func(c *cobra.Command, _ []string) error {
			if showVersion {
				return renderVersion(app, true)
			}
			return c.Help()
		},
	}
	root.Flags().BoolVar(&showVersion, "version", false, "print leasectl's version on one line (-o json: as JSON; leasectl version shows more)")
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.StringVar(&app.Global.DSN, "dsn", "", "PostgreSQL DSN (else $LEASECTL_DSN, $DATABASE_URL, then libpq's PG* variables, pgpass and service files)")
	pf.StringVar(&app.Global.Keys, "keys", "", "role→key map (else $LEASECTL_KEYS, else ./keys.yaml)")
	pf.StringVarP(&app.Global.Output, "output", "o", "text", "output format: text or json (who: also wide; keys lint and keys diff: also github-actions; run: its log on stderr)")
	pf.BoolVar(&app.Global.NoColor, "no-color", false, "plain output without colours (also when $NO_COLOR is set or stdout is not a terminal)")
	pf.DurationVar(&app.Global.Timeout, "timeout", timing.DefaultTimeout, "time limit for connecting and for each database step")
	_ = root.RegisterFlagCompletionFunc("output", func(c *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return outputs(c), cobra.ShellCompDirectiveNoFileComp
	})
	_ = root.MarkPersistentFlagFilename("keys", "yaml", "yml")

	// Groups, in the order an operator meets them, as gh and kubectl do.
	groups := []struct {
		group *cobra.Group
		cmds  []*cobra.Command
	}{
		{&cobra.Group{ID: "check", Title: "Check a deployment:"}, []*cobra.Command{newProbeCmd(app, nil), newWhoCmd(app, nil), newHistoryCmd(app, nil), newVerifyCmd(app, nil)}},
		{&cobra.Group{ID: "act", Title: "Run and move leases:"}, []*cobra.Command{newRunCmd(app, nil), newServeCmd(app, nil), newFailoverCmd(app, nil)}},
		{&cobra.Group{ID: "config", Title: "Keys and tools:"}, []*cobra.Command{newKeysCmd(app), newFenceCmd(app), newLabCmd(app, nil), newVersionCmd(app)}},
	}
	for _, g := range groups {
		root.AddGroup(g.group)
		for _, c := range g.cmds {
			c.GroupID = g.group.ID
			root.AddCommand(c)
		}
	}
	root.SetHelpCommandGroupID("config")
	root.SetCompletionCommandGroupID("config")
	// Before the built-in commands are made: completion's scripts take
	// their writer when it is created.
	root.SetIn(app.IO.In)
	root.SetOut(app.IO.Out)
	root.SetErr(app.IO.ErrOut)
	strictBuiltins(root)
	describeCompletion(root)
	completeNoFilesForFlags(root)
	setHelpWidth(app, root)
	return root
}

// strictBuiltins makes cobra's own help and completion commands treat an
// unknown topic or shell as the usage error it is (exit 2): by default
// `leasectl help bogus` and `leasectl completion bogus` print help and exit 0,
// which hides a typo in a script.
func strictBuiltins(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Args = func(c *cobra.Command, args []string) error {
				if found, rest, err := c.Root().Find(args); found == nil || err != nil || len(rest) > 0 {
					return usageErrorf("unknown help topic %q: run leasectl --help for the commands", strings.Join(args, " "))
				}
				return nil
			}
		case "completion":
			// Scripts only: -o json would be silently ignored.
			setOutputs(c, formatText)
			for _, shell := range c.Commands() {
				shell.Args = noArgs
			}
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unknown shell %q for %q: use bash, zsh, fish or powershell", args[0], c.CommandPath())
				}
				return nil
			}
			c.RunE = func(c *cobra.Command, _ []string) error {
				return usageErrorf("%q needs a shell: bash, zsh, fish or powershell", c.CommandPath())
			}
		}
	}
}

// DSN returns the DSN to use and where it came from. arg is a DSN given as a
// positional argument, which wins over everything else.
func (a *App) DSN(arg string) (dsn, source string) {
	switch {
	case arg != "":
		return arg, "argument"
	case a.Global.dsnGiven || a.Global.DSN != "":
		return a.Global.DSN, "--dsn"
	case a.Getenv("LEASECTL_DSN") != "":
		return a.Getenv("LEASECTL_DSN"), "LEASECTL_DSN"
	case a.Getenv("DATABASE_URL") != "":
		return a.Getenv("DATABASE_URL"), "DATABASE_URL"
	default:
		return "", "PG* environment"
	}
}

// ConnConfig parses the DSN that [App.DSN] resolves, with --timeout.
func (a *App) ConnConfig(arg string) (*pgx.ConnConfig, string, error) {
	dsn, source := a.DSN(arg)
	if source == "argument" || source == "--dsn" {
		a.warnPassword(dsn)
	}
	cfg, err := dbconn.Parse(dsn, a.Global.Timeout)
	if err != nil {
		return nil, dsn, fmt.Errorf("%w; the DSN came from %s", err, dsnSourceDesc(source))
	}
	return cfg, dsn, nil
}

func dsnSourceDesc(source string) string {
	switch source {
	case "argument":
		return "the command line argument"
	case "--dsn":
		return "--dsn"
	case "PG* environment":
		return "libpq's PG* environment variables (no --dsn, LEASECTL_DSN or DATABASE_URL was set)"
	default:
		return "$" + source
	}
}

// Connect opens one connection to the resolved DSN within --timeout.
func (a *App) Connect(ctx context.Context, arg string) (*pgx.Conn, error) {
	cfg, _, err := a.ConnConfig(arg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.Global.Timeout)
	defer cancel()
	stop := a.waiting(fmt.Sprintf("connecting to %s (up to %s)", connTarget(cfg), a.Global.Timeout))
	conn, err := dbconn.Connect(ctx, cfg)
	stop()
	if err != nil {
		a.noDSNHint(arg, err)
	}
	return conn, err
}

// connTarget names where cfg connects, without credentials.
func connTarget(cfg *pgx.ConnConfig) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// pgConnVars are libpq's variables that say where to connect.
var pgConnVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGSERVICEFILE"}

// noDSNHint says, on a failed connect, that no DSN was given anywhere,
// where leasectl looked, and what it tried instead: the user did not ask
// for libpq's default socket, and a hint about the DSN's host= would
// mislead.
func (a *App) noDSNHint(arg string, err error) {
	var ce *dbconn.ConnectError
	if a.noDSNGiven(arg) && errors.As(err, &ce) {
		ce.SetHint(noDSN + ", and tried libpq's default, the local server; give the database with --dsn or LEASECTL_DSN")
	}
}

const noDSN = "no DSN was given: leasectl looked for --dsn, $LEASECTL_DSN, $DATABASE_URL and libpq's PG* variables, found none"

// noDSNGiven says that neither arg nor any of the places leasectl reads a
// DSN from names a database: it connects to libpq's default.
func (a *App) noDSNGiven(arg string) bool {
	if _, source := a.DSN(arg); source != "PG* environment" {
		return false
	}
	for _, v := range pgConnVars {
		if a.Getenv(v) != "" {
			return false
		}
	}
	return true
}

// warnNoDSN warns, for a command that retries its connects (run), that no
// DSN was given: each retry's error then names only libpq's default.
func (a *App) warnNoDSN(cfg *pgx.ConnConfig) {
	if a.noDSNGiven("") {
		a.warn(fmt.Sprintf("%s; connecting to libpq's default, the local server at %s (give the database with --dsn or LEASECTL_DSN)", noDSN, connTarget(cfg)))
	}
}

// KeysPath returns the keys file to use: --keys, $LEASECTL_KEYS, ./keys.yaml.
func (a *App) KeysPath() string {
	switch {
	case a.Global.Keys != "":
		return a.Global.Keys
	case a.Getenv("LEASECTL_KEYS") != "":
		return a.Getenv("LEASECTL_KEYS")
	default:
		return "keys.yaml"
	}
}

// LoadKeys reads the keys file.
func (a *App) LoadKeys() (*keys.File, error) {
	return keys.Load(a.KeysPath())
}

// JSON reports whether -o json was asked for.
func (a *App) JSON() bool { return a.Global.Output == "json" }

// Color reports whether output to stdout may use colours and styles.
func (a *App) Color() bool {
	return a.IO.OutTTY && !a.Global.NoColor && a.Getenv("NO_COLOR") == "" && a.Getenv("TERM") != "dumb"
}

// noArgs is a cobra.PositionalArgs that accepts none, as a usage error; for a
// command with subcommands, an argument is an unknown subcommand.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 && c.HasSubCommands() {
		var suggest string
		// Cobra's own default distance (2) applies only inside cobra;
		// called directly, SuggestionsFor would suggest prefixes alone.
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			suggest = fmt.Sprintf("; did you mean %q?", s[0])
		}
		return usageErrorf("unknown command %q for %q%s", args[0], c.CommandPath(), suggest)
	}
	if len(args) > 0 {
		return usageErrorf("%q takes no arguments, got %q", c.CommandPath(), args[0])
	}
	return nil
}

// parentRunE is what a parent command (keys, lab) does alone: it prints its
// help and exits 0, as gh and kubectl do; an unknown subcommand is a usage
// error (noArgs). Parents are runnable so that cobra checks their Args: a
// command without RunE prints its help for any argument and exits 0.
func parentRunE(c *cobra.Command, _ []string) error { return c.Help() }

// maxArgs accepts at most n arguments, as a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErrorf("%q takes at most %s, got %d", c.CommandPath(), plural(n, "argument"), len(args))
		}
		return nil
	}
}

// exactArgs accepts exactly n arguments, as a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%q needs %s", c.CommandPath(), what)
		}
		return nil
	}
}

package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/spf13/cobra"
)

type labOptions struct {
	app     *App
	Dir     string
	Standby bool
	HA      bool
	Poolers []string
	Shell   string
	Node    string // lab revive NODE
	Op      string // the subcommand, for a runF shared by all of them
}

// newLabCmd builds `leasectl lab` and its subcommands; runF, when not nil,
// runs instead of each subcommand's run function with the parsed options
// (tests), opts.Op naming the subcommand.
func newLabCmd(app *App, runF func(*labOptions) error) *cobra.Command {
	opts := &labOptions{app: app}
	c := &cobra.Command{
		Use:   "lab",
		Short: "Start and stop a throwaway local PostgreSQL + PgBouncer",
		Long: `A lab is a throwaway PostgreSQL cluster with PgBouncer in front of it, started
from this machine's own binaries (Debian: apt-get install postgresql pgbouncer;
macOS: brew install postgresql@15 pgbouncer) on free loopback ports: the
primary (TCP and unix socket), PgBouncer in transaction mode (where session
locks are unsafe) and in session mode (safe). It is for trying leasectl out
and for its test suite. It runs on Linux and macOS; on Windows it refuses
(exit 2), and the other commands work against any server.

With --ha the lab is a high-availability cluster instead (Debian: apt-get
install patroni etcd-server haproxy): one etcd member, two PostgreSQL nodes
managed by Patroni, node1 the primary and node2 its streaming replica, and
HAProxy routing a "primary" and a "replicas" port by Patroni's health checks.
"lab switchover", "lab kill-primary" and "lab revive" then change the primary
the way an operator, or a dead machine, would.

The servers refuse to run as root: on Linux, when run as root, the lab runs
them as the "postgres" OS user; on macOS it refuses root, and runs them as the
user who starts it. DSNs carry no password: it is in a pgpass file that each
DSN names with passfile=.`,
		Example: `  leasectl lab up
  eval "$(leasectl lab env)"
  leasectl probe "$LEASECTL_LAB_TX_DSN"
  leasectl lab down

  leasectl lab up --ha
  leasectl lab kill-primary && leasectl lab revive node1`,
		Args: noArgs,
		RunE: parentRunE,
	}
	dir, shown := labDefaultDir(app.Getenv)
	c.PersistentFlags().StringVar(&opts.Dir, "dir", dir, "state directory of the lab")
	c.PersistentFlags().Lookup("dir").DefValue = shown
	_ = c.MarkPersistentFlagDirname("dir")
	c.AddCommand(newLabUpCmd(opts, runF), newLabDownCmd(opts, runF), newLabEnvCmd(opts, runF), newLabStatusCmd(opts, runF),
		newLabSwitchoverCmd(opts, runF), newLabKillPrimaryCmd(opts, runF), newLabReviveCmd(opts, runF))
	return c
}

func newLabUpCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	c := &cobra.Command{
		Use:   "up",
		Short: "Start a lab: PostgreSQL, PgBouncer (transaction and session mode)",
		Long: `Start a lab and wait until every server accepts connections. Then print the
DSNs; "leasectl lab env" prints them as export lines.

--pooler adds PgBouncer instances besides the default two, as NAME=MODE[:SIZE]
with MODE transaction, session or statement and SIZE the pool size (default 20).

--ha starts etcd, two Patroni nodes and HAProxy instead of a primary the lab
runs itself (needs the Debian packages patroni, etcd-server and haproxy). The
poolers then connect through HAProxy's primary port, so they follow a
failover. Patroni's ttl is 10s (a dead primary is replaced after about that
long), loop_wait 1s, retry_timeout 4s; HAProxy checks each node every 500ms,
and a node out of a listener every 100ms.`,
		Example: `  leasectl lab up
  leasectl lab up --standby --pooler tx1=transaction:1 --pooler stmt=statement
  leasectl lab up --ha`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := opts.validateUp(); err != nil {
				return err
			}
			return labRun(c, opts, runF, runLabUp)
		},
	}
	c.Flags().BoolVar(&opts.Standby, "standby", false, "also start a streaming hot standby (pg_basebackup -R)")
	c.Flags().BoolVar(&opts.HA, "ha", false, "start etcd, two Patroni-managed nodes and HAProxy (high availability)")
	c.Flags().StringArrayVar(&opts.Poolers, "pooler", nil, "extra PgBouncer as NAME=MODE[:SIZE] (repeatable)")
	return c
}

func parsePoolerFlags(specs []string) ([]lab.PoolerSpec, error) {
	out := append([]lab.PoolerSpec(nil), lab.DefaultPoolers...)
	for _, s := range specs {
		name, rest, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, usageErrorf("invalid --pooler %q: use NAME=MODE[:SIZE], e.g. tx1=transaction:1", s)
		}
		mode, sizeStr, hasSize := strings.Cut(rest, ":")
		size := 20
		if hasSize {
			n, err := strconv.Atoi(sizeStr)
			if err != nil || n < 1 {
				return nil, usageErrorf("invalid --pooler %q: SIZE must be a positive integer", s)
			}
			size = n
		}
		switch lab.PoolMode(mode) {
		case lab.Transaction, lab.Session, lab.Statement:
		default:
			return nil, usageErrorf("invalid --pooler %q: MODE must be transaction, session or statement", s)
		}
		for _, p := range out {
			if p.Name == name {
				return nil, usageErrorf("invalid --pooler %q: a pooler named %q exists already", s, name)
			}
		}
		out = append(out, lab.PoolerSpec{Name: name, Mode: lab.PoolMode(mode), PoolSize: size})
	}
	return out, nil
}

// validateUp checks lab up's flags, before anything starts.
func (opts *labOptions) validateUp() error {
	if _, err := parsePoolerFlags(opts.Poolers); err != nil {
		return err
	}
	if opts.HA && opts.Standby {
		return usageErrorf("--ha starts two nodes, one of them the standby, already: drop --standby")
	}
	return nil
}

func runLabUp(ctx context.Context, opts *labOptions) error {
	app := opts.app
	if err := lab.Support(); err != nil {
		return &InputError{Err: fmt.Errorf("leasectl lab: %w", err)} // before --dir is made
	}
	poolers, err := parsePoolerFlags(opts.Poolers)
	if err != nil {
		return err
	}
	var ha *lab.HASpec
	if opts.HA {
		ha = &lab.HASpec{}
	}
	var progress io.Writer = io.Discard
	if !app.JSON() {
		progress = app.IO.ErrOut
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return &InputError{Err: fmt.Errorf("cannot use --dir %s for the lab's state: %w; pass a directory you can write to", opts.Dir, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	began := time.Now()
	l, err := lab.Start(ctx, lab.Options{Dir: opts.Dir, Standby: opts.Standby, HA: ha, Poolers: poolers, Log: progress})
	if err != nil {
		return fmt.Errorf("start lab: %w", err)
	}
	took := time.Since(began)
	if app.JSON() {
		out := labJSON(l)
		out.StartMS = msOf(took)
		return app.writeJSON(app.IO.Out, out)
	}
	st := app.styles()
	// Two directories: the progress lines (initdb …) name the servers'
	// files, which are not in --dir: say which is which.
	fmt.Fprintf(app.IO.Out, "%s lab is up (%s, %s)\n  state (--dir):   %s\n  servers' files:  %s (data, sockets, logs: lab down removes them)\n",
		st.OK.Render("✓"), l.Version, l.PoolerVersion, l.Dir, l.RunDir)
	if l.HA != nil {
		ha := l.HA
		fmt.Fprintf(app.IO.Out, "  HA: %s primary, %s replica; %s (ttl %v, loop_wait %v, retry_timeout %v) on etcd %s; HAProxy %s checks every %v; up in %.1fs\n",
			ha.Nodes[0].Name, ha.Nodes[1].Name, ha.PatroniVersion, ha.TTL, ha.LoopWait, ha.RetryTimeout,
			lastWord(strings.TrimPrefix(ha.Etcd.Version, "etcd Version: ")), versionWord(ha.Router.Version), ha.CheckInterval, took.Seconds())
	}
	fmt.Fprintln(app.IO.Out)
	if err := writeLabDSNs(app, l); err != nil {
		return err
	}
	fmt.Fprintf(app.IO.Out, "\nUse it:   eval \"$(leasectl lab env%s)\"\nStop it:  leasectl lab down%s\n", dirFlag(opts), dirFlag(opts))
	return nil
}

// versionWord returns the version in a line such as "HAProxy version
// 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/": the word after
// "version", or the whole line.
func versionWord(line string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if strings.EqualFold(f[i], "version") {
			return f[i+1]
		}
	}
	return line
}

func lastWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return s
	}
	return f[len(f)-1]
}

func dirFlag(opts *labOptions) string {
	if opts.Dir == lab.DefaultDir() {
		return ""
	}
	return " --dir " + shellQuote(opts.Dir)
}

// writeLabDSNs prints lab up's table of the lab's endpoints and their
// DSNs, never cut or wrapped (they are copied whole).
func writeLabDSNs(app *App, l *lab.Lab) error {
	var rows [][]string
	for _, v := range labVars(l) {
		if v.label != "" {
			rows = append(rows, []string{v.label, v.value})
		}
	}
	var opt tableOptions
	if app.Color() {
		st := app.styles()
		opt.Paint = map[string]func(string) string{"DSN": func(c string) string { return st.Dim.Render(c) }}
	}
	return writeTable(app.IO.Out, []string{"ENDPOINT", "DSN"}, rows, opt)
}

type labVar struct{ name, label, value string }

// labVars are the variables `lab env` exports, in order.
func labVars(l *lab.Lab) []labVar {
	vars := []labVar{
		{"LEASECTL_DSN", "", l.DirectDSN()}, // the default for every command; shown as "direct"
		{"LEASECTL_LAB_DSN", "direct", l.DirectDSN()},
		{"LEASECTL_LAB_SOCKET_DSN", "socket", l.SocketDSN()},
	}
	for _, p := range l.Poolers {
		vars = append(vars, labVar{"LEASECTL_LAB_" + envName(p.Name) + "_DSN", p.Name, l.PoolerDSN(p.Name)})
	}
	if l.Standby != nil {
		vars = append(vars, labVar{"LEASECTL_LAB_STANDBY_DSN", "standby", l.StandbyDSN()})
	}
	if l.HA != nil {
		vars = append(vars,
			labVar{"LEASECTL_LAB_HA_DSN", "ha", l.HAMultiHostDSN()},
			labVar{"LEASECTL_LAB_HA_PRIMARY_DSN", "ha-primary", l.HAPrimaryDSN()},
			labVar{"LEASECTL_LAB_HA_REPLICA_DSN", "ha-replicas", l.HAReplicaDSN()})
	}
	return append(vars, labVar{"LEASECTL_LAB_DIR", "", l.Dir}, labVar{"PGPASSFILE", "passfile", l.PassFile})
}

func envName(name string) string {
	switch name {
	case "transaction":
		return "TX"
	case "session":
		return "SESSION"
	}
	up := strings.ToUpper(name)
	return strings.Map(func(r rune) rune {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, up)
}

func newLabDownCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the lab and remove its files",
		Long:  "Stop every process the lab started, wait until they are gone, and remove the lab's files.\nWith no lab running it says so and exits 0: what down is for is already true.",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return labRun(c, opts, runF, runLabDown)
		},
	}
}

// runLabDown is `leasectl lab down`.
func runLabDown(ctx context.Context, opts *labOptions) error {
	l, err := lab.Load(opts.Dir)
	if errors.Is(err, lab.ErrNoLab) && !lab.HasState(opts.Dir) {
		if opts.app.JSON() {
			return opts.app.writeJSON(opts.app.IO.Out, labDownJSON{docHeader: header(true), Dir: opts.Dir, Stopped: false})
		}
		fmt.Fprintf(opts.app.IO.Out, "no lab in %s: nothing to stop\n", opts.Dir)
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.Stop(ctx); err != nil {
		return fmt.Errorf("stop lab: %w", err)
	}
	if opts.app.JSON() {
		return opts.app.writeJSON(opts.app.IO.Out, labDownJSON{docHeader: header(true), Dir: l.Dir, Stopped: true})
	}
	fmt.Fprintf(opts.app.IO.Out, "%s lab in %s stopped and removed\n", opts.app.styles().OK.Render("✓"), l.Dir)
	return nil
}

func newLabEnvCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	c := &cobra.Command{
		Use:   "env",
		Short: "Print export lines with the lab's DSNs",
		Long: `Print shell export lines for the lab's DSNs, for eval:

  LEASECTL_DSN                 the primary over TCP (what leasectl uses by default)
  LEASECTL_LAB_DSN             the primary over TCP
  LEASECTL_LAB_SOCKET_DSN      the primary over its unix socket
  LEASECTL_LAB_TX_DSN          PgBouncer in transaction mode (unsafe for leases)
  LEASECTL_LAB_SESSION_DSN     PgBouncer in session mode
  LEASECTL_LAB_<NAME>_DSN      each extra pooler, and the standby with --standby
  LEASECTL_LAB_HA_DSN          with --ha: both nodes, target_session_attrs=primary
  LEASECTL_LAB_HA_PRIMARY_DSN  with --ha: HAProxy's port that follows the primary
  LEASECTL_LAB_HA_REPLICA_DSN  with --ha: HAProxy's port that leads to a replica
  LEASECTL_LAB_DIR             the lab's state directory
  PGPASSFILE                   the lab's pgpass file, so psql works too

In an HA lab LEASECTL_DSN, LEASECTL_LAB_DSN and LEASECTL_LAB_STANDBY_DSN name
the nodes that were primary and standby when the lab last changed them (up,
switchover, kill-primary); run "lab env" again after those.`,
		Example: `  eval "$(leasectl lab env)"
  leasectl lab env --shell fish | source`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return labRun(c, opts, runF, runLabEnv)
		},
	}
	c.Flags().StringVar(&opts.Shell, "shell", "sh", "syntax of the lines: sh (also bash, zsh) or fish")
	_ = c.RegisterFlagCompletionFunc("shell", cobra.FixedCompletions([]cobra.Completion{"sh", "bash", "zsh", "fish"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// runLabEnv is `leasectl lab env`.
func runLabEnv(_ context.Context, opts *labOptions) error {
	l, err := lab.Load(opts.Dir)
	if err != nil {
		return err
	}
	if opts.app.JSON() {
		out := labEnvJSON{docHeader: header(true), Dir: l.Dir, Env: map[string]string{}}
		for _, v := range labVars(l) {
			out.Env[v.name] = v.value
		}
		return opts.app.writeJSON(opts.app.IO.Out, out)
	}
	for _, v := range labVars(l) {
		switch opts.Shell {
		case "sh", "bash", "zsh":
			fmt.Fprintf(opts.app.IO.Out, "export %s=%s\n", v.name, shellQuote(v.value))
		case "fish":
			fmt.Fprintf(opts.app.IO.Out, "set -gx %s %s\n", v.name, shellQuote(v.value))
		default:
			return usageErrorf("invalid --shell %q: use sh or fish", opts.Shell)
		}
	}
	return nil
}

func newLabStatusCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether each process of the lab is up",
		Long: `Show each process of the lab with its port and pid. Exit 0 when all are up, 1 when any is down.

In an HA lab: etcd, each node's Patroni (REST port) and PostgreSQL with the
role Patroni gives it, and HAProxy's primary and replicas ports.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return labRun(c, opts, runF, runLabStatus)
		},
	}
}

// runLabStatus is `leasectl lab status`.
func runLabStatus(_ context.Context, opts *labOptions) error {
	l, err := lab.Load(opts.Dir)
	if err != nil {
		return err
	}
	comps := l.Status()
	allUp := true
	for _, comp := range comps {
		allUp = allUp && comp.Up
	}
	if opts.app.JSON() {
		if err := opts.app.writeJSON(opts.app.IO.Out, labStatusJSONOf(l, allUp, comps)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(opts.app.IO.Out, "lab in %s\n", termSafe(l.Dir))
		if err := writeLabStatus(opts.app, comps); err != nil {
			return err
		}
	}
	if !allUp {
		if l.HA != nil {
			for _, n := range l.HA.Nodes {
				if lab.PatroniPID(&n) == 0 {
					return &CheckFailedError{Message: fmt.Sprintf("%s is down (bring it back: leasectl lab revive %s%s)", n.Name, n.Name, dirFlag(opts))}
				}
			}
		}
		return &CheckFailedError{Message: "some lab processes are down (restart: leasectl lab down && leasectl lab up)"}
	}
	return nil
}

// writeLabStatus prints lab status's table: one row per process, STATE
// last ("✓ up", "✗ down").
func writeLabStatus(app *App, comps []lab.Component) error {
	rows := make([][]string, 0, len(comps))
	for _, comp := range comps {
		state := "✓ up"
		if !comp.Up {
			state = "✗ down"
		}
		where := fmt.Sprintf("127.0.0.1:%d", comp.Port)
		if comp.Socket != "" {
			where = comp.Socket
		}
		kind := comp.Kind
		if comp.Role != "" {
			kind += " " + comp.Role
		}
		pid := "-" // not running
		if comp.PID > 0 {
			pid = strconv.Itoa(comp.PID)
		}
		rows = append(rows, []string{comp.Name, kind, where, pid, state})
	}
	opt := tableOptions{Width: app.Width()}
	if app.Color() {
		st := app.styles()
		opt.Paint = map[string]func(string) string{"STATE": func(c string) string {
			mark, rest, _ := strings.Cut(c, " ")
			if mark == "✓" {
				return st.OK.Render(mark) + " " + rest
			}
			return st.Fail.Render(mark) + " " + rest
		}}
	}
	return writeTable(app.IO.Out, []string{"PROCESS", "KIND", "ADDRESS", "PID", "STATE"}, rows, opt)
}

// labJSONOut is the documented schema of `leasectl lab up -o json`
// (docs/json.md).
type labJSONOut struct {
	docHeader
	Dir     string            `json:"dir"`
	Version string            `json:"version"`
	Pooler  string            `json:"pooler_version"`
	DSNs    map[string]string `json:"dsns"`
	Pass    string            `json:"passfile"`
	HA      *labHAJSON        `json:"ha"`
	StartMS float64           `json:"start_ms"`
}

type labHAJSON struct {
	Patroni        string  `json:"patroni_version"`
	Etcd           string  `json:"etcd_version"`
	HAProxy        string  `json:"haproxy_version"`
	Primary        string  `json:"primary"`
	TTLMS          float64 `json:"ttl_ms"`
	LoopWaitMS     float64 `json:"loop_wait_ms"`
	RetryTimeoutMS float64 `json:"retry_timeout_ms"`
	Checks         string  `json:"checks"`
	CheckTimeoutMS float64 `json:"check_timeout_ms"`
}

// labDownJSON is `leasectl lab down -o json`.
type labDownJSON struct {
	docHeader
	Dir     string `json:"dir"`
	Stopped bool   `json:"stopped"`
}

// labEnvJSON is `leasectl lab env -o json`: the variables lab env exports.
type labEnvJSON struct {
	docHeader
	Dir string            `json:"dir"`
	Env map[string]string `json:"env"`
}

// labStatusJSON is `leasectl lab status -o json`.
type labStatusJSON struct {
	docHeader
	Dir        string             `json:"dir"`
	Components []labComponentJSON `json:"components"`
}

type labComponentJSON struct {
	Name   string  `json:"name"`
	Kind   string  `json:"kind"`
	Port   int     `json:"port"`
	Socket *string `json:"socket"`
	Role   *string `json:"role"`
	PID    int     `json:"pid"`
	Up     bool    `json:"up"`
}

func labStatusJSONOf(l *lab.Lab, allUp bool, comps []lab.Component) labStatusJSON {
	out := labStatusJSON{docHeader: header(allUp), Dir: l.Dir, Components: make([]labComponentJSON, 0, len(comps))}
	for _, c := range comps {
		out.Components = append(out.Components, labComponentJSON{Name: c.Name, Kind: c.Kind, Port: c.Port,
			Socket: strOrNil(c.Socket), Role: strOrNil(c.Role), PID: c.PID, Up: c.Up})
	}
	return out
}

func labJSON(l *lab.Lab) labJSONOut {
	out := labJSONOut{docHeader: header(true), Dir: l.Dir, Version: l.Version, Pooler: l.PoolerVersion, DSNs: map[string]string{}, Pass: l.PassFile}
	if ha := l.HA; ha != nil {
		primary := ""
		for _, n := range ha.Nodes {
			if n.Port == l.Primary.Port {
				primary = n.Name
			}
		}
		out.HA = &labHAJSON{Patroni: ha.PatroniVersion, Etcd: ha.Etcd.Version, HAProxy: ha.Router.Version, Primary: primary,
			TTLMS: msOf(ha.TTL), LoopWaitMS: msOf(ha.LoopWait), RetryTimeoutMS: msOf(ha.RetryTimeout),
			Checks: ha.Router.Checks, CheckTimeoutMS: msOf(ha.CheckTimeout)}
	}
	for _, v := range labVars(l) {
		if v.label != "" && v.label != "passfile" {
			out.DSNs[v.label] = v.value
		}
	}
	return out
}

// loadHALab loads the lab in opts.Dir and checks that it runs in HA mode.
func loadHALab(opts *labOptions) (*lab.Lab, error) {
	l, err := lab.Load(opts.Dir)
	if err != nil {
		return nil, err
	}
	if l.HA == nil {
		return nil, &InputError{Err: fmt.Errorf("the lab in %s was started without --ha, so Patroni does not manage it (stop it and start an HA lab: leasectl lab down%s && leasectl lab up --ha%s)", l.Dir, dirFlag(opts), dirFlag(opts))}
	}
	if !opts.app.JSON() {
		l.SetLog(opts.app.IO.ErrOut)
	}
	return l, nil
}

// labChangeJSON is `leasectl lab switchover -o json` and `lab
// kill-primary -o json`.
type labChangeJSON struct {
	docHeader
	From       string   `json:"from"`
	To         string   `json:"to"`
	WritableMS float64  `json:"writable_ms"`
	RoutedMS   float64  `json:"routed_ms"`
	RejoinedMS *float64 `json:"rejoined_ms"` // null after kill-primary: the old primary is dead
}

func changeJSON(ch *lab.HAChange) labChangeJSON {
	out := labChangeJSON{docHeader: header(true), From: ch.From, To: ch.To, WritableMS: msOf(ch.Writable), RoutedMS: msOf(ch.Routed)}
	if ch.Rejoined > 0 {
		out.RejoinedMS = msPtr(ch.Rejoined)
	}
	return out
}

// labReviveJSON is `leasectl lab revive -o json`.
type labReviveJSON struct {
	docHeader
	Node   string  `json:"node"`
	Role   string  `json:"role"`
	TookMS float64 `json:"took_ms"`
}

func newLabSwitchoverCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "switchover",
		Short: "HA lab: hand the primary role to the other node (planned)",
		Long: `Ask Patroni for a switchover to the other node, as an operator would: the
primary shuts down cleanly, the replica is promoted, and the old primary
restarts as its replica. Wait until the new primary accepts writes, HAProxy's
primary port leads to it, and the old primary streams from it again; then
report how long each step took. Needs a lab started with --ha, with both
nodes running.`,
		Example: `  leasectl lab switchover
  leasectl lab switchover -o json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return labRun(c, opts, runF, runLabSwitchover)
		},
	}
}

// runLabSwitchover is `leasectl lab switchover`.
func runLabSwitchover(ctx context.Context, opts *labOptions) error {
	l, err := loadHALab(opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ch, err := l.Switchover(ctx)
	if err != nil {
		return fmt.Errorf("switchover: %w", err)
	}
	if opts.app.JSON() {
		return opts.app.writeJSON(opts.app.IO.Out, changeJSON(ch))
	}
	fmt.Fprintf(opts.app.IO.Out, "%s switchover %s → %s: %s writable after %.1fs, HAProxy followed after %.1fs, %s streaming from it after %.1fs\n",
		opts.app.styles().OK.Render("✓"), ch.From, ch.To, ch.To, ch.Writable.Seconds(), ch.Routed.Seconds(), ch.From, ch.Rejoined.Seconds())
	fmt.Fprintf(opts.app.IO.Out, "Direct DSNs changed: eval \"$(leasectl lab env%s)\"\n", dirFlag(opts))
	return nil
}

func newLabKillPrimaryCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "kill-primary",
		Short: "HA lab: kill the primary node (SIGKILL) and wait for the failover",
		Long: `Kill the node that is the primary now as a machine dies: SIGKILL to its Patroni,
then to its PostgreSQL and every child. Wait until Patroni promotes the other
node (once the dead node's leader key expires: about the ttl, 10s), it accepts
writes and HAProxy's primary port leads to it; then report how long that took.
The dead node stays dead: bring it back as a replica with "lab revive NODE".
Needs a lab started with --ha whose replica streams.`,
		Example: `  leasectl lab kill-primary
  leasectl lab revive node1`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return labRun(c, opts, runF, runLabKillPrimary)
		},
	}
}

// runLabKillPrimary is `leasectl lab kill-primary`.
func runLabKillPrimary(ctx context.Context, opts *labOptions) error {
	l, err := loadHALab(opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ch, err := l.KillPrimary(ctx)
	if err != nil {
		return fmt.Errorf("kill primary: %w", err)
	}
	if opts.app.JSON() {
		return opts.app.writeJSON(opts.app.IO.Out, changeJSON(ch))
	}
	fmt.Fprintf(opts.app.IO.Out, "%s killed %s; %s took over: writable after %.1fs, HAProxy followed after %.1fs\n",
		opts.app.styles().OK.Render("✓"), ch.From, ch.To, ch.Writable.Seconds(), ch.Routed.Seconds())
	fmt.Fprintf(opts.app.IO.Out, "Bring %s back as a replica: leasectl lab revive %s%s\n", ch.From, ch.From, dirFlag(opts))
	return nil
}

func newLabReviveCmd(opts *labOptions, runF func(*labOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "revive NODE",
		Short: "HA lab: restart a dead node's Patroni so that it rejoins",
		Long: `Start the Patroni of a node killed by "lab kill-primary" again and wait until
the node runs: as a replica streaming from the primary (Patroni rewinds it with
pg_rewind first when it had diverged) that HAProxy's replicas port leads to,
or as the primary when no other node is. NODE is node1 or node2.`,
		Example: `  leasectl lab revive node1`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%q needs one NODE: node1 or node2", c.CommandPath())
			}
			return nil
		},
		ValidArgs: []string{"node1", "node2"},
		RunE: func(c *cobra.Command, args []string) error {
			opts.Node = args[0]
			return labRun(c, opts, runF, runLabRevive)
		},
	}
}

// runLabRevive is `leasectl lab revive`.
func runLabRevive(ctx context.Context, opts *labOptions) error {
	l, err := loadHALab(opts)
	if err != nil {
		return err
	}
	if l.HANode(opts.Node) == nil {
		return usageErrorf("no node %q in this lab: use node1 or node2", opts.Node)
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	took, err := l.ReviveNode(ctx, opts.Node)
	if err != nil {
		return fmt.Errorf("revive %s: %w", opts.Node, err)
	}
	role := "replica"
	if p, err := l.HAPrimary(ctx); err == nil && p.Name == opts.Node {
		role = "primary"
	}
	if opts.app.JSON() {
		return opts.app.writeJSON(opts.app.IO.Out, labReviveJSON{docHeader: header(true), Node: opts.Node, Role: role, TookMS: msOf(took)})
	}
	fmt.Fprintf(opts.app.IO.Out, "%s %s is back as the %s after %.1fs\n", opts.app.styles().OK.Render("✓"), opts.Node, role, took.Seconds())
	return nil
}

// shellQuote quotes s for POSIX shells and fish.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@,+%=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// labRun runs a lab subcommand: runF when a test injected one (with Op set
// to the subcommand's name), else the real run function.
func labRun(c *cobra.Command, opts *labOptions, runF func(*labOptions) error, run func(context.Context, *labOptions) error) error {
	if runF != nil {
		opts.Op = c.Name()
		return runF(opts)
	}
	return run(c.Context(), opts)
}

// labDefaultDir returns the lab's default state directory, as
// lab.DefaultDir finds it (leasectl/lab under $XDG_CACHE_HOME, else under
// ~/.cache) but from getenv, and the way --help and the reference pages
// show it: with ~ for the home directory, so that they read the same for
// every user.
func labDefaultDir(getenv func(string) string) (dir, shown string) {
	if x := getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		dir = filepath.Join(x, "leasectl", "lab")
		return dir, dir
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if !filepath.IsAbs(home) {
		dir = lab.DefaultDir()
		return dir, dir
	}
	return filepath.Join(home, ".cache", "leasectl", "lab"), filepath.Join("~", ".cache", "leasectl", "lab")
}

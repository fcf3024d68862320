package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/lab"
	"github.com/spf13/cobra"
)

type labOptions struct {
	app     *App
	Dir     string
	Standby bool
	Poolers []string
	Shell   string
}

func newLabCmd(app *App) *cobra.Command {
	opts := &labOptions{app: app}
	c := &cobra.Command{
		Use:   "lab",
		Short: "Start and stop a throwaway local PostgreSQL + PgBouncer",
		Long: `A lab is a throwaway PostgreSQL cluster with PgBouncer in front of it, started
from this machine's own binaries (Debian: apt-get install postgresql pgbouncer)
on free loopback ports: the primary (TCP and unix socket), PgBouncer in
transaction mode (where session locks are unsafe) and in session mode (safe).
It is for trying leasectl out and for its test suite.

When run as root the servers run as the "postgres" OS user, since both refuse
to run as root. DSNs carry no password: it is in a pgpass file that each DSN
names with passfile=.`,
		Example: `  leasectl lab up
  eval "$(leasectl lab env)"
  leasectl probe "$LEASECTL_LAB_TX_DSN"
  leasectl lab down`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return usageErrorf("%q needs a subcommand: up, down, env or status", c.CommandPath())
		},
	}
	c.PersistentFlags().StringVar(&opts.Dir, "dir", lab.DefaultDir(), "state directory of the lab")
	c.AddCommand(newLabUpCmd(opts), newLabDownCmd(opts), newLabEnvCmd(opts), newLabStatusCmd(opts))
	return c
}

func newLabUpCmd(opts *labOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "up",
		Short: "Start a lab: PostgreSQL, PgBouncer (transaction and session mode)",
		Long: `Start a lab and wait until every server accepts connections. Then print the
DSNs; "leasectl lab env" prints them as export lines.

--pooler adds PgBouncer instances besides the default two, as NAME=MODE[:SIZE]
with MODE transaction, session or statement and SIZE the pool size (default 20).`,
		Example: `  leasectl lab up
  leasectl lab up --standby --pooler tx1=transaction:1 --pooler stmt=statement`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runLabUp(c.Context(), opts) },
	}
	c.Flags().BoolVar(&opts.Standby, "standby", false, "also start a streaming hot standby (pg_basebackup -R)")
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

func runLabUp(ctx context.Context, opts *labOptions) error {
	app := opts.app
	poolers, err := parsePoolerFlags(opts.Poolers)
	if err != nil {
		return err
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
	l, err := lab.Start(ctx, lab.Options{Dir: opts.Dir, Standby: opts.Standby, Poolers: poolers, Log: progress})
	if err != nil {
		return fmt.Errorf("start lab: %w", err)
	}
	if app.JSON() {
		return writeJSON(app.IO.Out, labJSON(l))
	}
	st := app.styles()
	fmt.Fprintf(app.IO.Out, "%s lab is up in %s (%s, %s)\n", st.OK.Render("✓"), l.Dir, l.Version, l.PoolerVersion)
	writeLabDSNs(app.IO.Out, l, st)
	fmt.Fprintf(app.IO.Out, "\nUse it:   eval \"$(leasectl lab env%s)\"\nStop it:  leasectl lab down%s\n", dirFlag(opts), dirFlag(opts))
	return nil
}

func dirFlag(opts *labOptions) string {
	if opts.Dir == lab.DefaultDir() {
		return ""
	}
	return " --dir " + shellQuote(opts.Dir)
}

func writeLabDSNs(w io.Writer, l *lab.Lab, st styles) {
	for _, v := range labVars(l) {
		if v.label != "" {
			fmt.Fprintf(w, "  %-12s %s\n", v.label, st.Dim.Render(v.value))
		}
	}
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

func newLabDownCmd(opts *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the lab and remove its files",
		Long:  "Stop every process the lab started, wait until they are gone, and remove the lab's files.",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := lab.Load(opts.Dir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), time.Minute)
			defer cancel()
			if err := l.Stop(ctx); err != nil {
				return fmt.Errorf("stop lab: %w", err)
			}
			if opts.app.JSON() {
				return writeJSON(opts.app.IO.Out, map[string]any{"dir": l.Dir, "stopped": true})
			}
			fmt.Fprintf(opts.app.IO.Out, "%s lab in %s stopped and removed\n", opts.app.styles().OK.Render("✓"), l.Dir)
			return nil
		},
	}
}

func newLabEnvCmd(opts *labOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "env",
		Short: "Print export lines with the lab's DSNs",
		Long: `Print shell export lines for the lab's DSNs, for eval:

  LEASECTL_DSN              the primary over TCP (what leasectl uses by default)
  LEASECTL_LAB_DSN          the primary over TCP
  LEASECTL_LAB_SOCKET_DSN   the primary over its unix socket
  LEASECTL_LAB_TX_DSN       PgBouncer in transaction mode (unsafe for leases)
  LEASECTL_LAB_SESSION_DSN  PgBouncer in session mode
  LEASECTL_LAB_<NAME>_DSN   each extra pooler, and the standby with --standby
  LEASECTL_LAB_DIR          the lab's state directory
  PGPASSFILE                the lab's pgpass file, so psql works too`,
		Example: `  eval "$(leasectl lab env)"
  leasectl lab env --shell fish | source`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := lab.Load(opts.Dir)
			if err != nil {
				return err
			}
			if opts.app.JSON() {
				vars := map[string]string{}
				for _, v := range labVars(l) {
					vars[v.name] = v.value
				}
				return writeJSON(opts.app.IO.Out, vars)
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
		},
	}
	c.Flags().StringVar(&opts.Shell, "shell", "sh", "syntax of the lines: sh (also bash, zsh) or fish")
	return c
}

func newLabStatusCmd(opts *labOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether each process of the lab is up",
		Long:  "Show each process of the lab with its port and pid. Exit 0 when all are up, 1 when any is down.",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
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
				if err := writeJSON(opts.app.IO.Out, map[string]any{"dir": l.Dir, "up": allUp, "components": comps}); err != nil {
					return err
				}
			} else {
				st := opts.app.styles()
				fmt.Fprintf(opts.app.IO.Out, "lab in %s\n", l.Dir)
				for _, comp := range comps {
					mark, state := st.OK.Render("✓"), "up"
					if !comp.Up {
						mark, state = st.Fail.Render("✗"), "down"
					}
					where := fmt.Sprintf("127.0.0.1:%d", comp.Port)
					if comp.Socket != "" {
						where = comp.Socket
					}
					fmt.Fprintf(opts.app.IO.Out, "  %s %-12s %-22s %-15s pid %-7d %s\n", mark, comp.Name, comp.Kind, where, comp.PID, state)
				}
			}
			if !allUp {
				return &CheckFailedError{Message: "some lab processes are down (restart: leasectl lab down && leasectl lab up)"}
			}
			return nil
		},
	}
}

type labJSONOut struct {
	Dir     string            `json:"dir"`
	Version string            `json:"version"`
	Pooler  string            `json:"pooler_version"`
	DSNs    map[string]string `json:"dsns"`
	Pass    string            `json:"passfile"`
}

func labJSON(l *lab.Lab) labJSONOut {
	out := labJSONOut{Dir: l.Dir, Version: l.Version, Pooler: l.PoolerVersion, DSNs: map[string]string{}, Pass: l.PassFile}
	for _, v := range labVars(l) {
		if v.label != "" && v.label != "passfile" {
			out.DSNs[v.label] = v.value
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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

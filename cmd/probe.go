package cmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/dur"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/probe"
	"github.com/spf13/cobra"
)

type probeOptions struct {
	app        *App
	DSNArg     string
	Key        int64
	Strict     bool
	Contenders int
	Rounds     int
	Idle       time.Duration
	Heartbeat  time.Duration
	HBTimeout  time.Duration
	keyFlag    keyFlag
}

// newProbeCmd builds `leasectl probe`; runF, when not nil, runs instead of
// runProbe with the parsed and checked options (tests).
func newProbeCmd(app *App, runF func(*probeOptions) error) *cobra.Command {
	opts := &probeOptions{app: app}
	c := &cobra.Command{
		Use:   "probe [DSN]",
		Short: "Check that a session-level advisory lock gives mutual exclusion over a DSN",
		Long: fmt.Sprintf(`Probe a DSN before trusting a lease over it. STABLE (exit 0) means a
session-level advisory lock gives mutual exclusion there; REFUSED (exit 1) means
it does not (safety: a lease here can elect two leaders), or that a lease there
would not work (liveness: stand-bys cannot wait, sessions are cut), or that it
could not be shown. Ctrl-C interrupts it with no verdict (exit 130).

The textbook session probe (backend pid, temp table, pid again, row back) passes
through a quiet transaction-mode pooler, which then lets two clients both take
the lock. So while connection A holds the probe key, further connections
through the same DSN must get other backends of the same server and be refused
the key, and A must still hold it; then A disconnects, and the key must be free:
the lock died with its connection. Behind a proxy or pooler, more contenders
are opened one after another once A holds the key, since a balancer may put
connections that arrive together on one server. Every statement is its own
round trip and says which backend and which server (system identifier, start
time, primary or standby) ran it, and every connection must reach A's server.

Checks, each pass / warn / fail / info with one line of why:
  connect              reach the server within --timeout (else exit 3), and
                       get a server connection from a pooler in that time
  primary              not a standby (advisory locks on a standby fence nothing)
  session_continuity   A's statements all ran on one backend of one primary
  exclusion            contenders get other backends and cannot take A's key
  idle_survival        with --idle: A's session survives that long idle
  release              the key is free once A has disconnected
  pgpool               pgpool-II in the path: its mode, no load balancing to a standby
  proxy                signs of a pooler or proxy in the path (warn only)
  idle_session_timeout must be above the heartbeat interval
  dead_peer_detection  how long the server keeps a vanished client's lock
  privileges           what who and failover can do with this role (info)
  cleanup              the probe key released, as seen

Warnings refuse only with --strict. A pooler that admits no more clients or
cannot reach its server exits 3; PgBouncer's admin console as the DSN exits 2. The probe key is picked at random from
%d to %d (the bytes "leas" and 32 random bits), a range keys lint keeps free of
roles, so probes never contend with each other or with what an interrupted
probe left behind; --probe-key picks one. The DSN is the argument, else --dsn,
$LEASECTL_DSN, $DATABASE_URL or libpq's PG* variables.`, locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff),
		Example: `  leasectl probe "postgres://app@db.internal:5432/app"
  leasectl probe --strict -o json "$DATABASE_URL"
  leasectl probe "$LEASECTL_LAB_TX_DSN"     # refused: transaction pooling
  leasectl probe --idle 20s "$DATABASE_URL" # does a proxy cut idle sessions?`,
		Args: maxArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				if args[0] == "" {
					return emptyDSNError("the DSN argument", `leasectl probe "$VAR"`, "leave it out to probe --dsn, $LEASECTL_DSN, $DATABASE_URL or libpq's PG* variables",
						"$LEASECTL_DSN and $LEASECTL_LAB_TX_DSN, its PgBouncer in transaction mode")
				}
				opts.DSNArg = args[0]
			}
			opts.Key = opts.keyFlag.key.ID
			if opts.keyFlag.set && opts.Key == 0 {
				return usageErrorf("invalid --probe-key 0: pick a key no role uses, or leave the flag out for a random one")
			}
			if runF != nil {
				return runF(opts)
			}
			return runProbe(c.Context(), opts)
		},
	}
	f := c.Flags()
	opts.keyFlag = keyFlag{noPairWhy: "the probe takes a bigint key: give one 64-bit integer"}
	f.Var(&opts.keyFlag, "probe-key", "advisory key the probe takes, in decimal or 0x hex (default: random in the probe's range); no role may use it")
	f.BoolVar(&opts.Strict, "strict", false, "refuse on warnings too")
	f.IntVar(&opts.Contenders, "contenders", 1, "further connections that contend for the key")
	f.IntVar(&opts.Rounds, "rounds", 2, "times each contender tries the key")
	f.DurationVar(&opts.Idle, "idle", 0, "keep connection A idle this long, holding the key, and check that its session survived (proxy idle timeouts)")
	f.DurationVar(&opts.Heartbeat, "heartbeat-interval", 15*time.Second, "lease heartbeat interval the server settings are judged against")
	f.Duration("heartbeat", 15*time.Second, "")
	deprecatedAlias(f, "heartbeat", "heartbeat-interval")
	f.DurationVar(&opts.HBTimeout, "heartbeat-timeout", 5*time.Second, "lease heartbeat timeout the server settings are judged against")
	return c
}

func runProbe(ctx context.Context, opts *probeOptions) error {
	app := opts.app
	if opts.Contenders < 1 || opts.Rounds < 1 {
		return usageErrorf("--contenders and --rounds must be at least 1")
	}
	if opts.Idle < 0 {
		return usageErrorf("invalid --idle %s: it must not be negative", opts.Idle)
	}
	if err := checkProbeKeyIsFree(app, opts.Key); err != nil {
		return err
	}
	cfg, _, err := app.ConnConfig(opts.DSNArg)
	if err != nil {
		return err
	}
	// On a terminal the probe shows what it waits for, and counts down
	// an --idle wait: the one long pause.
	var idleUntil atomic.Int64
	stopWaiting := app.waitingFor(func(waited time.Duration) string {
		if until := idleUntil.Load(); until != 0 {
			left := time.Until(time.Unix(0, until)).Round(time.Second)
			return fmt.Sprintf("connection A idle, holding the probe key: %s left of --idle %s", fmtAge(left), opts.Idle)
		}
		return fmt.Sprintf("probing %s %s", connTarget(cfg), fmtAge(waited))
	})
	rep, err := probe.Run(ctx, probe.Options{
		OnIdle:            func(until time.Time) { idleUntil.Store(until.UnixNano()) },
		ConnConfig:        cfg,
		Key:               opts.Key,
		Contenders:        opts.Contenders,
		Rounds:            opts.Rounds,
		Idle:              opts.Idle,
		Timeout:           app.Global.Timeout,
		HeartbeatInterval: opts.Heartbeat,
		HeartbeatTimeout:  opts.HBTimeout,
		Strict:            opts.Strict,
	})
	stopWaiting()
	if err != nil {
		return err
	}
	if app.JSON() {
		if err := app.writeJSON(app.IO.Out, probeJSONOf(rep)); err != nil {
			return err
		}
	} else {
		renderProbe(app, rep)
	}
	if rep.Verdict != probe.Stable {
		return &CheckFailedError{}
	}
	return nil
}

// probeJSON is the documented schema of `leasectl probe -o json`
// (docs/json.md).
type probeJSON struct {
	docHeader
	Verdict   probe.Verdict      `json:"verdict"`
	Refusal   *string            `json:"refusal"`
	Strict    bool               `json:"strict"`
	Target    string             `json:"target"`
	Key       string             `json:"probe_key"`
	Server    *dbconn.ServerInfo `json:"server"`
	Checks    []probeCheckJSON   `json:"checks"`
	ElapsedMS float64            `json:"elapsed_ms"`
}

type probeCheckJSON struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	Detail string  `json:"detail"`
	Cause  *string `json:"cause"`
}

func probeJSONOf(rep *probe.Report) probeJSON {
	out := probeJSON{docHeader: header(rep.Verdict == probe.Stable), Verdict: rep.Verdict, Refusal: strOrNil(string(rep.Refusal)),
		Strict: rep.Strict, Target: rep.Target, Key: strconv.FormatInt(rep.Key, 10), Server: rep.Server,
		Checks: make([]probeCheckJSON, 0, len(rep.Checks)), ElapsedMS: msOf(rep.Elapsed)}
	for _, c := range rep.Checks {
		out.Checks = append(out.Checks, probeCheckJSON{Name: c.Name, Status: string(c.Status), Detail: c.Detail, Cause: strOrNil(string(c.Cause))})
	}
	return out
}

var probeLabels = map[string]string{
	probe.CheckConnect:            "connect",
	probe.CheckPrimary:            "primary",
	probe.CheckContinuity:         "session continuity",
	probe.CheckExclusion:          "exclusion",
	probe.CheckIdleSurvival:       "idle survival",
	probe.CheckRelease:            "release",
	probe.CheckPgPool:             "pgpool-II",
	probe.CheckProxy:              "proxy",
	probe.CheckIdleSessionTimeout: "idle sessions",
	probe.CheckDeadPeer:           "dead-peer detection",
	probe.CheckPrivileges:         "privileges",
	probe.CheckCleanup:            "cleanup",
}

func renderProbe(app *App, rep *probe.Report) {
	st := app.styles()
	w := app.IO.Out
	width := app.Width()
	fmt.Fprintf(w, "Probe of %s\n", wrapIndented(len("Probe of "), termSafe(rep.Target+probeWho(rep)), width))
	warnings := 0
	for _, c := range rep.Checks {
		var mark string
		switch c.Status {
		case probe.Pass:
			mark = st.OK.Render("✓")
		case probe.Warn:
			mark = st.Warn.Render("!")
			warnings++
		case probe.Fail:
			mark = st.Fail.Render("✗")
		default:
			mark = st.Info.Render("i")
		}
		label := probeLabels[c.Name]
		if label == "" {
			label = c.Name
		}
		// "  ✓ " and the label padded to 20 columns: the detail starts
		// at column 25, and wraps under itself.
		fmt.Fprintf(w, "  %s %-20s %s\n", mark, label, wrapIndented(25, termSafe(c.Detail), width))
	}
	elapsed := dur.Format(rep.Elapsed)
	if rep.Verdict == probe.Stable {
		note := ""
		if warnings > 0 {
			note = ", " + plural(warnings, "warning")
		}
		fmt.Fprintf(w, "%s  %s\n", st.OK.Render("STABLE"), wrapIndented(8, fmt.Sprintf("a session-level advisory lock gives mutual exclusion over this DSN (%s%s)", elapsed, note), width))
		return
	}
	var reason string
	switch rep.Refusal {
	case probe.Safety:
		reason = "session-level advisory locks do not give mutual exclusion over this DSN: a lease here can elect two leaders"
	case probe.Liveness:
		reason = "a lease over this DSN would not work: " + livenessSummary(rep)
	default:
		reason = "--strict: the warnings above refuse this DSN"
	}
	fmt.Fprintf(w, "%s  %s\n", st.Fail.Render("REFUSED"), wrapIndented(9, termSafe(fmt.Sprintf("%s (%s)", reason, elapsed)), width))
}

// probeWho is the header's user and database: the server's names, and the
// DSN's where a pooler maps them to others (a PgBouncer alias), or the
// DSN's alone when no statement ran.
func probeWho(rep *probe.Report) string {
	if rep.Server == nil {
		if rep.User == "" {
			return ""
		}
		return fmt.Sprintf(" as %s, database %s", rep.User, rep.Database)
	}
	user, db := rep.Server.User, rep.Server.Database
	if rep.User != "" && rep.User != user {
		user = fmt.Sprintf("%s (%s on the server)", rep.User, user)
	}
	if rep.Database != "" && rep.Database != db {
		db = fmt.Sprintf("%s (%s on the server)", rep.Database, db)
	}
	return fmt.Sprintf(" as %s, database %s", user, db)
}

// livenessSummary names what keeps a lease from working, from the failing
// checks.
func livenessSummary(rep *probe.Report) string {
	var out []string
	for _, c := range rep.Checks {
		if c.Status != probe.Fail {
			continue
		}
		switch {
		case c.Summary != "":
			out = append(out, c.Summary)
		case c.Name == probe.CheckExclusion:
			out = append(out, "a stand-by cannot get a server connection to wait on")
		case c.Name == probe.CheckIdleSurvival:
			out = append(out, "idle sessions are cut, and a leader is idle between heartbeats")
		case c.Name == probe.CheckIdleSessionTimeout:
			out = append(out, "the server ends idle sessions between heartbeats")
		case c.Name == probe.CheckRelease:
			out = append(out, "the release of the key with its connection could not be checked")
		default:
			out = append(out, c.Name+" failed")
		}
	}
	return strings.Join(out, "; ")
}

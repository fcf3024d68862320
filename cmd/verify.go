package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/internal/verify"
	"github.com/leasectl/leasectl/probe"
	"github.com/spf13/cobra"
)

type verifyOptions struct {
	app       *App
	Roles     []string
	Failover  bool
	Force     bool
	Yes       bool
	Within    time.Duration
	PoolerDSN string
	LeaseDSN  string
	Idle      time.Duration
	Stale     time.Duration
}

// newVerifyCmd builds `leasectl verify`; runF, when not nil, runs instead
// of runVerify with the parsed and checked options (tests).
func newVerifyCmd(app *App, runF func(*verifyOptions) error) *cobra.Command {
	opts := &verifyOptions{app: app}
	c := &cobra.Command{
		Use:   "verify [ROLE...]",
		Short: "Check a live deployment: one leader, clean failover, pooler rejection",
		Long: `The checks to run after a deploy and on game days, as one command.
For each role of keys.yaml (or each ROLE named):

  one_leader        exactly one session holds the role's key, and it is not
                    stale (idle longer than --stale)
  clean_failover    with --failover --yes: move the lease as failover does
                    (ask the leader to step down; terminate it if it does
                    not answer, or at once with --force), and a different
                    session must take over within --wait
  pooler_rejection  with --pooler-dsn: the session-stability probe must
                    refuse that DSN (the pooler workers must not hold leases
                    over)
  lease_dsn         with --lease-dsn or --idle: the probe must accept the
                    DSN the workers hold leases over (default: --dsn), its
                    session idle for --idle (a proxy that cuts idle
                    connections costs a takeover each time)

One line per check and role, pass / fail / skip with why. Exit 0 when no
check failed (skipped ones were not asked for), 1 otherwise.

--failover moves every checked role's lease: without --yes it asks on a
terminal, and with no terminal it exits 2 without doing anything.`,
		Example: `  leasectl verify                                    # one_leader for every role
  leasectl verify poller --failover --yes --wait 10s
  leasectl verify --pooler-dsn "$PGBOUNCER_TX_DSN" -o json
  leasectl verify --lease-dsn "$WORKERS_DSN" --idle 20s`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeRoles(app),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Roles = args
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runVerify(c.Context(), opts)
		},
	}
	f := c.Flags()
	f.BoolVar(&opts.Failover, "failover", false, "also fail each role over and time the takeover (needs --yes, or a yes on the terminal)")
	f.BoolVar(&opts.Force, "force", false, "with --failover: terminate each leader at once instead of asking it to step down")
	f.BoolVarP(&opts.Yes, "yes", "y", false, "confirm --failover without asking")
	f.DurationVar(&opts.Within, "wait", timing.DefaultTakeoverWait, "how long clean_failover waits for a stand-by to take over")
	f.Duration("within", timing.DefaultTakeoverWait, "")
	deprecatedAlias(f, "within", "wait")
	f.StringVar(&opts.PoolerDSN, "pooler-dsn", "", "a pooler DSN that the probe must refuse (pooler_rejection)")
	f.StringVar(&opts.LeaseDSN, "lease-dsn", "", "the DSN the workers hold leases over, which the probe must accept (lease_dsn; default --dsn)")
	f.DurationVar(&opts.Idle, "idle", 0, "with lease_dsn: keep the probe's session idle this long (a little above the heartbeat interval, e.g. 20s)")
	f.DurationVar(&opts.Stale, "stale", timing.DefaultStaleAfter, "a leader idle for longer than this fails one_leader")
	return c
}

// validate checks the flags, before anything is read or connected.
func (opts *verifyOptions) validate() error {
	switch {
	case opts.Within <= 0:
		return usageErrorf("invalid --wait %s: it must be positive, e.g. 15s", opts.Within)
	case opts.Stale <= 0:
		return usageErrorf("invalid --stale %s: it must be positive, e.g. 45s", opts.Stale)
	case opts.Idle < 0:
		return usageErrorf("invalid --idle %s: it must not be negative, e.g. 20s", opts.Idle)
	}
	return nil
}

func runVerify(ctx context.Context, opts *verifyOptions) error {
	app := opts.app
	f, err := app.LoadKeys()
	if err != nil {
		return err
	}
	roles := f.Roles
	if len(opts.Roles) > 0 {
		rks, err := resolveRoles(f, opts.Roles, rolesOnly, "verify")
		if err != nil {
			return err
		}
		roles = roles[:0:0]
		for _, rk := range rks {
			e, _ := f.Role(rk.Role)
			roles = append(roles, e)
		}
	}
	if len(roles) == 0 {
		return &InputError{Err: fmt.Errorf("nothing to verify: %s has no roles", f.Path)}
	}
	var pooler *pgx.ConnConfig
	if opts.PoolerDSN != "" {
		app.warnPassword(opts.PoolerDSN)
		if pooler, err = dbconn.Parse(opts.PoolerDSN, app.Global.Timeout); err != nil {
			return fmt.Errorf("--pooler-dsn: %w", err)
		}
		if err := checkProbeKeyIsFree(app, 0); err != nil {
			return err
		}
	}
	var leaseCfg *pgx.ConnConfig
	if opts.LeaseDSN != "" || opts.Idle > 0 {
		if leaseCfg, _, err = app.ConnConfig(opts.LeaseDSN); err != nil {
			return fmt.Errorf("--lease-dsn: %w", err)
		}
	}
	if opts.Failover && !opts.Yes {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = r.Name
		}
		what := fmt.Sprintf("--failover moves the lease of %s to a stand-by to time the takeover", strings.Join(names, ", "))
		if !app.IO.InTTY {
			return &InputError{Err: fmt.Errorf("%s; there is no terminal to ask on, so nothing was checked: add --yes to go ahead", what)}
		}
		w := app.IO.Out
		if app.JSON() {
			w = app.IO.ErrOut
		}
		ok, err := confirm(ctx, app, w, what+". Go ahead?")
		if err != nil {
			return err
		}
		if !ok {
			return &CheckFailedError{Message: "not confirmed: nothing was checked or moved"}
		}
	}

	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	what := "checking the leases"
	if opts.Failover {
		what = "checking the leases and failing each role over"
	}
	stopWaiting := app.waiting(what)
	rep, err := verify.Run(ctx, conn, verify.Options{
		Roles:        roles,
		StaleAfter:   opts.Stale,
		Failover:     opts.Failover,
		Force:        opts.Force,
		Within:       opts.Within,
		PoolerConfig: pooler,
		LeaseConfig:  leaseCfg,
		Idle:         opts.Idle,
		Timeout:      app.Global.Timeout,
	})
	stopWaiting()
	if err != nil {
		return err
	}
	explainNotAsked(rep)
	if app.JSON() {
		err = app.writeJSON(app.IO.Out, verifyJSONOf(rep, opts.Stale))
	} else {
		cfg := conn.Config()
		err = renderVerify(app.IO.Out, app.styles(), app.Color(), rep, dbconn.Addr(&cfg.Config), app.Width())
	}
	if err != nil {
		return err
	}
	if !rep.Passed() {
		var failed []string
		for _, r := range rep.Results {
			if r.Status == verify.Fail {
				failed = append(failed, strings.TrimSpace(r.Check+" "+r.Role))
			}
		}
		return &CheckFailedError{Message: fmt.Sprintf("verify: %d of %d checks failed: %s", len(failed), len(rep.Results), strings.Join(failed, ", "))}
	}
	return nil
}

func renderVerify(w io.Writer, st styles, color bool, rep *verify.Report, addr string, width int) error {
	if _, err := io.WriteString(w, serverLine(st, color, rep.Server, addr, width)+"\n"); err != nil {
		return err
	}
	var rows [][]string
	failedOver := false
	for _, r := range rep.Results {
		status := string(r.Status)
		role := r.Role
		if role == "" {
			role = "-"
		}
		rows = append(rows, []string{r.Check, role, status, r.Detail})
		failedOver = failedOver || (r.Failover != nil && r.Failover.Termination != nil)
	}
	opt := tableOptions{Width: width}
	if color {
		opt.Paint = map[string]func(string) string{"RESULT": func(s string) string {
			switch verify.Status(s) {
			case verify.Pass:
				return st.OK.Render(s)
			case verify.Fail:
				return st.Fail.Render(s)
			}
			return st.Dim.Render(s)
		}}
	}
	if err := writeTable(w, []string{"CHECK", "ROLE", "RESULT", "DETAIL"}, rows, opt); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nverify: %d passed, %d failed, %d skipped\n", rep.Count(verify.Pass), rep.Count(verify.Fail), rep.Count(verify.Skip))
	if failedOver {
		b.WriteString(wrapIndented(0, "Terminated leaders' programs may still be stopping: a leasectl run or lease package stand-by waits for them (the stop fence); other workers notice at their next heartbeat.", width) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- JSON ----

// verifyJSON is the documented schema of `leasectl verify -o json`
// (docs/json.md).
type verifyJSON struct {
	docHeader
	Server  dbconn.ServerInfo  `json:"server"`
	Counts  map[string]int     `json:"counts"`
	Results []verifyResultJSON `json:"results"`
}

type verifyResultJSON struct {
	Check    string        `json:"check"`
	Role     *string       `json:"role"`
	Key      *string       `json:"key"`
	Status   string        `json:"status"`
	Detail   string        `json:"detail"`
	Leader   *sessionJSON  `json:"leader"`
	Failover *failoverJSON `json:"failover"`
	Probe    *probeSummary `json:"probe"`
}

type probeSummary struct {
	Target  string        `json:"target"`
	Verdict probe.Verdict `json:"verdict"`
	Reasons []string      `json:"reasons"`
}

func verifyJSONOf(rep *verify.Report, staleAfter time.Duration) verifyJSON {
	out := verifyJSON{docHeader: header(rep.Passed()), Server: rep.Server, Results: make([]verifyResultJSON, 0, len(rep.Results)),
		Counts: map[string]int{}}
	for _, s := range []verify.Status{verify.Pass, verify.Fail, verify.Skip} {
		out.Counts[string(s)] = rep.Count(s)
	}
	for _, r := range rep.Results {
		j := verifyResultJSON{Check: r.Check, Status: string(r.Status), Detail: r.Detail}
		if r.Role != "" {
			role, key := r.Role, r.Key.String()
			j.Role, j.Key = &role, &key
		}
		if r.Leader != nil {
			l := sessionJSONOf(r.Leader, r.Now, staleAfter)
			j.Leader = &l
		}
		if r.Failover != nil {
			f := failoverJSONOf(r.Failover)
			j.Failover = &f
		}
		if p := r.Probe; p != nil {
			j.Probe = &probeSummary{Target: p.Target, Verdict: p.Verdict, Reasons: append([]string{}, p.Reasons()...)}
		}
		out.Results = append(out.Results, j)
	}
	return out
}

// explainNotAsked says, for each check skipped because it was not asked
// for, which flags ask for it.
func explainNotAsked(rep *verify.Report) {
	how := map[string]string{
		verify.CheckCleanFailover:   "--failover --yes moves each role's lease to a stand-by and times the takeover",
		verify.CheckPoolerRejection: "--pooler-dsn DSN names a pooler the probe must refuse",
		verify.CheckLeaseDSN:        "--lease-dsn DSN or --idle D probes the DSN the workers hold leases over",
	}
	for i, r := range rep.Results {
		if r.Status == verify.Skip && r.Detail == verify.NotAsked && how[r.Check] != "" {
			rep.Results[i].Detail = verify.NotAsked + " (" + how[r.Check] + ")"
		}
	}
}

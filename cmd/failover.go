package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
)

type failoverOptions struct {
	app   *App
	Role  string
	Key   *locks.Key // --key (k or k1,k2); nil: not given
	Yes   bool
	Force bool
	Wait  time.Duration

	keyFlag keyFlag
}

// newFailoverCmd builds `leasectl failover`; runF, when not nil, runs
// instead of runFailover with the parsed and checked options (tests).
func newFailoverCmd(app *App, runF func(*failoverOptions) error) *cobra.Command {
	opts := &failoverOptions{app: app}
	c := &cobra.Command{
		Use:   "failover ROLE | --key N",
		Short: "Move a role's lease on purpose: ask its leader to step down, report who takes over",
		Long: `Move a role's lease to a stand-by on purpose, for deploys, drills and a hung
leader.

By default failover asks the leader to step down: its lease session listens
for the request (leasectl run and the lease package do), answers at once,
stops its program, releases the key, and a stand-by in the lock queue takes
over within milliseconds. If the leader does not answer within --timeout (an
older leasectl, a hung process, a worker of your own), or answers but does
not release the key within the stop time it announced plus --timeout,
failover terminates its backend instead. --force terminates at once.

The holder is shown first (pid, application, client, session age). Without
--yes you are asked on a terminal; with no terminal nothing is done and
failover exits 2, saying what it would do.

The termination is one statement that re-checks, at that instant, that the
same backend (pid and backend_start) still holds the key in this database,
and waits up to --timeout for the backend to exit (pg_terminate_backend with
a timeout, PostgreSQL 14+). If the holder changed since it was shown,
nothing is terminated (exit 1). A holder that releases the key in the
moment between that check and the signal is terminated anyway; failover
then says so. Then failover waits up to --wait for another session to hold
the key and reports it with the measured takeover time; none in time is
exit 1.

Where the database has the term record (schema leasectl, which leasectl run
creates), holding the key is not yet leading: the new holder begins a term,
and starts its program, only once the previous leader's program has
stopped and its term has ended (or passed its deadline). failover then
reports success only once a new term has begun, held by the new holder,
with how long after the request it began. Meanwhile it says on stderr, a
line each time it changes, what the new holder waits for; no new term
within --wait is exit 1, saying what it still waited for. Without the
record the takeover is the end, as before.

Ending another role's backend needs membership in that role or in
pg_signal_backend; a superuser's backend only a superuser can end (exit 3,
with the grant). On a standby failover refuses (exit 2): its locks fence
nothing on the primary.

After a termination the old holder's program may still be stopping: a
leasectl run or lease package stand-by waits for the old leader's stop
fence before it starts, so the two never overlap; other workers notice at
their next heartbeat.`,
		Example: `  leasectl failover poller                 # shows the holder, asks before asking it to step down
  leasectl failover poller --yes --wait 30s
  leasectl failover poller --yes --force   # terminate at once, without asking the leader
  leasectl failover --key 1840000001 --yes -o json`,
		Args:              maxArgs(1),
		ValidArgsFunction: completeOneRole(app),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Role = args[0]
			}
			if opts.keyFlag.set {
				opts.Key = &opts.keyFlag.key
			}
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runFailover(c.Context(), opts)
		},
	}
	f := c.Flags()
	opts.keyFlag = keyFlag{pairs: true}
	f.Var(&opts.keyFlag, "key", "the advisory key to fail over instead of a ROLE: an integer in decimal or 0x hex, or k1,k2 for the two-int4 form")
	f.BoolVar(&opts.Yes, "yes", false, "fail over without asking for confirmation")
	f.BoolVar(&opts.Force, "force", false, "terminate the holder's backend at once instead of asking the leader to step down")
	f.DurationVar(&opts.Wait, "wait", 15*time.Second, "how long to wait for a stand-by to take over (and, with the term record, to begin its term)")
	return c
}

// validate checks the flags and arguments, before anything is read or
// connected.
func (opts *failoverOptions) validate() error {
	switch {
	case opts.Role == "" && opts.Key == nil:
		return usageErrorf("name the ROLE to fail over, or give --key N")
	case opts.Role != "" && opts.Key != nil:
		return usageErrorf("give a ROLE or --key, not both")
	case opts.Wait <= 0:
		return usageErrorf("invalid --wait %s: it must be positive, e.g. 15s", opts.Wait)
	}
	return nil
}

func runFailover(ctx context.Context, opts *failoverOptions) error {
	app := opts.app
	f, err := loadRoleMap(app, opts.Key != nil)
	if err != nil {
		return err
	}
	var key locks.Key
	if opts.Key != nil {
		key = *opts.Key
	} else {
		rk, err := resolveRole(f, opts.Role, keysByFlag, "fail over")
		if err != nil {
			return err
		}
		key = rk.Key
	}

	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	lctx, cancel := context.WithTimeout(ctx, app.Global.Timeout)
	target, err := locks.FindTarget(lctx, conn, key, f.NamesByKey())
	cancel()
	if err != nil {
		return err
	}

	// The holder is shown before anything happens; with -o json on stderr,
	// so that stdout is only the JSON document.
	st, color := app.styles(), app.Color()
	pre := app.IO.Out
	if app.JSON() {
		pre, color = app.IO.ErrOut, false
	}
	cfg := conn.Config()
	if !opts.Yes || !app.JSON() {
		lay := sessionLayoutOf(app)
		if app.JSON() {
			lay = sessionLayout{Wide: true} // on stderr, as it always was
		}
		if err := renderTarget(pre, st, color, target, dbconn.Addr(&cfg.Config), lay); err != nil {
			return err
		}
	}
	if !opts.Yes {
		h := target.Holder
		action := fmt.Sprintf("ask %s, connected %s, to step down (and terminate it if it does not within --timeout %s)", termSafe(h.Describe()), sessionAge(h, target.Now), app.Global.Timeout)
		if opts.Force {
			action = fmt.Sprintf("terminate %s, connected %s,", termSafe(h.Describe()), sessionAge(h, target.Now))
		}
		if !app.IO.InTTY {
			fmt.Fprintf(pre, "\n%s\n", wrapIndented(0, fmt.Sprintf("Would %s and wait up to %s for a stand-by to take over %s. Nothing was done.",
				action, opts.Wait, target.Locks.Name()), app.Width()))
			return &InputError{Err: fmt.Errorf("not confirmed, and there is no terminal to ask on: nothing was done; to fail over pid %d, run again with --yes: %s",
				h.PID, confirmCommand(opts))}
		}
		ok, err := confirm(app, pre, "\n"+wrapIndented(0, fmt.Sprintf("%s so that a stand-by takes over %s?", upperFirst(action), target.Locks.Name()), app.Width()))
		if err != nil {
			return err
		}
		if !ok {
			return &CheckFailedError{Message: "not confirmed: nothing was done"}
		}
	}

	// With the term record, the failover is over once a term after the
	// one current now has begun: the new leader's program starts then.
	bctx, cancel := context.WithTimeout(ctx, app.Global.Timeout)
	before, err := term.ReadBefore(bctx, conn, key)
	cancel()
	if err != nil {
		return err
	}
	res, err := target.Failover(ctx, conn, locks.FailoverOptions{TerminateTimeout: app.Global.Timeout, Wait: opts.Wait, Force: opts.Force})
	if res == nil {
		return err // nothing was terminated
	}
	var began *term.Began
	if err == nil && before != nil && res.Takeover != nil {
		var progress func(term.Wait)
		if !app.JSON() {
			progress = func(w term.Wait) {
				fmt.Fprintf(app.IO.ErrOut, "… %s %s: %s\n", time.Now().Format(time.TimeOnly), target.Locks.Name(), termSafe(w.String()))
			}
		}
		b, werr := before.Await(ctx, conn, term.AwaitOptions{Holder: res.Takeover.Holder, Since: res.Origin(), From: res.WaitedFrom(), Within: opts.Wait,
			ReadTimeout: app.Global.Timeout, OnWait: progress})
		switch {
		case errors.Is(werr, term.ErrNoTerm):
			err = fmt.Errorf("%s: %w; it begins one once that is over, and `leasectl who %s` shows when", target.Locks.Name(), werr, whoArg(target.Locks))
		case werr != nil:
			err = fmt.Errorf("%s: %w", target.Locks.Name(), werr)
		default:
			began = &b
		}
	}
	if app.JSON() {
		doc := failoverCmdJSON{docHeader: header(err == nil), Server: target.Server, ViaProxy: target.ViaProxy, failoverJSON: failoverJSONOf(res)}
		doc.addTerm(began, err)
		if werr := writeJSON(app.IO.Out, doc); werr != nil {
			return werr
		}
		return err
	}
	if werr := renderFailover(app.IO.Out, st, color, res, began, err, opts.Wait, app.Global.Timeout, app.Width()); werr != nil {
		return werr
	}
	return err
}

// whoArg names the lease as `leasectl who` takes it: its role, else its
// key (after "--" when negative).
func whoArg(l locks.RoleLocks) string {
	switch {
	case l.Role != "":
		return l.Role
	case strings.HasPrefix(l.Key.String(), "-"):
		return "-- " + l.Key.String()
	}
	return l.Key.String()
}

// confirmCommand is the command line that would do it without asking.
func confirmCommand(opts *failoverOptions) string {
	args := []string{"leasectl", "failover"}
	if opts.Key != nil {
		args = append(args, "--key", opts.Key.String())
	} else {
		args = append(args, opts.Role)
	}
	if opts.Wait != 15*time.Second {
		args = append(args, "--wait", opts.Wait.String())
	}
	if opts.Force {
		args = append(args, "--force")
	}
	return strings.Join(append(args, "--yes"), " ")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func sessionAge(s locks.Claimant, now time.Time) string {
	if s.BackendStart.IsZero() {
		return "since a time hidden from this role"
	}
	return fmtAge(now.Sub(s.BackendStart)) + " ago"
}

// renderTarget shows what a failover would act on: the server, the holder
// and the waiters, as `who` shows them.
func renderTarget(w io.Writer, st styles, color bool, t *locks.Target, addr string, lay sessionLayout) error {
	paint := painter(color)
	var b strings.Builder
	b.WriteString(serverLine(st, color, t.Server, addr, lay.Width))
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	l := t.Locks
	role := l.Role
	if role == "" {
		role = "-"
	}
	rows := [][]string{sessionRow(role, l.Key.String(), string(locks.Held)+waitingSuffix(l), t.Holder, t.Now)}
	for _, s := range l.Waiters {
		rows = append(rows, sessionRow(role, l.Key.String(), "waiting", s, t.Now))
	}
	if err := writeSessionTable(w, st, color, plainSessions, rows, lay); err != nil {
		return err
	}
	if t.ViaProxy {
		_, err := fmt.Fprintf(w, "\n%s %s\n", paint(st.Warn, "pooler:"), wrapIndented(len("pooler: "), fmt.Sprintf("leasectl reaches this server through a pooler or proxy, so pid %d is most likely one of the pooler's server connections: terminating it ends that server connection, not the worker's own client connection. A session-mode pooler closes the worker's connection with it; a transaction-mode pooler does not, and the worker may never notice (a lease was never safe there: see leasectl probe).",
			t.Holder.PID), lay.Width))
		return err
	}
	return nil
}

// renderFailover reports the request to step down or the termination, the
// takeover and, with the term record, the new leader's term (began);
// waitErr is why there was none. Lines are fitted to width (0: none).
func renderFailover(w io.Writer, st styles, color bool, res *locks.Failover, began *term.Began, waitErr error, wait, timeout time.Duration, width int) error {
	paint := painter(color)
	// line writes one message after its mark, escaped (it names sessions
	// and errors from the server) and wrapped under itself.
	line := func(b *strings.Builder, mark string, format string, args ...any) {
		fmt.Fprintf(b, "%s %s\n", mark, wrapIndented(2, termSafe(fmt.Sprintf(format, args...)), width))
	}
	t := res.Target
	name := t.Locks.Name()
	var b strings.Builder
	b.WriteString("\n")
	if rs := res.Resign; rs != nil {
		switch {
		case rs.Answered && rs.Released:
			line(&b, paint(st.OK, "✓"), "pid %d stepped down on request: it answered in %s, stopped its work and released %s %s after the request", t.Holder.PID, fmtMillis(rs.AnswerTook), name, fmtMillis(rs.ReleaseTook))
		case rs.Fallback != "":
			line(&b, paint(st.Warn, "!"), "asked pid %d to step down, but %s: terminating it", t.Holder.PID, rs.Fallback)
		}
	}
	if term := res.Termination; term != nil {
		if term.Gone {
			line(&b, paint(st.OK, "✓"), "terminated pid %d: its backend is gone, and its hold on %s with it (pg_terminate_backend confirmed the exit in %s)", term.PID, name, fmtMillis(term.Took))
		} else {
			line(&b, paint(st.Warn, "!"), "signalled pid %d, but its backend had not exited after %s (--timeout): it holds %s until it does", term.PID, timeout, name)
		}
	}
	since := "of the signal"
	if res.Path == locks.PathGraceful {
		since = "of the request"
	}
	if tk := res.Takeover; tk != nil {
		h := tk.Holder
		client := clientAddr(h)
		if h.Hidden {
			client = "hidden"
		}
		line(&b, paint(st.OK, "✓"), "pid %d took over %s within %s %s (%s clock): application %s, client %s", h.PID, name, fmtMillis(tk.After), since, takeoverClock(tk), orQuoted(h.Application), client)
		if tk.BeforeSignal {
			line(&b, paint(st.Warn, "!"), "pid %d held %s before the signal: pid %d had released it already, in the moment between the holder check and the signal, and was terminated anyway", h.PID, name, t.Holder.PID)
		}
		var noTerm *term.NoTermError
		switch {
		case began != nil:
			line(&b, paint(st.OK, "✓"), "pid %d began term %d of %s within %s %s (server clock): its work runs from then on", began.Holder.PID, began.Term.Epoch, name, fmtMillis(began.After), since)
		case errors.As(waitErr, &noTerm):
			line(&b, paint(st.Fail, "✗"), "pid %d took over %s but began no term within %s: %s", h.PID, name, wait, noTerm.Last.Explain())
		case waitErr != nil:
			line(&b, paint(st.Fail, "✗"), "could not watch for the new term of %s: %v", name, waitErr)
		}
	} else if !errors.Is(waitErr, locks.ErrNoTakeover) {
		line(&b, paint(st.Fail, "✗"), "could not watch for a stand-by taking over %s: %v", name, waitErr)
	} else {
		state := "the key is free: are the stand-bys running?"
		switch {
		case res.Termination != nil && !res.Termination.Gone:
			state = fmt.Sprintf("pid %d may still hold the key", res.Termination.PID)
		case res.Termination == nil:
			state = waitErr.Error()
		}
		line(&b, paint(st.Fail, "✗"), "no stand-by took over %s within %s: %s", name, wait, state)
	}
	if res.Termination != nil && began == nil {
		fmt.Fprintf(&b, "\n%s\n", wrapIndented(0, "The old holder's program may still be stopping: a leasectl run or lease package stand-by waits for it (the stop fence); other workers notice at their next heartbeat.", width))
		if t.ViaProxy {
			fmt.Fprintf(&b, "%s\n", wrapIndented(0, fmt.Sprintf("Through the pooler, what was terminated is the pooler's server connection pid %d, not the worker's client connection.", res.Termination.PID), width))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- JSON ----

// failoverCmdJSON is the documented schema of `leasectl failover -o json`
// (docs/json.md).
type failoverCmdJSON struct {
	docHeader
	Server   dbconn.ServerInfo `json:"server"`
	ViaProxy bool              `json:"via_proxy"`
	failoverJSON
	// Term is the new leader's term, with the term record; null without
	// it, and when none began.
	Term             *failoverTermJSON `json:"term"`
	TermBeganAfterMS *float64          `json:"term_began_after_ms"`
	// NoTermReason says what the new holder still waited for when no term
	// began within --wait; null otherwise.
	NoTermReason *string `json:"no_term_reason"`
}

// failoverTermJSON is the term that the new leader began.
type failoverTermJSON struct {
	Epoch     int64     `json:"epoch"`
	TermID    string    `json:"term_id"`
	Began     time.Time `json:"began"`
	HolderPID int64     `json:"holder_pid"`
}

// addTerm fills in the new leader's term, or why none began.
func (j *failoverCmdJSON) addTerm(began *term.Began, err error) {
	var noTerm *term.NoTermError
	switch {
	case began != nil:
		t := began.Term
		j.Term = &failoverTermJSON{Epoch: t.Epoch, TermID: t.ID, Began: t.Began, HolderPID: int64(t.Holder.BackendPID)}
		j.TermBeganAfterMS = msPtr(began.After)
	case errors.As(err, &noTerm):
		why := noTerm.Last.Explain()
		j.NoTermReason = &why
	}
}

package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
)

type failoverOptions struct {
	app  *App
	Role string
	Key  *locks.Key // --key (k or k1,k2); nil: not given
	// Replica is --replica: move every role off the replicas of that name.
	Replica      string
	replicaGiven bool
	Yes          bool
	Force        bool
	Wait         time.Duration

	keyFlag keyFlag
}

// newFailoverCmd builds `leasectl failover`; runF, when not nil, runs
// instead of runFailover with the parsed and checked options (tests).
func newFailoverCmd(app *App, runF func(*failoverOptions) error) *cobra.Command {
	opts := &failoverOptions{app: app}
	c := &cobra.Command{
		Use:   "failover ROLE | --key N | --replica NAME",
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
their next heartbeat.

A group run (leasectl run --procfile) leads many roles over one lease
session. failover ROLE asks it to step down from that role alone, and
never terminates that session unless --force, which moves every role the
group leads at once (the confirmation says which).

--replica NAME moves every role off one replica, for a node drain: NAME is
a replica's application_name (leasectl run NAME@HOST#PID by default), as
leasectl who --replicas lists them, or HOST#PID, or the HOST alone, which
names every replica on that host; several replicas of that name are all
drained. failover asks each to drain: a
group steps down from every role it leads and takes no roles until it
restarts; a single-role run steps down from its role. It then reports, for
each role, who took over and how long it took (and the new term), as
failover ROLE does. A group that does not answer is not terminated;
--force terminates each replica's lease session at once instead, which
moves all its roles together (its stop fence session is left alone, so
that the new leaders wait for its programs to stop). No replica of that
name is exit 1, listing the replicas seen.`,
		Example: `  leasectl failover poller                 # shows the holder, asks before asking it to step down
  leasectl failover poller --yes --wait 30s
  leasectl failover poller --yes --force   # terminate at once, without asking the leader
  leasectl failover --key 1840000001 --yes -o json
  leasectl failover --replica vm1          # drain the replicas on host vm1: every role they lead moves
  leasectl failover --replica vm1#4242     # drain the replica of process 4242 on vm1`,
		Args:              maxArgs(1),
		ValidArgsFunction: completeOneRole(app),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Role = args[0]
			}
			if opts.keyFlag.set {
				opts.Key = &opts.keyFlag.key
			}
			opts.replicaGiven = c.Flags().Changed("replica")
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
	f.StringVar(&opts.Replica, "replica", "", "move every role off the replicas of this `NAME` (an application_name, HOST#PID, or a HOST: every replica on it), as for a node drain")
	f.BoolVarP(&opts.Yes, "yes", "y", false, "fail over without asking for confirmation")
	f.BoolVar(&opts.Force, "force", false, "terminate the holder's backend at once instead of asking the leader to step down (with --replica: each replica's lease session, which moves all its roles at once)")
	f.DurationVar(&opts.Wait, "wait", timing.DefaultTakeoverWait, "how long to wait for a stand-by to take over (and, with the term record, to begin its term)")
	return c
}

// validate checks the flags and arguments, before anything is read or
// connected.
func (opts *failoverOptions) validate() error {
	switch {
	case opts.replicaGiven && opts.Replica == "":
		return usageErrorf("--replica needs a NAME: an application_name, HOST#PID or a HOST (leasectl who --replicas lists them)")
	case opts.replicaGiven && (opts.Role != "" || opts.Key != nil):
		return usageErrorf("--replica moves every role of a replica: give it without a ROLE or --key")
	case opts.Role == "" && opts.Key == nil && !opts.replicaGiven:
		return usageErrorf("name the ROLE to fail over, or give --key N (or --replica NAME, to move every role off a replica)")
	case opts.Role != "" && opts.Key != nil:
		return usageErrorf("give a ROLE or --key, not both")
	case opts.Wait <= 0:
		return usageErrorf("invalid --wait %s: it must be positive, e.g. 15s", opts.Wait)
	}
	return nil
}

func runFailover(ctx context.Context, opts *failoverOptions) error {
	if opts.replicaGiven {
		return runFailoverReplica(ctx, opts)
	}
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
		switch {
		case opts.Force && target.Group != nil:
			action = fmt.Sprintf("terminate %s, connected %s, the lease session of a group replica: every role it leads moves at once, not %s alone (%s),",
				termSafe(h.Describe()), sessionAge(h, target.Now), target.Locks.Name(), termSafe(roleNames(target.Group.Leads)))
		case opts.Force:
			action = fmt.Sprintf("terminate %s, connected %s,", termSafe(h.Describe()), sessionAge(h, target.Now))
		case target.Group != nil:
			action = fmt.Sprintf("ask %s, connected %s, a group replica, to step down from %s alone (its other roles stay; it is not terminated if it does not: that would move every role it leads)",
				termSafe(h.Describe()), sessionAge(h, target.Now), target.Locks.Name())
		}
		if !app.IO.InTTY {
			fmt.Fprintf(pre, "\n%s\n", wrapIndented(0, fmt.Sprintf("Would %s and wait up to %s for a stand-by to take over %s. Nothing was done.",
				action, opts.Wait, target.Locks.Name()), app.Width()))
			return &InputError{Err: fmt.Errorf("not confirmed, and there is no terminal to ask on: nothing was done; to fail over pid %d, run again with --yes: %s",
				h.PID, confirmCommand(opts))}
		}
		ok, err := confirm(ctx, app, pre, "\n"+wrapIndented(0, fmt.Sprintf("%s so that a stand-by takes over %s?", upperFirst(action), target.Locks.Name()), app.Width()))
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
	how := fmt.Sprintf("asking pid %d to step down; waiting for a stand-by to take over %s (up to %s)", target.Holder.PID, target.Locks.Name(), opts.Wait)
	if opts.Force {
		how = fmt.Sprintf("terminating pid %d; waiting for a stand-by to take over %s (up to %s)", target.Holder.PID, target.Locks.Name(), opts.Wait)
	}
	stopWaiting := app.waiting(how)
	res, err := target.Failover(ctx, conn, locks.FailoverOptions{TerminateTimeout: app.Global.Timeout, Wait: opts.Wait, Force: opts.Force})
	stopWaiting()
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
			if !b.Other {
				res.Takeover.BoundByTerm(b.After) // one clock for both lines
			}
		}
	}
	if app.JSON() {
		doc := failoverCmdJSON{docHeader: header(err == nil), Server: target.Server, ViaProxy: target.ViaProxy, failoverJSON: failoverJSONOf(res)}
		doc.addTerm(began, err)
		if werr := app.writeJSON(app.IO.Out, doc); werr != nil {
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
func whoArg(l locks.Lease) string {
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
	switch {
	case opts.replicaGiven:
		args = append(args, "--replica", shellQuote(opts.Replica))
	case opts.Key != nil:
		args = append(args, "--key", opts.Key.String())
	default:
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

func sessionAge(s locks.Session, now time.Time) string {
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
	for _, s := range l.StandBys {
		rows = append(rows, sessionRow(role, l.Key.String(), standingBy, s, t.Now))
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
		case rs.Answered && rs.Released && res.Takeover != nil:
			// The takeover line below bounds the release too (a stand-by
			// holds the key only after it was released), on the tighter
			// clock: one clock for both, in the order they happened.
			line(&b, paint(st.OK, "✓"), "pid %d stepped down on request: it answered in %s, stopped its work and released %s", t.Holder.PID, fmtMillis(rs.AnswerTook), name)
		case rs.Answered && rs.Released:
			line(&b, paint(st.OK, "✓"), "pid %d stepped down on request: it answered in %s, stopped its work and released %s within %s of the request (client clock)", t.Holder.PID, fmtMillis(rs.AnswerTook), name, fmtMillis(rs.ReleaseTook))
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
		case began != nil && began.Other:
			line(&b, paint(st.OK, "✓"), "pid %d leads %s by holding its key: it is not a lease of leasectl (it holds no lease mark), so it begins no term", began.Holder.PID, name)
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
	if res.Termination != nil && (began == nil || began.Other) {
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
	newTermJSON
}

// newTermJSON is the new leader's term after a failover, or why none
// began.
type newTermJSON struct {
	// Term is the new leader's term, with the term record; null without
	// it, when none began, and when the new holder is not a lease of
	// leasectl (it begins none).
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
func (j *newTermJSON) addTerm(began *term.Began, err error) {
	var noTerm *term.NoTermError
	switch {
	case began != nil && began.Other:
		// Not a lease of leasectl: it begins no term.
	case began != nil:
		t := began.Term
		j.Term = &failoverTermJSON{Epoch: t.Epoch, TermID: t.ID, Began: t.Began, HolderPID: int64(t.Holder.BackendPID)}
		j.TermBeganAfterMS = msPtr(began.After)
	case errors.As(err, &noTerm):
		why := noTerm.Last.Explain()
		j.NoTermReason = &why
	}
}

// ---- --replica ----

// replicaRun is what failover --replica did for one replica: the
// failover of each role it led (nil where nothing was done, with its
// error), and, for a group that led none, its answer to the drain.
type replicaRun struct {
	r       locks.DrainReplica
	results []*locks.Failover
	began   []*term.Began
	errs    []error
	// drain is the request to a group that leads no role; nil otherwise.
	drain    *locks.Resignation
	drainErr error
}

func runFailoverReplica(ctx context.Context, opts *failoverOptions) error {
	app := opts.app
	f, err := loadRoleMap(app, true)
	if err != nil {
		return err
	}
	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	lctx, cancel := context.WithTimeout(ctx, app.Global.Timeout)
	d, err := locks.FindDrain(lctx, conn, opts.Replica, f.NamesByKey())
	cancel()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(d.Replicas, func(r locks.DrainReplica) bool { return len(r.Leads) > 0 || (r.Group && !r.Drained && !opts.Force) }) {
		drained := ""
		if !slices.ContainsFunc(d.Replicas, func(r locks.DrainReplica) bool { return !r.Drained }) {
			drained = ", drained already: it takes no role until it restarts"
		}
		return fmt.Errorf("%w: %s leads no role%s (leasectl who --replicas lists what each replica leads)", locks.ErrNoReplica, replicaNames(d.Replicas), drained)
	}

	// What it acts on is shown before anything happens; with -o json on
	// stderr, so that stdout is only the JSON document.
	st, color := app.styles(), app.Color()
	pre := app.IO.Out
	if app.JSON() {
		pre, color = app.IO.ErrOut, false
	}
	cfg := conn.Config()
	width := app.Width()
	if !opts.Yes || !app.JSON() {
		lay := sessionLayoutOf(app)
		if app.JSON() {
			lay, width = sessionLayout{Wide: true}, 0
		}
		if err := renderDrainTarget(pre, st, color, d, dbconn.Addr(&cfg.Config), lay); err != nil {
			return err
		}
	}
	if !opts.Yes {
		actions := make([]string, 0, len(d.Replicas))
		for _, r := range d.Replicas {
			actions = append(actions, drainAction(r, opts.Force, d.Now, app.Global.Timeout))
		}
		action := strings.Join(actions, "; ")
		if !app.IO.InTTY {
			fmt.Fprintf(pre, "\n%s\n", wrapIndented(0, fmt.Sprintf("Would %s, and wait up to %s for stand-bys to take over each role. Nothing was done.", action, opts.Wait), app.Width()))
			return &InputError{Err: fmt.Errorf("not confirmed, and there is no terminal to ask on: nothing was done; to fail over %s, run again with --yes: %s",
				replicaNames(d.Replicas), confirmCommand(opts))}
		}
		ok, err := confirm(ctx, app, pre, "\n"+wrapIndented(0, upperFirst(action)+", so that stand-bys take over each role?", app.Width()))
		if err != nil {
			return err
		}
		if !ok {
			return &CheckFailedError{Message: "not confirmed: nothing was done"}
		}
	}

	// With the term record, each role's failover is over once a term after
	// the one current now has begun.
	targets := d.Targets()
	befores := make([]*term.Before, len(targets))
	for i, t := range targets {
		bctx, cancel := context.WithTimeout(ctx, app.Global.Timeout)
		befores[i], err = term.ReadBefore(bctx, conn, t.Locks.Key)
		cancel()
		if err != nil {
			return err
		}
	}
	stopWaiting := app.waiting(fmt.Sprintf("draining; waiting for stand-bys to take over %s (up to %s each)", plural(len(targets), "role"), opts.Wait))
	defer stopWaiting()
	results, errs := locks.FailoverAll(ctx, conn, targets, locks.FailoverOptions{TerminateTimeout: app.Global.Timeout, Wait: opts.Wait, Force: opts.Force, Drain: true})
	runs := make([]*replicaRun, len(d.Replicas))
	next := 0
	for ri, r := range d.Replicas {
		run := &replicaRun{r: r}
		runs[ri] = run
		for range r.Targets {
			run.results, run.errs = append(run.results, results[next]), append(run.errs, errs[next])
			run.began = append(run.began, nil)
			next++
		}
		if len(r.Leads) == 0 && r.Group && !r.Drained && !opts.Force && len(r.Waits) > 0 {
			rs, err := locks.AskToDrain(ctx, conn, r.Waits[0].Key, r.Session.PID, app.Global.Timeout)
			run.drain, run.drainErr = &rs, err
		}
	}
	next = 0
	for _, run := range runs {
		for i, res := range run.results {
			before := befores[next]
			next++
			if run.errs[i] != nil || before == nil || res == nil || res.Takeover == nil {
				continue
			}
			name := res.Target.Locks.Name()
			var progress func(term.Wait)
			if !app.JSON() {
				progress = func(w term.Wait) {
					fmt.Fprintf(app.IO.ErrOut, "… %s %s: %s\n", time.Now().Format(time.TimeOnly), name, termSafe(w.String()))
				}
			}
			b, werr := before.Await(ctx, conn, term.AwaitOptions{Holder: res.Takeover.Holder, Since: res.Origin(), From: res.WaitedFrom(), Within: opts.Wait,
				ReadTimeout: app.Global.Timeout, OnWait: progress})
			switch {
			case errors.Is(werr, term.ErrNoTerm):
				run.errs[i] = fmt.Errorf("%s: %w; it begins one once that is over, and `leasectl who %s` shows when", name, werr, whoArg(res.Target.Locks))
			case werr != nil:
				run.errs[i] = fmt.Errorf("%s: %w", name, werr)
			default:
				run.began[i] = &b
				if !b.Other {
					res.Takeover.BoundByTerm(b.After)
				}
			}
		}
	}
	var all []error
	for _, run := range runs {
		all = append(all, run.errs...)
		all = append(all, run.drainErr)
	}
	err = errors.Join(all...)
	if app.JSON() {
		doc := failoverReplicaJSON{docHeader: header(err == nil), Server: d.Server, ViaProxy: d.ViaProxy, Replica: opts.Replica, Force: opts.Force,
			Replicas: make([]drainedReplicaJSON, 0, len(runs))}
		for _, run := range runs {
			doc.Replicas = append(doc.Replicas, drainedReplicaJSONOf(run))
		}
		if werr := app.writeJSON(app.IO.Out, doc); werr != nil {
			return werr
		}
		return err
	}
	if werr := renderDrain(app.IO.Out, st, color, runs, opts, app.Global.Timeout, width); werr != nil {
		return werr
	}
	return err
}

// replicaNames names replicas in a message: `replica "A" (pid 1)`, or
// `replicas "A" (pid 1) and "B" (pid 2)`.
func replicaNames(rs []locks.DrainReplica) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = fmt.Sprintf("%q (pid %d)", r.Session.Application, r.Session.PID)
	}
	if len(names) == 1 {
		return "replica " + names[0]
	}
	return "replicas " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// drainAction says what failover --replica does to r, for the prompt.
func drainAction(r locks.DrainReplica, force bool, now time.Time, timeout time.Duration) string {
	who := fmt.Sprintf("%s, connected %s", termSafe(r.Session.Describe()), sessionAge(r.Session, now))
	leads := termSafe(roleNames(r.Leads))
	switch {
	case len(r.Leads) == 0 && r.Drained:
		return fmt.Sprintf("leave %s alone: it is drained already, and leads no role", who)
	case len(r.Leads) == 0 && (force || !r.Group):
		return fmt.Sprintf("leave %s alone: it leads no role", who)
	case len(r.Leads) == 0:
		return fmt.Sprintf("ask group replica %s, to drain: it leads no role, and takes none until it restarts", who)
	case force:
		fence := ""
		if r.Fence != nil {
			fence = fmt.Sprintf("; its stop fence session, pid %d, is left alone, so that the new leaders wait for its programs to stop", r.Fence.PID)
		}
		return fmt.Sprintf("terminate the lease session of %s: every role it leads moves at once (%s)%s", who, leads, fence)
	case r.Group:
		return fmt.Sprintf("ask group replica %s, to drain: to step down from every role it leads (%s) and take none until it restarts (it is not terminated if it does not answer: --force does that)", who, leads)
	}
	return fmt.Sprintf("ask %s, to step down from %s (and terminate it if it does not within --timeout %s)", who, leads, timeout)
}

// renderDrainTarget shows what failover --replica acts on: the server, the
// replicas of that name, and the roles they lead as who shows them.
func renderDrainTarget(w io.Writer, st styles, color bool, d *locks.Drain, addr string, lay sessionLayout) error {
	paint := painter(color)
	var b strings.Builder
	b.WriteString(serverLine(st, color, d.Server, addr, lay.Width))
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	rs := make([]locks.Replica, len(d.Replicas))
	for i, r := range d.Replicas {
		rs[i] = r.Replica
	}
	if err := writeReplicaTable(w, rs, d.Now, lay); err != nil {
		return err
	}
	var rows [][]string
	for _, t := range d.Targets() {
		l := t.Locks
		role := l.Role
		if role == "" {
			role = "-"
		}
		rows = append(rows, sessionRow(role, l.Key.String(), string(locks.Held)+waitingSuffix(l), t.Holder, t.Now))
		for _, s := range l.Waiters {
			rows = append(rows, sessionRow(role, l.Key.String(), "waiting", s, t.Now))
		}
		for _, s := range l.StandBys {
			rows = append(rows, sessionRow(role, l.Key.String(), standingBy, s, t.Now))
		}
	}
	if len(rows) > 0 {
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		if err := writeSessionTable(w, st, color, plainSessions, rows, lay); err != nil {
			return err
		}
	}
	var foot strings.Builder
	if len(d.Replicas) > 1 {
		fmt.Fprintf(&foot, "\n%s %s\n", paint(st.Warn, "several:"), wrapIndented(len("several: "), termSafe(fmt.Sprintf("%q names %d replicas: %s; failover moves the roles of each.", d.Name, len(d.Replicas), replicaNames(d.Replicas))), lay.Width))
	}
	if d.ViaProxy {
		fmt.Fprintf(&foot, "\n%s %s\n", paint(st.Warn, "pooler:"), wrapIndented(len("pooler: "), "leasectl reaches this server through a pooler or proxy, so the sessions shown are most likely the pooler's server connections: terminating one ends that server connection, not the worker's own client connection.", lay.Width))
	}
	_, err := io.WriteString(w, foot.String())
	return err
}

// renderDrain reports failover --replica: for each replica, the answer to
// the drain or the failover of each role it led, as failover ROLE reports
// one, and a last line that sums it up.
func renderDrain(w io.Writer, st styles, color bool, runs []*replicaRun, opts *failoverOptions, timeout time.Duration, width int) error {
	paint := painter(color)
	var b strings.Builder
	line := func(mark, text string) {
		fmt.Fprintf(&b, "%s %s\n", mark, wrapIndented(2, termSafe(text), width))
	}
	moved, roles := 0, 0
	drained := make([]locks.DrainReplica, len(runs))
	for ri, run := range runs {
		r := run.r
		drained[ri] = r
		fmt.Fprintf(&b, "\n%s\n", wrapIndented(0, termSafe(fmt.Sprintf("%s replica %q (pid %d) leads %s", replicaKind(r.Replica), r.Session.Application, r.Session.PID, countRoles(len(r.Leads)))), width))
		switch {
		case run.drain != nil && run.drainErr == nil:
			line(paint(st.OK, "✓"), fmt.Sprintf("it answered the drain in %s: it takes no role until it restarts", fmtMillis(run.drain.AnswerTook)))
		case run.drainErr != nil:
			line(paint(st.Fail, "✗"), fmt.Sprintf("it did not answer the drain: %v", run.drainErr))
		case r.Drained && len(r.Leads) == 0:
			line(paint(st.OK, "✓"), "it is drained already: it takes no role until it restarts")
		}
		for i, res := range run.results {
			roles++
			if res == nil {
				line(paint(st.Fail, "✗"), fmt.Sprintf("%s was not moved: %v", r.Targets[i].Locks.Name(), run.errs[i]))
				continue
			}
			if _, err := io.WriteString(w, b.String()); err != nil {
				return err
			}
			b.Reset()
			if err := renderFailover(w, st, color, res, run.began[i], run.errs[i], opts.Wait, timeout, width); err != nil {
				return err
			}
			if run.errs[i] == nil {
				moved++
			}
		}
	}
	if roles > 0 {
		mark := paint(st.OK, "✓")
		if moved < roles {
			mark = paint(st.Fail, "✗")
		}
		b.WriteString("\n")
		line(mark, fmt.Sprintf("moved %d of %s off %s", moved, countRoles(roles), replicaNames(drained)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// countRoles is "1 role", "2 roles".
func countRoles(n int) string {
	if n == 1 {
		return "1 role"
	}
	return strconv.Itoa(n) + " roles"
}

// failoverReplicaJSON is the documented schema of `leasectl failover
// --replica -o json` (docs/json.md).
type failoverReplicaJSON struct {
	docHeader
	Server   dbconn.ServerInfo    `json:"server"`
	ViaProxy bool                 `json:"via_proxy"`
	Replica  string               `json:"replica"`
	Force    bool                 `json:"force"`
	Replicas []drainedReplicaJSON `json:"replicas"`
}

// drainedReplicaJSON is one replica of failover --replica: the replica as
// it was looked up, its answer to the drain when it led no role, and the
// failover of each role it led.
type drainedReplicaJSON struct {
	replicaJSON
	Drain     *drainAnswerJSON   `json:"drain"`
	Failovers []roleFailoverJSON `json:"failovers"`
}

// drainAnswerJSON is a group's answer to the drain when it led no role.
type drainAnswerJSON struct {
	Answered bool     `json:"answered"`
	AnswerMS *float64 `json:"answer_ms"`
	Error    *string  `json:"error"`
}

// roleFailoverJSON is the failover of one role of a drained replica.
type roleFailoverJSON struct {
	failoverJSON
	newTermJSON
	// Error says why the role did not move (or began no term); null when
	// it did.
	Error *string `json:"error"`
}

func drainedReplicaJSONOf(run *replicaRun) drainedReplicaJSON {
	j := drainedReplicaJSON{replicaJSON: replicaJSONOf(run.r.Replica), Failovers: make([]roleFailoverJSON, 0, len(run.results))}
	if rs := run.drain; rs != nil {
		a := &drainAnswerJSON{Answered: rs.Answered}
		if rs.Answered {
			a.AnswerMS = msPtr(rs.AnswerTook)
		}
		if run.drainErr != nil {
			msg := run.drainErr.Error()
			a.Error = &msg
		}
		j.Drain = a
	}
	for i, res := range run.results {
		if res == nil { // nothing was done
			res = &locks.Failover{Target: run.r.Targets[i], Path: pathNone}
		}
		rf := roleFailoverJSON{failoverJSON: failoverJSONOf(res)}
		rf.addTerm(run.began[i], run.errs[i])
		if err := run.errs[i]; err != nil {
			msg := err.Error()
			rf.Error = &msg
		}
		j.Failovers = append(j.Failovers, rf)
	}
	return j
}

// pathNone is the path of a role of failover --replica for which nothing
// was done (a group that did not answer is not terminated without --force).
const pathNone = "none"

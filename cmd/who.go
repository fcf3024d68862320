package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// defaultWatchInterval is the redraw interval of a bare --watch.
const defaultWatchInterval = 2 * time.Second

type whoOptions struct {
	app   *App
	Args  []string // ROLE names and KEYs
	All   bool
	Stale time.Duration
	Check bool
	// Replicas lists the processes that serve roles instead of the roles.
	Replicas bool
	Watch    time.Duration // 0: draw once
	// WatchGiven: --watch was given (Watch holds its interval).
	WatchGiven bool
}

// newWhoCmd builds `leasectl who`; runF, when not nil, runs instead of
// runWho with the parsed and checked options (tests).
func newWhoCmd(app *App, runF func(*whoOptions) error) *cobra.Command {
	opts := &whoOptions{app: app}
	c := &cobra.Command{
		Use:   "who [ROLE|KEY ...]",
		Short: "Show who holds and awaits each role's lease, and whether the holder is stale",
		Long: `Show, from the server itself, which session holds each role's advisory key
and which sessions wait for it: pg_locks joined with pg_stat_activity in one
query, for the current database only (advisory locks are per database).

With no arguments every role of keys.yaml is shown; ROLE names or bare
integer KEYs (or k1,k2 for the two-int4 form) narrow it; negative keys go
after "--" (leasectl who -- -1). --all adds every other advisory lock of the
database.

A holder idle for longer than --stale is flagged STALE: a leader heartbeats
on its lease session, so a long-idle holder is hung, or its lock is stranded
on a pooled server connection whose client went away. A holder with no pid
is a prepared transaction (ROLLBACK PREPARED releases it).

Without pg_read_all_stats the server hides other roles' client, session
start and state: they show as "hidden", with the GRANT that reveals them.

Where the database has the term record (schema leasectl, which leasectl run
creates), who also reads each role's current term, with one more query:
TERM shows the holder's term epoch (e42); "e42 STALE" a term its holder has
not renewed for longer than a live holder ever lets it (frozen or hung);
WAITING a holder that has not begun a term, with what it waits for (the
previous term's end, at most until its deadline) in a note below the table.
-o wide adds BEGAN and RENEWED: how long ago the term began and was last
renewed. Without the record (or without the privilege to use it) none of
this is shown.

A group run (leasectl run --procfile) serves many roles from one lease
session, which holds, in shared mode, a presence lock for each role it
serves; its stand-bys poll for the keys instead of queueing. who counts
them as waiting, beside the queued sessions, on lines of their own
("standing by"); with --all each presence lock is a line labelled
"presence of ROLE", never a holder of anything. --replicas lists the
replicas instead of the roles: each lease session (REPLICA is its
application_name, as failover --replica takes it), its backend and client,
how many roles it leads and waits for, and the roles it leads.

--check exits 1 when a requested role has no single live leader (no holder,
a stale one, a shared hold or a prepared transaction; with the term record
also a holder whose term is stale, or that has not begun one), for alerts
and deploy gates. --watch (-w) redraws every 2s until Ctrl-C, with the time
and the last changes of leader under the table; give another interval after
"=": --watch=5s.

On a terminal the table has the columns ROLE, STATE, PID, APPLICATION and
LAST ACTIVITY (and TERM, with the term record), fitted to its width
($COLUMNS when set): PID, LAST ACTIVITY, then TERM give way; APPLICATION,
the replica's name, is never cut. -o wide adds KEY, USER, CLIENT and CONNECTED (and
BEGAN and RENEWED). When stdout is not a terminal every column is shown and
no line is wrapped. Names from the server are shown with control
characters escaped (\x1b, \r, \u202e).`,
		Example: `  leasectl who                       # every role of keys.yaml
  leasectl who poller --check        # exit 1 when poller has no live leader
  leasectl who --all                 # also advisory locks of no role
  leasectl who 1840000001 --stale 15s
  leasectl who --watch               # follow a failover live
  leasectl who -o wide               # every column: KEY, USER, CLIENT, CONNECTED too
  leasectl who --replicas            # the replicas, and the roles each leads
  leasectl who -o json | jq '.leases[] | select(.state == "FREE") | .role'`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeRoles(app),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Args = args
			opts.WatchGiven = c.Flags().Changed("watch")
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runWho(c.Context(), opts)
		},
	}
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		var unknown *pflag.NotExistError
		if !errors.As(err, &unknown) {
			return flagError(c, err)
		}
		switch sn := unknown.GetSpecifiedShortnames(); {
		case slices.Contains(app.args, "-w"+sn):
			// -w5s: pflag reads 5 and s as more shorthand flags.
			return usageErrorf("-w%s: write the interval after \"=\": -w=%s", sn, sn)
		case isNegativeKey(sn):
			return usageErrorf("%v: a negative key looks like a flag; put keys after --: leasectl who -- -%s", err, sn)
		}
		return flagError(c, err)
	})
	f := c.Flags()
	f.BoolVar(&opts.All, "all", false, "also show advisory locks whose keys are in no role of keys.yaml")
	f.BoolVar(&opts.Replicas, "replicas", false, "list the replicas that serve roles (group runs, and single-role runs), with how many roles each leads and waits for, instead of the roles")
	f.DurationVar(&opts.Stale, "stale", timing.DefaultStaleAfter, "flag a holder idle for longer than this as STALE (three missed 15s heartbeats)")
	f.BoolVar(&opts.Check, "check", false, "exit 1 when a requested role has no single live leader (no holder, a stale one, a shared hold or a prepared transaction; with the term record, a holder whose term is stale or not begun)")
	f.DurationVarP(&opts.Watch, "watch", "w", 0, "redraw until Ctrl-C, every 2s or every `INTERVAL` given after \"=\" (--watch=5s, -w=5s)")
	f.Lookup("watch").NoOptDefVal = defaultWatchInterval.String()
	setOutputs(c, formatText, outputWide, formatJSON)
	return c
}

// isNegativeKey says whether the shorthands of an unknown flag are a
// negative key (-1, -1,-2) taken for flags: a digit, then digits, commas
// and dashes.
func isNegativeKey(sn string) bool {
	if sn == "" || sn[0] < '0' || sn[0] > '9' {
		return false
	}
	return strings.Trim(sn, "0123456789,-") == ""
}

// whoSelection is what the arguments asked for.
type whoSelection struct {
	roles *keys.File  // the whole role map
	want  []locks.Key // the keys to show, free ones included
}

func runWho(ctx context.Context, opts *whoOptions) error {
	sel, err := opts.selection()
	if err != nil {
		return err
	}
	if opts.Watch > 0 {
		return watchWho(ctx, opts, sel)
	}
	// One reading, rendered once: the heap that 10,000 leases make lives
	// until the end, and Go's default GOGC of 100 collects it over and
	// over while it grows. At 400, who --all -o json takes about a tenth
	// less time, for about 4 MB more peak RSS.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	conn, err := opts.app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	view, err := readWho(ctx, opts, conn, sel)
	if err != nil {
		return err
	}
	if err := renderWho(opts.app.IO.Out, opts, view); err != nil {
		return err
	}
	if opts.Check {
		return view.checkError()
	}
	return nil
}

// validate checks the flags, before anything is read or connected.
func (opts *whoOptions) validate() error {
	if err := checkWatchArg(opts.app.args); err != nil {
		return err
	}
	switch {
	case opts.Stale <= 0:
		return usageErrorf("invalid --stale %s: it must be positive, e.g. 45s", opts.Stale)
	case opts.Replicas && opts.Check:
		return usageErrorf("--replicas and --check do not combine: --check checks the roles (leasectl who --check)")
	case opts.Replicas && opts.All:
		return usageErrorf("--replicas lists replicas, not locks: drop --all")
	case opts.Check && opts.Watch > 0:
		return usageErrorf("--check and --watch do not combine: --check is one verdict, --watch never ends")
	case opts.WatchGiven && opts.Watch < 100*time.Millisecond:
		return usageErrorf("invalid --watch %s: use an interval of at least 100ms, e.g. --watch=2s", opts.Watch)
	}
	return nil
}

// checkWatchArg refuses `--watch 5` and `--watch 5s`: --watch takes its
// interval only after "=" (--watch=5s), so the word after a bare --watch is
// an argument, and a number there would silently be the key 5 watched every
// 2s. args is the whole command line.
func checkWatchArg(args []string) error {
	for i, a := range args {
		if a == "--" {
			return nil
		}
		if (a != "--watch" && a != "-w") || i+1 >= len(args) {
			continue
		}
		next := args[i+1]
		_, durErr := time.ParseDuration(next)
		switch {
		case isNumber(next):
			return usageErrorf("%s %s is ambiguous: write %s=%ss to redraw every %s seconds, or put the key first to watch key %s (leasectl who %s %s)",
				a, next, a, next, next, next, next, a)
		case durErr == nil:
			return usageErrorf("%s takes its interval after \"=\": write %s=%s", a, a, next)
		}
	}
	return nil
}

// isNumber reports whether s is a plain non-negative number (5, 0.5):
// digits, then optionally a point and more digits.
func isNumber(s string) bool {
	whole, frac, _ := strings.Cut(s, ".")
	return whole != "" && strings.Trim(whole, "0123456789") == "" && strings.Trim(frac, "0123456789") == ""
}

// selection resolves the arguments against keys.yaml. The file may be
// missing (not invalid) when only keys or --all are asked for and no keys
// file was named.
func (opts *whoOptions) selection() (whoSelection, error) {
	var sel whoSelection
	f, err := loadRoleMap(opts.app, opts.All || allKeys(opts.Args) || (opts.Replicas && len(opts.Args) == 0))
	if err != nil {
		return sel, err
	}
	sel.roles = f
	if len(opts.Args) == 0 {
		for _, r := range f.Roles {
			sel.want = append(sel.want, locks.BigintKey(r.Key))
		}
		if opts.Check && len(sel.want) == 0 {
			return sel, &InputError{Err: fmt.Errorf("--check has nothing to check: %s has no roles; name the KEYs to check", f.Path)}
		}
		return sel, nil
	}
	rks, err := resolveRoles(f, opts.Args, keysAsArgs, "show")
	if err != nil {
		return sel, err
	}
	for _, rk := range rks {
		sel.want = append(sel.want, rk.Key)
	}
	return sel, nil
}

func allKeys(args []string) bool {
	for _, a := range args {
		if _, err := locks.ParseKey(a); err != nil {
			return false
		}
	}
	return len(args) > 0
}

// whoView is one reading: the server that answered and the leases to show.
type whoView struct {
	server     dbconn.ServerInfo
	addr       string // where we connected, for the header when the server does not say (unix socket)
	now        time.Time
	leases     []locks.Lease
	all        bool
	staleAfter time.Duration
	// terms are the leases' current terms; nil when the database has no
	// term record that this role may use.
	terms *term.Record
	// replicas, with --replicas, are shown instead of the leases
	// (showReplicas).
	replicas     []locks.Replica
	showReplicas bool
}

func readWho(ctx context.Context, opts *whoOptions, conn *pgx.Conn, sel whoSelection) (*whoView, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.app.Global.Timeout)
	defer cancel()
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	cfg := conn.Config()
	if opts.Replicas {
		return readReplicas(ctx, conn, opts, sel, &whoView{server: server, addr: dbconn.Addr(&cfg.Config), staleAfter: opts.Stale, showReplicas: true})
	}
	snap, err := locks.Read(ctx, conn, locks.Filter{All: opts.All, Keys: sel.want, Presence: true})
	if err != nil {
		return nil, err
	}
	leases := snap.ByRole(sel.roles.NamesByKey(), sel.want, opts.All)
	ids := make([]int64, 0, len(leases))
	for _, l := range leases {
		if l.Key.Form == locks.Bigint {
			ids = append(ids, l.Key.ID)
		}
	}
	terms, err := term.ReadRecord(ctx, conn, ids)
	if err != nil {
		return nil, err
	}
	return &whoView{server: server, addr: dbconn.Addr(&cfg.Config), now: snap.Now,
		leases: leases, all: opts.All, staleAfter: opts.Stale, terms: terms}, nil
}

// checkError is the --check verdict: every requested lease needs exactly
// one live leader ([locks.Lease.Health], as verify's one_leader) and,
// with the term record, one that leads a term it renews
// ([term.Record.Health]).
func (v *whoView) checkError() error {
	if v.showReplicas {
		return nil // --replicas checks nothing
	}
	var bad []string
	for _, l := range v.leases {
		if !l.Requested {
			continue
		}
		verdict := v.terms.Health(l, v.now, v.staleAfter)
		if verdict.OK() {
			continue
		}
		switch verdict.Locks {
		case locks.Healthy:
			bad = append(bad, verdict.Problem(l.Name()))
		case locks.NoHolder:
			bad = append(bad, l.Name()+" has no holder")
		case locks.StaleHolder:
			h, _ := l.Holder()
			idle, _ := h.Idle(v.now)
			bad = append(bad, fmt.Sprintf("%s's holder %s is stale (idle %s > --stale %s)", l.Name(), holderName(h), fmtAge(idle), v.staleAfter))
		case locks.SharedHolders:
			bad = append(bad, l.Name()+": "+l.SharedDetail())
		case locks.PreparedHolder:
			bad = append(bad, l.Name()+" is "+l.PreparedDetail())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &CheckFailedError{Message: "who --check: " + strings.Join(bad, "; ")}
}

func holderName(s locks.Session) string {
	if s.Prepared != nil {
		return fmt.Sprintf("prepared transaction %q", s.Prepared.GID)
	}
	return "pid " + strconv.Itoa(int(s.PID))
}

func renderWho(w io.Writer, opts *whoOptions, v *whoView) error {
	if opts.app.JSON() {
		return writeWhoJSON(w, v, opts.app.indentJSON())
	}
	return renderWhoText(w, opts.app.styles(), opts.app.Color(), v, sessionLayoutOf(opts.app))
}

// readReplicas reads the replicas that serve roles into v: every advisory
// lock of the database, in one query, laid out by process
// ([locks.Snapshot.Replicas]). ROLE or KEY arguments keep the replicas that
// lead or wait for one of them.
func readReplicas(ctx context.Context, conn *pgx.Conn, opts *whoOptions, sel whoSelection, v *whoView) (*whoView, error) {
	snap, err := locks.Read(ctx, conn, locks.Filter{All: true})
	if err != nil {
		return nil, err
	}
	v.now = snap.Now
	all := snap.Replicas(sel.roles.NamesByKey())
	v.replicas = make([]locks.Replica, 0, len(all))
	for _, r := range all {
		if len(opts.Args) == 0 || slices.ContainsFunc(slices.Concat(r.Leads, r.Waits), func(ref locks.RoleRef) bool { return slices.Contains(sel.want, ref.Key) }) {
			v.replicas = append(v.replicas, r)
		}
	}
	return v, nil
}

// watchWho redraws until ctx ends (Ctrl-C): in place on a terminal, as a
// stream of frames with a separator otherwise, one JSON document a frame
// with -o json. A failed reading is reported (in the frame; on stderr for
// JSON) and the connection is opened again for the next one, so a restart
// or failover of the server itself can be watched too.
func watchWho(ctx context.Context, opts *whoOptions, sel whoSelection) error {
	app := opts.app
	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(opts.Watch)
	defer tick.Stop()
	st := app.styles()
	inPlace := app.IO.OutTTY && !app.JSON()
	var frame bytes.Buffer
	changes := &leaderChanges{}
	for n := 0; ; n++ {
		var view *whoView
		if conn == nil {
			conn, err = app.Connect(ctx, "")
		}
		if err == nil {
			view, err = readWho(ctx, opts, conn, sel)
		}
		if ctx.Err() != nil {
			return nil
		}
		frame.Reset()
		switch {
		case inPlace:
			frame.WriteString("\x1b[H\x1b[2J") // home, clear: redraw in place
		case !app.JSON() && n > 0:
			fmt.Fprintf(&frame, "\n--- %s\n", time.Now().Format(time.DateTime))
		}
		switch {
		case err != nil:
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			msg := fmt.Sprintf("%s %s: %s (retrying every %s)\n", st.Fail.Render("✗"), time.Now().Format(time.TimeOnly), termSafe(err.Error()), opts.Watch)
			if app.JSON() {
				fmt.Fprint(app.IO.ErrOut, msg)
			} else {
				frame.WriteString(msg)
			}
			err = nil
		case app.JSON():
			if err := writeWhoJSON(&frame, view, app.indentJSON()); err != nil {
				return err
			}
		default:
			if err := renderWhoText(&frame, st, app.Color(), view, sessionLayoutOf(app)); err != nil {
				return err
			}
			changes.see(view, time.Now())
			changes.render(&frame, st, app.Color())
		}
		if inPlace {
			fmt.Fprintf(&frame, "\n%s\n", st.Dim.Render(fmt.Sprintf("%s · every %s · Ctrl-C to stop", time.Now().Format(time.TimeOnly), opts.Watch)))
		}
		if frame.Len() > 0 {
			if _, err := app.IO.Out.Write(frame.Bytes()); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// leaderChanges follows, from frame to frame of who --watch, which session
// leads each role, and keeps the last changes for under the table.
type leaderChanges struct {
	leader map[string]string // role -> "pid N (application)", "" for none
	seen   bool
	last   []string
}

const keptChanges = 5

// see compares v's leaders with the previous frame's.
func (c *leaderChanges) see(v *whoView, now time.Time) {
	if v == nil || v.showReplicas {
		return
	}
	cur := map[string]string{}
	var order []string
	for _, l := range v.leases {
		if l.PresenceOf != nil || l.FenceOf != nil || !l.Requested {
			continue
		}
		name := l.Name()
		order = append(order, name)
		if h, ok := l.Holder(); ok {
			cur[name] = fmt.Sprintf("pid %d (%s)", h.PID, orQuoted(h.Application))
		} else {
			cur[name] = ""
		}
	}
	if c.seen {
		for _, name := range order {
			before, known := c.leader[name]
			if !known || before == cur[name] {
				continue
			}
			from, to := before, cur[name]
			if from == "" {
				from = "no leader"
			}
			if to == "" {
				to = "no leader"
			}
			c.last = append(c.last, fmt.Sprintf("%s  %s: %s → %s", now.Format(time.TimeOnly), name, from, to))
		}
		if len(c.last) > keptChanges {
			c.last = c.last[len(c.last)-keptChanges:]
		}
	}
	c.leader, c.seen = cur, true
}

// render writes the last changes of leader, newest last.
func (c *leaderChanges) render(w io.Writer, st styles, color bool) {
	if len(c.last) == 0 {
		return
	}
	paint := painter(color)
	fmt.Fprintf(w, "\n%s\n", paint(st.Bold, "Changes of leader"))
	for i, line := range c.last {
		mark := " "
		if i == len(c.last)-1 {
			mark = paint(st.Warn, "•")
		}
		fmt.Fprintf(w, "%s %s\n", mark, termSafe(line))
	}
}

// ---- text ----

func renderWhoText(w io.Writer, st styles, color bool, v *whoView, lay sessionLayout) error {
	paint := painter(color)
	var head strings.Builder
	head.WriteString(serverLine(st, color, v.server, v.addr, lay.Width))
	if v.server.InRecovery {
		fmt.Fprintf(&head, "%s %s\n", paint(st.Warn, "⚠ standby:"), wrapIndented(textWidth("⚠ standby: "), "this server is a standby: its advisory locks are its own and say nothing about the primary's leases; point --dsn at the primary", lay.Width))
	}
	head.WriteString("\n")
	if _, err := io.WriteString(w, head.String()); err != nil {
		return err
	}
	if v.showReplicas {
		return renderReplicas(w, st, color, v.server, v.replicas, v.now, lay)
	}
	if len(v.leases) == 0 {
		msg := "no advisory locks in database " + termSafe(v.server.Database)
		if !v.all {
			msg = "no roles to show: the keys file has none (name KEYs, or use --all)"
		}
		_, err := fmt.Fprintln(w, msg)
		return err
	}
	var rows [][]string
	var anyStale, anyHidden, anyPrepared bool
	var termNotes []string
	leads := leadersOf(v.leases)
	cols := plainSessions
	if v.terms != nil {
		cols = termSessions
	}
	// add appends a row, with the term's cells where the table has them.
	add := func(r []string, termCells ...string) {
		if v.terms != nil {
			if termCells == nil {
				termCells = []string{"-", "-", "-"}
			}
			r = withTermCells(r, termCells[0], termCells[1], termCells[2])
		}
		rows = append(rows, r)
	}
	for _, l := range v.leases {
		role := l.Role
		switch {
		case l.FenceOf != nil:
			role = l.Name()
		case role == "":
			role = "-"
		}
		key := l.Key.String()
		place, placed := v.terms.Place(l)
		if placed {
			if note := place.Note(l.Name()); note != "" {
				termNotes = append(termNotes, note)
			}
		}
		if l.PresenceOf != nil {
			// A presence lock: the replicas that serve its role, none of
			// them a holder of any lease.
			for _, h := range l.Present {
				state := "present"
				if leads[h.PID][l.PresenceOf.Key] {
					state += ", leads"
				}
				add(sessionRow(l.Name(), key, state, h, v.now))
				anyHidden = anyHidden || h.Hidden
			}
			continue
		}
		if !l.Held() {
			add([]string{role, key, string(locks.Free) + waitingSuffix(l), "-", "-", "-", "-", "-", "-"}, termCells(place, placed)...)
		}
		for i, h := range l.Holders {
			state := string(locks.Held)
			if h.Stale(v.now, v.staleAfter) {
				state, anyStale = string(locks.Held)+" STALE", true
			}
			if h.Shared {
				state += " (shared)"
			}
			var cells []string
			if i == 0 {
				cells = termCells(place, placed)
			}
			add(sessionRow(role, key, state+waitingSuffix(l), h, v.now), cells...)
		}
		for _, s := range l.Waiters {
			add(sessionRow(role, key, "waiting", s, v.now))
		}
		for _, s := range l.StandBys {
			add(sessionRow(role, key, standingBy, s, v.now))
		}
		for _, s := range slices.Concat(l.Holders, l.Waiters, l.StandBys) {
			anyHidden = anyHidden || s.Hidden
			anyPrepared = anyPrepared || s.Prepared != nil
		}
	}
	if err := writeSessionTable(w, st, color, cols, rows, lay); err != nil {
		return err
	}
	var foot strings.Builder
	// note writes a footnote, its text escaped and wrapped under itself.
	note := func(style lipgloss.Style, label, text string) {
		fmt.Fprintf(&foot, "\n%s %s\n", paint(style, label), wrapIndented(len(label)+1, termSafe(text), lay.Width))
	}
	if anyStale {
		note(st.Fail, "STALE:", fmt.Sprintf("idle for longer than --stale %s: a hung leader, or a lock stranded on a pooled server connection whose client is gone", v.staleAfter))
	}
	for _, n := range termNotes {
		note(st.Warn, "term:", n)
	}
	if anyPrepared {
		note(st.Warn, "prepared:", "held by a prepared transaction (no pid, no client): it lasts until COMMIT PREPARED or ROLLBACK PREPARED 'gid'")
	}
	if anyHidden {
		note(st.Warn, "hidden:", fmt.Sprintf("role %s may not read other roles' sessions, so their client, start and state are withheld (and staleness unknown); to reveal them: %s;",
			v.server.User, locks.RevealGrant(v.server.User)))
	}
	_, err := io.WriteString(w, foot.String())
	return err
}

// termCells are a lease's TERM, BEGAN and RENEWED cells from its place in
// the record: the holder's own term ("e42", "e42 STALE"), WAITING for a
// holder that has not begun one, and for a free key whose term has not
// ended that term ("e41 open"); "-" where nothing applies.
func termCells(p term.Place, placed bool) []string {
	cells := []string{"-", "-", "-"}
	switch {
	case !placed:
	case p.Standing == term.StandingWaiting:
		cells[0] = "WAITING"
	case p.Standing == term.StandingOverdue:
		cells[0] = "OVERDUE"
	case p.Owns() || p.Open():
		cells[0] = "e" + strconv.FormatInt(p.Term.Epoch, 10)
		switch {
		case p.Standing == term.StandingStale:
			cells[0] += " STALE"
		case p.Open():
			cells[0] += " open"
		}
		cells[1], cells[2] = fmtAge(p.Now.Sub(p.Term.Began)), fmtAge(p.Now.Sub(p.Term.Renewed))
	}
	return cells
}

// ---- JSON ----

// leaseJSON is one lease of `leasectl who -o json` (docs/json.md).
type leaseJSON struct {
	Role    *string `json:"role"`
	Key     string  `json:"key"`
	KeyForm string  `json:"key_form"`
	// Kind is "lease", "presence" for a role's presence lock or "fence" for
	// a role's stop fence (--all).
	Kind       string         `json:"kind"`
	PresenceOf *roleRefJSON   `json:"presence_of"`
	Requested  bool           `json:"requested"`
	State      string         `json:"state"`
	Stale      bool           `json:"stale"`
	Health     string         `json:"health"`
	Term       *leaseTermJSON `json:"term"`
	// WaiterCount counts Waiters and StandBys.
	WaiterCount int           `json:"waiter_count"`
	Holders     []sessionJSON `json:"holders"`
	Waiters     []sessionJSON `json:"waiters"`
	// StandBys are a group's stand-bys; Present every session present for
	// the role (its presence lock's holders).
	StandBys []sessionJSON `json:"stand_bys"`
	Present  []sessionJSON `json:"present"`
}

// roleRefJSON names a role: its name (null for a key of no role) and key.
type roleRefJSON struct {
	Role *string `json:"role"`
	Key  string  `json:"key"`
}

func roleRefJSONOf(r locks.RoleRef) roleRefJSON {
	j := roleRefJSON{Key: r.Key.String()}
	if r.Role != "" {
		j.Role = &r.Role
	}
	return j
}

// Kinds of who's leases, and the state and health of a presence lock's.
const (
	kindLease      = "lease"
	kindPresence   = "presence"
	kindFence      = "fence"
	statePresent   = "PRESENT"
	healthPresence = "presence"
)

// writeWhoJSON writes the document of one reading (docs/json.md), a lease
// at a time: with --all that is thousands of them, never held as one
// document. It is indented when indent is set, else on one line.
func writeWhoJSON(w io.Writer, v *whoView, indent bool) error {
	if v.showReplicas {
		return writeJSON(w, replicasJSONOf(v), indent)
	}
	o := newJSONObject(w, indent)
	o.Header(header(v.checkError() == nil))
	o.Field("server", v.server)
	o.Field("now", v.now)
	o.Field("stale_after_ms", msOf(v.staleAfter))
	o.Array("leases", len(v.leases), func(i int) any { return leaseJSONOf(v, i) })
	hidden, grant := whoHidden(v)
	o.Field("hidden", hidden)
	o.Field("reveal_grant", grant)
	return o.Close()
}

func whoHidden(v *whoView) (bool, *string) {
	if !locks.AnyHidden(v.leases) {
		return false, nil
	}
	grant := locks.RevealGrant(v.server.User)
	return true, &grant
}

func leaseJSONOf(v *whoView, i int) leaseJSON {
	l := &v.leases[i]
	lj := leaseJSON{
		Key: l.Key.String(), KeyForm: "bigint", Kind: kindLease, Requested: l.Requested, State: string(l.State()),
		Stale: l.Stale(v.now, v.staleAfter), WaiterCount: l.WaiterCount(),
		Holders: make([]sessionJSON, 0, len(l.Holders)), Waiters: make([]sessionJSON, 0, len(l.Waiters)),
		StandBys: make([]sessionJSON, 0, len(l.StandBys)), Present: make([]sessionJSON, 0, len(l.Present)),
	}
	if l.Role != "" {
		lj.Role = &l.Role
	}
	if l.Key.Form == locks.Pair {
		lj.KeyForm = "pair"
	}
	if l.FenceOf != nil {
		lj.Kind = kindFence
	}
	for i := range l.Present {
		lj.Present = append(lj.Present, sessionJSONOf(&l.Present[i], v.now, 0))
	}
	if l.PresenceOf != nil {
		// Present for a role; a holder of nothing.
		ref := roleRefJSONOf(*l.PresenceOf)
		lj.Kind, lj.PresenceOf, lj.State, lj.Stale, lj.Health, lj.WaiterCount = kindPresence, &ref, statePresent, false, healthPresence, 0
		return lj
	}
	h := v.terms.Health(*l, v.now, v.staleAfter)
	lj.Health = h.String()
	if p, ok := v.terms.Place(*l); ok {
		lj.Term = leaseTermJSONOf(p)
	}
	for i := range l.Holders {
		lj.Holders = append(lj.Holders, sessionJSONOf(&l.Holders[i], v.now, v.staleAfter))
	}
	for i := range l.Waiters {
		lj.Waiters = append(lj.Waiters, sessionJSONOf(&l.Waiters[i], v.now, v.staleAfter))
	}
	for i := range l.StandBys {
		lj.StandBys = append(lj.StandBys, sessionJSONOf(&l.StandBys[i], v.now, 0))
	}
	return lj
}

// leaseTermJSON is what the term record says of a lease: where its holder
// stands, and the key's current term (null fields when it never had one).
type leaseTermJSON struct {
	Standing       string     `json:"standing"`
	Epoch          *int64     `json:"epoch"`
	TermID         *string    `json:"term_id"`
	HolderPID      *int64     `json:"holder_pid"`
	HolderHost     *string    `json:"holder_host"`
	HolderOSPID    *int64     `json:"holder_os_pid"`
	Began          *time.Time `json:"began"`
	Renewed        *time.Time `json:"renewed"`
	SinceRenewalMS *float64   `json:"since_renewal_ms"`
	Deadline       *time.Time `json:"deadline"`
	Ended          *time.Time `json:"ended"`
	EndReason      *string    `json:"end_reason"`
}

func leaseTermJSONOf(p term.Place) *leaseTermJSON {
	j := &leaseTermJSON{Standing: string(p.Standing)}
	if !p.HasTerm {
		return j
	}
	t := p.Term
	pid, ospid := int64(t.Holder.BackendPID), int64(t.Holder.OSPID)
	j.Epoch, j.TermID, j.HolderPID, j.HolderHost, j.HolderOSPID = &t.Epoch, &t.ID, &pid, &t.Holder.Host, &ospid
	j.Began, j.Renewed = &t.Began, &t.Renewed
	if t.Live() {
		deadline := t.Deadline()
		j.Deadline, j.SinceRenewalMS = &deadline, msPtr(max(p.Now.Sub(t.Renewed), 0))
	} else {
		j.Ended, j.EndReason = &t.Ended, &t.EndReason
	}
	return j
}

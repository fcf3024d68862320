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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// defaultHistoryLimit is how many terms the text of `history` shows unless
// --limit says otherwise; -o json prints them all.
const defaultHistoryLimit = 50

type historyOptions struct {
	app   *App
	Role  string // the ROLE (or KEY) argument
	Since sinceFlag
	// Limit is --limit: at most this many terms, 0 for all; LimitGiven
	// says it was given (else text shows defaultHistoryLimit).
	Limit      int
	LimitGiven bool
}

// newHistoryCmd builds `leasectl history`; runF, when not nil, runs
// instead of runHistory with the parsed and checked options (tests).
func newHistoryCmd(app *App, runF func(*historyOptions) error) *cobra.Command {
	opts := &historyOptions{app: app}
	c := &cobra.Command{
		Use:   "history ROLE|KEY",
		Short: "Show the past terms of a role: who led, when, how it ended, leaderless gaps",
		Long: `Show the terms of a role from the term record in the lease's database
(leasectl fence --help says what it is), newest first: each leadership's
epoch, its holder (host and OS pid), when it began and ended, how it ended,
how long it lasted, and how long the role had no leader before it.

How a term ends:
  released         the holder's work returned, or its lease was stopped
  stepped down     the holder was asked to (leasectl failover)
  session lost     the holder lost its session, stopped its work, and
                   recorded the end once it could reach the server again
  killed           the holder's process was killed; what it left for the
                   purpose recorded the end once its program was gone
  evicted          a stand-by ended the sessions of a holder that had
                   stopped renewing its term (a frozen process)
  deadline passed  the holder never recorded the end; the next leader
                   waited for the term's deadline, and the term ended at
                   its last renewal
A live term shows "live" as its end. Every time is the server's, shown in
local time, with the date when it is not today.

ROLE is a role of keys.yaml, or a bare integer KEY. --since shows the terms
that began in the last DURATION (24h) or since an RFC 3339 time; --limit
caps the rows (50 unless given; 0: all; -o json prints all unless given).
Leases keep the newest 1000 terms of each role (leasectl run --keep).

On a terminal the table is followed by a timeline: a line per term, oldest
first, scaled to the span they cover, with the leaderless gaps marked.
-o wide adds the holder's application_name. Exit 1 when the database has no
term record yet.`,
		Example: `  leasectl history poller
  leasectl history poller --since 24h -o wide
  leasectl history poller --since 2026-12-01T09:00:00+01:00 --limit 0
  leasectl history 1840000001 -o json | jq '.terms[] | select(.end_reason != "released")'`,
		Args:              exactArgs(1, "one ROLE of keys.yaml, or a KEY"),
		ValidArgsFunction: completeOneRole(app),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Role = args[0]
			opts.LimitGiven = c.Flags().Changed("limit")
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runHistory(c.Context(), opts)
		},
	}
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		var unknown *pflag.NotExistError
		if errors.As(err, &unknown) && isNegativeKey(unknown.GetSpecifiedShortnames()) {
			return usageErrorf("%v: a negative key looks like a flag; put it after --: leasectl history -- -%s", err, unknown.GetSpecifiedShortnames())
		}
		return flagError(c, err)
	})
	f := c.Flags()
	f.Var(&opts.Since, "since", "show the terms that began in the last `DURATION` (24h, 90m) or since an RFC 3339 time (2026-12-01T09:00:00Z)")
	f.IntVar(&opts.Limit, "limit", 0, "show at most `N` terms, the newest (0: all; default 50 for text, all for -o json)")
	setOutputs(c, formatText, outputWide, formatJSON)
	return c
}

// validate checks the flags and the argument, before anything is read or
// connected.
func (opts *historyOptions) validate() error {
	if opts.Limit < 0 {
		return usageErrorf("invalid --limit %d: give a number of terms, or 0 for all", opts.Limit)
	}
	if k, err := locks.ParseKey(opts.Role); err == nil && k.Form == locks.Pair {
		return usageErrorf("%s is the two-int4 form: a lease holds a bigint key, and only leases have terms", opts.Role)
	}
	return nil
}

// limit is how many terms to show: --limit, else 50 for text and all for
// JSON.
func (opts *historyOptions) limit() int {
	if opts.LimitGiven || opts.app.JSON() {
		return opts.Limit
	}
	return defaultHistoryLimit
}

// sinceFlag is the value of --since: a duration back from the server's
// clock, or a time.
type sinceFlag struct {
	ago  time.Duration
	at   time.Time
	text string
}

func (s *sinceFlag) String() string { return s.text }

func (s *sinceFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return fmt.Errorf("the duration must be positive: the terms of the last %s", strings.TrimPrefix(v, "-"))
		}
		*s = sinceFlag{ago: d, text: v}
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return errors.New("want a duration such as 24h or 90m, or an RFC 3339 time such as 2026-12-01T09:00:00Z")
	}
	*s = sinceFlag{at: t, text: v}
	return nil
}

func (s *sinceFlag) Type() string { return "since" }

// from is the start of the window at now on the server's clock; zero when
// --since was not given.
func (s *sinceFlag) from(now time.Time) time.Time {
	if s.ago > 0 {
		return now.Add(-s.ago)
	}
	return s.at
}

// historyView is what history read: the server, the role, its terms.
type historyView struct {
	server dbconn.ServerInfo
	addr   string
	role   string // "" for a key of no role
	key    int64
	now    time.Time // the server's clock
	since  time.Time // zero: no --since
	limit  int       // 0: all
	terms  []term.Term
	// more says the limit left older terms out.
	more bool
}

func runHistory(ctx context.Context, opts *historyOptions) error {
	app := opts.app
	f, err := loadRoleMap(app, meantAsKey(opts.Role))
	if err != nil {
		return err
	}
	rk, err := resolveRole(f, opts.Role, bigintKeysAsArgs, "show the history of")
	if err != nil {
		return err
	}
	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	v, err := readHistory(ctx, opts, conn, rk)
	if err != nil {
		return err
	}
	if app.JSON() {
		return app.writeJSON(app.IO.Out, historyJSONOf(v))
	}
	return renderHistoryText(app.IO.Out, app.styles(), app.Color(), v, sessionLayoutOf(app))
}

func readHistory(ctx context.Context, opts *historyOptions, conn *pgx.Conn, rk roleKey) (*historyView, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.app.Global.Timeout)
	defer cancel()
	server, err := dbconn.Server(ctx, conn)
	if err != nil {
		return nil, err
	}
	now, err := term.ServerClock(ctx, conn)
	if err != nil {
		return nil, err
	}
	cfg := conn.Config()
	v := &historyView{server: server, addr: dbconn.Addr(&cfg.Config), role: rk.Role, key: rk.Key.ID, now: now,
		since: opts.Since.from(now), limit: opts.limit()}
	n := v.limit
	if n > 0 {
		n++ // one more, to know whether there are more
	}
	v.terms, err = term.History(ctx, conn, v.key, v.since, n)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, term.ErrNoSchema):
		return nil, &CheckFailedError{Message: "no term record in this database: nothing has led with a term yet; leasectl run creates it, or run `leasectl fence init`"}
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, fmt.Errorf("%w; role %q needs USAGE on schema leasectl and SELECT on leasectl.term_history: ask the schema's owner to grant them", err, server.User)
	case err != nil:
		return nil, err
	}
	if v.limit > 0 && len(v.terms) > v.limit {
		v.terms, v.more = v.terms[:v.limit], true
	}
	return v, nil
}

// name is how the text names what is shown: the role, else "key N".
func (v *historyView) name() string {
	return locks.RoleName(v.role, locks.BigintKey(v.key))
}

// lasted is how long t lasted, or has lasted so far when it is live.
func (v *historyView) lasted(t term.Term) time.Duration {
	if t.Live() {
		return v.now.Sub(t.Began)
	}
	return t.Ended.Sub(t.Began)
}

// ---- text ----

var (
	historyColumns     = []string{"EPOCH", "HOLDER", "BEGAN", "ENDED", "HOW", "LASTED", "LEADERLESS BEFORE"}
	historyWideColumns = []string{"EPOCH", "HOLDER", "APPLICATION", "BEGAN", "ENDED", "HOW", "LASTED", "LEADERLESS BEFORE"}
)

// historyNotes explain the end reasons that need it, under the table.
var historyNotes = []struct{ reason, text string }{
	{term.SessionLost, "the holder lost its session; its work stopped, and it recorded the end when it could reach the server again"},
	{term.Killed, "the holder's process was killed; the end was recorded once its program was gone"},
	{term.Evicted, "a stand-by ended the sessions of a holder that had stopped renewing its term; the term ended at its last renewal"},
	{term.DeadlinePassed, "the holder never recorded the end; the next leader waited for the term's deadline, and the term ended at its last renewal"},
}

func renderHistoryText(w io.Writer, st styles, color bool, v *historyView, lay sessionLayout) error {
	paint := painter(color)
	var head strings.Builder
	head.WriteString(serverLine(st, color, v.server, v.addr, lay.Width))
	line := paint(st.Bold, "key") + " " + strconv.FormatInt(v.key, 10)
	if v.role != "" {
		line = paint(st.Bold, "role") + " " + termSafe(v.role) + " · key " + strconv.FormatInt(v.key, 10)
	}
	if !v.since.IsZero() {
		line += " · since " + fmtWhen(v.since, v.now)
	}
	head.WriteString(line + "\n\n")
	if _, err := io.WriteString(w, head.String()); err != nil {
		return err
	}
	rows := make([][]string, 0, len(v.terms))
	seen := map[string]bool{}
	for _, t := range v.terms {
		ended, how := "live", ""
		if !t.Live() {
			ended, how = fmtWhen(t.Ended, v.now), t.EndReason
			seen[how] = true
		}
		leaderless := ""
		if t.HasPrevious {
			leaderless = fmtSpan(t.LeaderlessBefore)
		}
		r := []string{strconv.FormatInt(t.Epoch, 10), holderOf(t.Holder), orQuoted(t.Holder.Application),
			fmtWhen(t.Began, v.now), ended, how, fmtSpan(v.lasted(t)), leaderless}
		if !lay.Wide {
			r = append(r[:2], r[3:]...)
		}
		rows = append(rows, r)
	}
	opt := tableOptions{Width: lay.Width}
	if color {
		opt.Paint = map[string]func(string) string{"ENDED": func(c string) string {
			if c == "live" {
				return st.OK.Render(c)
			}
			return c
		}, "HOW": howPainter(st)}
	}
	cols := historyColumns
	if lay.Wide {
		cols, opt.Shrink = historyWideColumns, "APPLICATION"
	}
	if err := writeTable(w, cols, rows, opt); err != nil {
		return err
	}
	var foot strings.Builder
	if lay.Width > 0 && len(v.terms) > 0 {
		// On a terminal: the terms as a timeline.
		foot.WriteString(timeline(v, st, color, lay.Width))
	}
	// note writes a footnote, its label styled as paintLabel says.
	note := func(paintLabel func(string) string, label, text string) {
		fmt.Fprintf(&foot, "\n%s %s\n", paintLabel(label), wrapIndented(textWidth(label)+1, text, lay.Width))
	}
	dim := func(s string) string { return paint(st.Dim, s) }
	switch {
	case len(v.terms) == 0 && !v.since.IsZero():
		note(dim, "no terms:", fmt.Sprintf("no term of %s began since %s", termSafe(v.name()), fmtWhen(v.since, v.now)))
	case len(v.terms) == 0:
		note(dim, "no terms:", fmt.Sprintf("nothing has led %s with a term in database %s yet", termSafe(v.name()), termSafe(v.server.Database)))
	case v.more:
		note(dim, "more:", fmt.Sprintf("showing the newest %s; --limit 0 shows them all, --since narrows them by time", plural(v.limit, "term")))
	}
	how := func(label string) string { return label }
	if color {
		how = func(label string) string { return howPainter(st)(strings.TrimSuffix(label, ":")) + ":" }
	}
	for _, n := range historyNotes {
		if seen[n.reason] {
			note(how, n.reason+":", n.text)
		}
	}
	_, err := io.WriteString(w, foot.String())
	return err
}

// timeline draws v's terms, oldest first, one line each, on a time axis
// scaled to the span they cover: █ while the term lasted, ░ the leaderless
// gap before it, ▶ a live term.
func timeline(v *historyView, st styles, color bool, width int) string {
	paint := painter(color)
	terms := slices.Clone(v.terms)
	slices.Reverse(terms) // oldest first
	from, to := terms[0].Began, v.now
	if len(terms) > 0 && terms[0].HasPrevious && terms[0].LeaderlessBefore > 0 {
		from = from.Add(-terms[0].LeaderlessBefore)
	}
	if last := terms[len(terms)-1]; !last.Live() && last.Ended.Before(to) {
		to = last.Ended
	}
	label := 0
	for _, t := range terms {
		label = max(label, len("e"+strconv.FormatInt(t.Epoch, 10)))
	}
	cols := max(width-label-2, 10)
	span := max(to.Sub(from), time.Millisecond)
	col := func(at time.Time) int {
		c := int(float64(at.Sub(from)) / float64(span) * float64(cols-1))
		return min(max(c, 0), cols-1)
	}
	var b strings.Builder
	axis := fmt.Sprintf("%s … %s (%s)", fmtWhen(from, v.now), fmtWhen(to, v.now), fmtSpan(to.Sub(from)))
	fmt.Fprintf(&b, "\n%s %s\n", paint(st.Bold, "Timeline"), paint(st.Dim, axis))
	for _, t := range terms {
		end := to
		if !t.Live() {
			end = t.Ended
		}
		b0, e0 := col(t.Began), col(end)
		g0 := b0
		if t.HasPrevious && t.LeaderlessBefore > 0 {
			g0 = col(t.Began.Add(-t.LeaderlessBefore))
		}
		line := strings.Repeat(" ", g0) + paint(st.Warn, strings.Repeat("░", b0-g0)) + paint(st.OK, strings.Repeat("█", max(e0-b0, 1)))
		if t.Live() {
			line += paint(st.OK, "▶")
		}
		fmt.Fprintf(&b, "%-*s  %s\n", label, "e"+strconv.FormatInt(t.Epoch, 10), line)
	}
	fmt.Fprintf(&b, "%s\n", paint(st.Dim, strings.Repeat(" ", label+2)+"█ a term   ░ no leader   ▶ live"))
	return b.String()
}

// holderOf names a term's holder: its host and OS pid.
func holderOf(h term.Holder) string {
	return orDash(h.Host) + " pid " + strconv.Itoa(h.OSPID)
}

// howPainter styles an end reason: a clean end plain green, a lost or
// killed holder yellow, one that never said it had stopped red.
func howPainter(st styles) func(string) string {
	return func(c string) string {
		switch c {
		case term.Released, term.SteppedDown:
			return st.OK.Render(c)
		case term.SessionLost, term.Killed:
			return st.Warn.Render(c)
		case term.Evicted, term.DeadlinePassed:
			return st.Fail.Render(c)
		}
		return c
	}
}

// fmtWhen renders a time of the server's clock in local time: the time of
// day when it is on the day of now (the server's clock), else with the date.
func fmtWhen(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}

// fmtSpan renders a term's length or a leaderless gap: milliseconds under a
// second (a handoff takes milliseconds), tenths of a second under a minute,
// and as ages (fmtAge) beyond.
func fmtSpan(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return fmtAge(d)
}

// ---- JSON ----

// historyJSON is the documented schema of `leasectl history -o json`
// (docs/json.md).
type historyJSON struct {
	docHeader
	Server    dbconn.ServerInfo `json:"server"`
	Role      *string           `json:"role"`
	Key       string            `json:"key"`
	Now       time.Time         `json:"now"`
	Since     *time.Time        `json:"since"`
	Limit     int               `json:"limit"`
	Truncated bool              `json:"truncated"`
	Terms     []termJSON        `json:"terms"`
}

type termJSON struct {
	Epoch               int64      `json:"epoch"`
	TermID              string     `json:"term_id"`
	Role                string     `json:"role"`
	Key                 string     `json:"key"`
	Holder              holderJSON `json:"holder"`
	HeartbeatIntervalMS float64    `json:"heartbeat_interval_ms"`
	HeartbeatTimeoutMS  float64    `json:"heartbeat_timeout_ms"`
	StopTimeoutMS       float64    `json:"stop_timeout_ms"`
	Began               time.Time  `json:"began"`
	Renewed             time.Time  `json:"renewed"`
	Ended               *time.Time `json:"ended"`
	EndReason           *string    `json:"end_reason"`
	Evicted             bool       `json:"evicted"`
	DurationMS          float64    `json:"duration_ms"`
	LeaderlessBeforeMS  *float64   `json:"leaderless_before_ms"`
}

type holderJSON struct {
	Host            string    `json:"host"`
	OSPID           int       `json:"os_pid"`
	BackendPID      uint32    `json:"backend_pid"`
	BackendStart    time.Time `json:"backend_start"`
	FenceBackendPID uint32    `json:"fence_backend_pid"`
	Application     string    `json:"application_name"`
}

func historyJSONOf(v *historyView) historyJSON {
	out := historyJSON{docHeader: header(true), Server: v.server, Role: strOrNil(v.role), Key: strconv.FormatInt(v.key, 10),
		Now: v.now, Limit: v.limit, Truncated: v.more, Terms: make([]termJSON, 0, len(v.terms))}
	if !v.since.IsZero() {
		out.Since = &v.since
	}
	for _, t := range v.terms {
		h := t.Holder
		tj := termJSON{Epoch: t.Epoch, TermID: t.ID, Role: t.Role, Key: strconv.FormatInt(t.Key, 10),
			Holder: holderJSON{Host: h.Host, OSPID: h.OSPID, BackendPID: h.BackendPID, BackendStart: h.BackendStart,
				FenceBackendPID: h.FenceBackendPID, Application: h.Application},
			HeartbeatIntervalMS: msOf(t.Timing.HeartbeatInterval), HeartbeatTimeoutMS: msOf(t.Timing.HeartbeatTimeout),
			StopTimeoutMS: msOf(t.Timing.StopTimeout), Began: t.Began, Renewed: t.Renewed, Evicted: t.Evicted,
			DurationMS: msOf(v.lasted(t))}
		if !t.Live() {
			tj.Ended, tj.EndReason = &t.Ended, &t.EndReason
		}
		if t.HasPrevious {
			tj.LeaderlessBeforeMS = msPtr(t.LeaderlessBefore)
		}
		out.Terms = append(out.Terms, tj)
	}
	return out
}

package cmd

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
)

// The session table that who and failover (the holder it acts on) share:
// one row per session that holds or awaits a key, fitted to the terminal.

// sessionLayout is how the text of who (and of failover's holder table) is
// laid out.
type sessionLayout struct {
	// Width to fit to; 0: none (stdout is not a terminal).
	Width int
	// Wide: every column (-o wide, and whenever there is no width, so
	// that what scripts read stays as it was); else sessionNarrowColumns.
	Wide bool
}

func sessionLayoutOf(app *App) sessionLayout {
	w := app.Width()
	return sessionLayout{Width: w, Wide: w == 0 || app.Global.Output == outputWide}
}

// sessionTable names the columns of a session table: every one (-o wide,
// and output that is not a terminal), and those a terminal shows. ROLE and
// KEY come first.
type sessionTable struct{ wide, narrow []string }

// The session tables: who's and failover's, and who's where the database
// has the term record (termColumns).
var (
	plainSessions = sessionTable{sessionColumns, sessionNarrowColumns}
	termSessions  = sessionTable{termColumns, termNarrowColumns}
)

// writeSessionTable prints rows of cols.wide (sessionRow's, with
// withTermCells for termSessions) as lay says.
func writeSessionTable(w io.Writer, st styles, color bool, cols sessionTable, rows [][]string, lay sessionLayout) error {
	opt := tableOptions{Width: lay.Width}
	if color {
		opt.Paint = map[string]func(string) string{"STATE": statePainter(st), "TERM": termPainter(st)}
	}
	if lay.Wide {
		return writeTable(w, cols.wide, rows, opt)
	}
	keep := make([]int, len(cols.narrow))
	for i, name := range cols.narrow {
		keep[i] = slices.Index(cols.wide, name)
	}
	narrow := make([][]string, len(rows))
	for i, r := range rows {
		cells := make([]string, len(keep))
		for j, col := range keep {
			cells[j] = r[col]
		}
		if r[0] == "-" { // no role: name the key
			cells[0] = "key " + r[1]
		}
		narrow[i] = cells
	}
	// On a narrow terminal the pid, the last activity and the term are
	// left out, in that order; the application name, which names the
	// replica (leasectl run ROLE@HOST#PID, its distinguishing part at the
	// end), is never cut nor left out: once it is the last column, it
	// wraps under itself. -o wide shows every column.
	opt.Shrink, opt.Drop = "", []string{"PID", "LAST ACTIVITY", "TERM"}
	return writeTable(w, cols.narrow, narrow, opt)
}

// termPainter styles the marks of a TERM cell ("e42 STALE", "WAITING",
// "e41 open"), leaving the epoch plain.
func termPainter(st styles) func(string) string {
	marks := []struct {
		word  string
		style lipgloss.Style
	}{{"STALE", st.Fail}, {"WAITING", st.Warn}, {"open", st.Warn}}
	return func(cell string) string {
		for _, m := range marks {
			if i := strings.Index(cell, m.word); i >= 0 {
				return cell[:i] + m.style.Render(m.word) + cell[i+len(m.word):]
			}
		}
		return cell
	}
}

// statePainter styles the state at the start of a STATE cell ("HELD", "HELD
// STALE", "FREE", "waiting"), leaving the rest (", 1 waiting") plain.
func statePainter(st styles) func(string) string {
	states := []struct {
		word  string
		style lipgloss.Style
	}{
		{string(locks.Held) + " STALE", st.Fail}, {string(locks.Held), st.OK}, {string(locks.Free), st.Fail}, {"waiting", st.Warn}, {standingBy, st.Warn},
	}
	return func(cell string) string {
		for _, s := range states {
			if strings.HasPrefix(cell, s.word) {
				return s.style.Render(s.word) + cell[len(s.word):]
			}
		}
		return cell
	}
}

// waitingSuffix counts the sessions that wait for l's key: those queued
// for it, and a group's stand-bys, which poll for it.
func waitingSuffix(l locks.Lease) string {
	if n := l.WaiterCount(); n > 0 {
		return fmt.Sprintf(", %d waiting", n)
	}
	return ""
}

// standingBy is the STATE of a group's stand-by: a session present for the
// role (it holds the role's presence lock) that polls for the key rather
// than queue for it.
const standingBy = "standing by"

// leadersOf says which keys each backend holds in exclusive mode, by pid,
// among leases.
func leadersOf(leases []locks.Lease) map[int32]map[locks.Key]bool {
	out := map[int32]map[locks.Key]bool{}
	for _, l := range leases {
		for _, h := range l.Holders {
			if h.Shared || h.Prepared != nil {
				continue
			}
			if out[h.PID] == nil {
				out[h.PID] = map[locks.Key]bool{}
			}
			out[h.PID][l.Key] = true
		}
	}
	return out
}

func sessionRow(role, key, state string, s locks.Session, now time.Time) []string {
	pid, client, connected, last := strconv.Itoa(int(s.PID)), "", "", ""
	app := s.Application
	switch {
	case s.Prepared != nil:
		pid, client, connected = "none", "-", "-"
		app = fmt.Sprintf("prepared xact %q", s.Prepared.GID)
		if d, ok := s.Idle(now); ok {
			last = "prepared " + fmtAge(d) + " ago"
		}
	case s.Gone:
		client, connected, last = "gone", "gone", "session ended"
	case s.Hidden:
		client, connected, last = "hidden", "hidden", "hidden"
	default:
		client = clientAddr(s)
		connected = fmtAge(now.Sub(s.BackendStart))
		last = s.State
		if d, ok := s.Waited(now); ok {
			last = "waiting " + fmtAge(d)
		} else if !s.StateChange.IsZero() {
			last += " " + fmtAge(now.Sub(s.StateChange))
		}
	}
	if app == "" {
		app = `""` // an empty application_name, not a missing one
	}
	return []string{role, key, state, pid, s.User, app, client, connected, orDash(last)}
}

func clientAddr(s locks.Session) string {
	if s.ClientAddr == "" {
		return "local socket"
	}
	return net.JoinHostPort(s.ClientAddr, strconv.Itoa(int(s.ClientPort)))
}

// sessionColumns are the columns of who's table with -o wide, and when stdout
// is not a terminal; sessionNarrowColumns those on a terminal, which fit in 80
// columns for typical names. Narrow, a lock of no role shows its key as
// "key N" in ROLE.
var (
	sessionColumns       = []string{"ROLE", "KEY", "STATE", "PID", "USER", "APPLICATION", "CLIENT", "CONNECTED", "LAST ACTIVITY"}
	sessionNarrowColumns = []string{"ROLE", "STATE", "PID", "APPLICATION", "LAST ACTIVITY"}
)

// termColumns are who's columns with -o wide where the database has the
// term record: TERM (the holder's term, "e42") after STATE, and BEGAN and
// RENEWED (how long ago its term began and was last renewed) before LAST
// ACTIVITY; termNarrowColumns those on a terminal, with TERM only.
var (
	termColumns       = []string{"ROLE", "KEY", "STATE", "TERM", "PID", "USER", "APPLICATION", "CLIENT", "CONNECTED", "BEGAN", "RENEWED", "LAST ACTIVITY"}
	termNarrowColumns = []string{"ROLE", "STATE", "TERM", "PID", "APPLICATION", "LAST ACTIVITY"}
)

// withTermCells makes a row of sessionColumns (sessionRow's) one of
// termColumns.
func withTermCells(r []string, term, began, renewed string) []string {
	out := make([]string, 0, len(termColumns))
	out = append(out, r[:3]...)
	out = append(out, term)
	out = append(out, r[3:8]...)
	out = append(out, began, renewed, r[8])
	return out
}

// The replica table that who --replicas and failover --replica share: one
// row per process that serves roles, by its lease session.

// replicaColumns are the columns of the replica table with -o wide, and
// when stdout is not a terminal; replicaNarrowColumns those on a terminal.
// ROLES, the roles the replica leads, is cut to the width, ending in "…".
var (
	replicaColumns       = []string{"REPLICA", "KIND", "BACKEND", "FENCE", "USER", "ADDR", "CONNECTED", "LEADS", "WAITS", "ROLES"}
	replicaNarrowColumns = []string{"REPLICA", "BACKEND", "ADDR", "LEADS", "WAITS", "ROLES"}
)

// The kinds of replica: a group run (run --procfile), or a session that
// holds or queues for one role's key (run --role, or a worker of its own).
const (
	replicaGroup  = "group"
	replicaSingle = "single"
)

func replicaKind(r locks.Replica) string {
	if r.Group {
		return replicaGroup
	}
	return replicaSingle
}

// roleNames names roles, joined by ", "; "-" for none.
func roleNames(refs []locks.RoleRef) string {
	if len(refs) == 0 {
		return "-"
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.Name()
	}
	return strings.Join(names, ", ")
}

func replicaRow(r locks.Replica, now time.Time) []string {
	s := r.Session
	app := s.Application
	if app == "" {
		app = `""`
	}
	fence := "-"
	if r.Fence != nil {
		fence = strconv.Itoa(int(r.Fence.PID))
	}
	addr, connected := clientAddr(s), fmtAge(now.Sub(s.BackendStart))
	switch {
	case s.Gone:
		addr, connected = "gone", "gone"
	case s.Hidden:
		addr, connected = "hidden", "hidden"
	}
	return []string{app, replicaKind(r), strconv.Itoa(int(s.PID)), fence, s.User, addr, connected,
		strconv.Itoa(len(r.Leads)), strconv.Itoa(len(r.Waits)), replicaRoles(r)}
}

// replicaRoles is the ROLES cell of a replica: the roles it leads, and for
// a drained group (failover --replica), "drained": it is still connected,
// and takes no role until it restarts.
func replicaRoles(r locks.Replica) string {
	switch {
	case r.Drained && len(r.Leads) == 0:
		return replicaDrained
	case r.Drained:
		return roleNames(r.Leads) + " (" + replicaDrained + ")"
	}
	return roleNames(r.Leads)
}

// replicaDrained marks a drained group replica in the replica table.
const replicaDrained = "drained"

// writeReplicaTable prints the replicas as lay says.
func writeReplicaTable(w io.Writer, replicas []locks.Replica, now time.Time, lay sessionLayout) error {
	cols := replicaColumns
	if !lay.Wide {
		cols = replicaNarrowColumns
	}
	rows := make([][]string, 0, len(replicas))
	for _, r := range replicas {
		full := replicaRow(r, now)
		cells := make([]string, len(cols))
		for i, name := range cols {
			cells[i] = full[slices.Index(replicaColumns, name)]
		}
		rows = append(rows, cells)
	}
	return writeTable(w, cols, rows, tableOptions{Width: lay.Width, Shrink: "ROLES"})
}

// renderReplicas shows the replicas that serve roles (who --replicas),
// after the server line, with a note where the server hid sessions.
func renderReplicas(w io.Writer, st styles, color bool, server dbconn.ServerInfo, replicas []locks.Replica, now time.Time, lay sessionLayout) error {
	if len(replicas) == 0 {
		_, err := fmt.Fprintf(w, "no replicas: no session holds or waits for a role's key, or holds a presence lock, in database %s\n", termSafe(server.Database))
		return err
	}
	if err := writeReplicaTable(w, replicas, now, lay); err != nil {
		return err
	}
	for _, r := range replicas {
		if r.Session.Hidden {
			paint := painter(color)
			_, err := fmt.Fprintf(w, "\n%s %s\n", paint(st.Warn, "hidden:"), wrapIndented(len("hidden: "), termSafe(fmt.Sprintf("role %s may not read other roles' sessions, so their client and start are withheld; to reveal them: %s;",
				server.User, locks.RevealGrant(server.User))), lay.Width))
			return err
		}
	}
	return nil
}

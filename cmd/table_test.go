package cmd

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestTableLayout: columns left-aligned two blanks apart, as wide as their
// widest cell on the terminal (styles and wide characters measured as
// shown), no trailing blanks, and every row of a long table.
func TestTableLayout(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, true)
	header := []string{"ROLE", "KEY", "STATE", "LAST ACTIVITY"}
	rows := [][]string{
		{"poller", "1840000001", st.OK.Render("HELD") + ", 1 waiting", "idle 3s"},
		{"-", "-9223372036854775808", st.Fail.Render("FREE"), "-"},
		{"réconciliateur", "3,4", "waiting", "waiting 1m02s"},
		{"日本の役割", "1", "", ""},
		{"x", "", "", ""},
	}
	const want = "" +
		"ROLE            KEY                   STATE            LAST ACTIVITY\n" +
		"poller          1840000001            HELD, 1 waiting  idle 3s\n" +
		"-               -9223372036854775808  FREE             -\n" +
		"réconciliateur  3,4                   waiting          waiting 1m02s\n" +
		"日本の役割      1\n" +
		"x\n"
	var plain [][]string
	for _, r := range rows {
		var cells []string
		for _, c := range r {
			cells = append(cells, sgr.ReplaceAllString(c, ""))
		}
		plain = append(plain, cells)
	}
	var out, styled bytes.Buffer
	if err := writeTable(&out, header, plain, tableOptions{}); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	// Styled cells are padded by the width they show.
	if err := layoutTable(&styled, header, rows); err != nil {
		t.Fatal(err)
	}
	if !sgr.MatchString(styled.String()) {
		t.Errorf("the styles are gone:\n%q", styled.String())
	}
	if got := sgr.ReplaceAllString(styled.String(), ""); got != want {
		t.Errorf("styled, without its escape codes:\n%s\nwant:\n%s", got, want)
	}

	var big bytes.Buffer
	var many [][]string
	for i := range 2000 {
		many = append(many, []string{"r", fmt.Sprint(i), "FREE", "-"})
	}
	if err := writeTable(&big, header, many, tableOptions{}); err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(big.Bytes(), []byte("\n")); lines != len(many)+1 {
		t.Errorf("a large table has %d lines, want %d", lines, len(many)+1)
	}
	if want := "r     1999  FREE   -\n"; !bytes.HasSuffix(big.Bytes(), []byte(want)) {
		t.Errorf("a large table ends in %q, want %q", big.Bytes()[big.Len()-30:], want)
	}
}

// BenchmarkWriteTable10k renders what who --all prints for 10,000 locks
// with stdout not a terminal: nine columns, every one, no width, no paint.
func BenchmarkWriteTable10k(b *testing.B) {
	rows := make([][]string, 10000)
	for i := range rows {
		rows[i] = []string{"-", fmt.Sprint(1840000000 + i), "HELD", fmt.Sprint(6000 + i%200), "app",
			fmt.Sprintf("worker-%d", i%200), fmt.Sprintf("10.0.4.%d:%d", i%250, 40000+i%200), "3h12m", "idle 2s"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := writeTable(io.Discard, sessionColumns, rows, tableOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// goldenTermRows are rows of termColumns (who's, with the term record)
// for the golden single-role reading.
func goldenTermRows() [][]string {
	var rows [][]string
	for _, l := range goldenSingleRoleLeases() {
		role := l.Role
		if role == "" {
			role = "-"
		}
		for _, s := range l.Holders {
			rows = append(rows, withTermCells(sessionRow(role, l.Key.String(), "HELD"+waitingSuffix(l), s, goldenNow), "e42", "3h12m", "2s"))
		}
		for _, s := range l.Waiters {
			rows = append(rows, withTermCells(sessionRow(role, l.Key.String(), "waiting", s, goldenNow), "WAITING", "", ""))
		}
	}
	return rows
}

// TestTableDropsColumnsOnNarrowTerminal: on a terminal too narrow for a
// table, tablewriter is handed only what fits: the Shrink column cut with
// "…" first, then the Drop columns left out in their order, the others
// kept; no line is longer than the terminal, none ends in a blank.
func TestTableDropsColumnsOnNarrowTerminal(t *testing.T) {
	var rows [][]string
	for _, r := range goldenTermRows() {
		cells := make([]string, len(termNarrowColumns))
		for i, name := range termNarrowColumns {
			cells[i] = r[slices.Index(termColumns, name)]
		}
		if cells[0] == "-" {
			cells[0] = "key " + r[1] // as writeSessionTable names a key of no role
		}
		rows = append(rows, cells)
	}
	for _, tc := range []struct {
		width  int
		header string
		cut    string // how APPLICATION ends where it is cut
	}{
		{0, "ROLE            STATE            TERM     PID   APPLICATION              LAST ACTIVITY", ""},
		{100, "ROLE            STATE            TERM     PID   APPLICATION              LAST ACTIVITY", ""},
		{90, "ROLE            STATE            TERM     PID   APPLICATION            LAST ACTIVITY", "leasectl run poller@…"},
		{85, "ROLE            STATE            TERM     PID   APPLICATION       LAST ACTIVITY", "leasectl run po…"},
		{84, "ROLE            STATE            TERM     PID   LAST ACTIVITY", ""},
		{67, "ROLE            STATE            TERM     PID   LAST ACTIVITY", ""},
		{66, "ROLE            STATE            PID   LAST ACTIVITY", ""},
		{60, "ROLE            STATE            PID   LAST ACTIVITY", ""},
	} {
		var b bytes.Buffer
		opt := tableOptions{Width: tc.width, Shrink: "APPLICATION", Drop: []string{"APPLICATION", "TERM"}}
		if err := writeTable(&b, termNarrowColumns, rows, opt); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if lines[0] != tc.header {
			t.Errorf("at %d columns, the header is\n%q\nwant\n%q\n%s", tc.width, lines[0], tc.header, out)
		}
		if len(lines) != len(rows)+1 {
			t.Errorf("at %d columns, %d lines for %d rows:\n%s", tc.width, len(lines), len(rows), out)
		}
		for _, line := range lines {
			if tc.width > 0 && cellWidth(line) > tc.width {
				t.Errorf("at %d columns, a line of %d:\n%s", tc.width, cellWidth(line), line)
			}
			if strings.HasSuffix(line, " ") {
				t.Errorf("at %d columns, a trailing blank: %q", tc.width, line)
			}
		}
		if want := "\nkey 1840100555  HELD             none  prepared 10m00s ago\n"; tc.width == 60 && !strings.Contains(out, want) {
			t.Errorf("at 60 columns, no line %q:\n%s", want[1:], out)
		}
		if tc.cut != "" && !strings.Contains(out, tc.cut+"  ") {
			t.Errorf("at %d columns, no APPLICATION cut to %q:\n%s", tc.width, tc.cut, out)
		}
		if tc.cut == "" && strings.Contains(out, "…") {
			t.Errorf("at %d columns, a cell is cut:\n%s", tc.width, out)
		}
		for _, want := range []string{"poller", "key 1840100555", "HELD, 1 waiting", "waiting", "6330", "6343", "6344", "none", "idle 2s", "waiting 3h11m", "prepared 10m00s ago"} {
			if !strings.Contains(out, want) {
				t.Errorf("at %d columns, %q is gone:\n%s", tc.width, want, out)
			}
		}
	}
}

// TestWhoFitsSixtyColumns: who's table on a terminal of 60 columns, as
// writeSessionTable fits it: ROLE and STATE first, the columns it keeps
// among the terminal's own in their order, every session a line within 60
// columns, no trailing blank.
func TestWhoFitsSixtyColumns(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, false)
	rows := goldenTermRows()
	var b bytes.Buffer
	if err := writeSessionTable(&b, st, false, termSessions, rows, sessionLayout{Width: 60}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	header := regexp.MustCompile(" {2,}").Split(lines[0], -1)
	if len(header) < 2 || header[0] != "ROLE" || header[1] != "STATE" || len(header) == len(termNarrowColumns) {
		t.Errorf("at 60 columns, columns %q: want ROLE and STATE first, and some of %q left out:\n%s", header, termNarrowColumns, out)
	}
	at := 0
	for _, h := range header {
		i := slices.Index(termNarrowColumns[at:], h)
		if i < 0 {
			t.Errorf("at 60 columns, column %q is not among %q in their order:\n%s", h, termNarrowColumns, out)
			break
		}
		at += i + 1
	}
	if len(lines) != len(rows)+1 {
		t.Errorf("%d lines for %d sessions:\n%s", len(lines), len(rows), out)
	}
	for _, line := range lines {
		if cellWidth(line) > 60 || strings.HasSuffix(line, " ") {
			t.Errorf("at 60 columns, a line of %d, or ending in a blank: %q", cellWidth(line), line)
		}
	}
	for _, want := range []string{"poller", "scheduler", "key 1840100555", "key 3,4", "HELD, 1 waiting", "waiting"} {
		if !strings.Contains(out, want) {
			t.Errorf("at 60 columns, %q is gone:\n%s", want, out)
		}
	}
}

// TestTableWrapsLastColumn: a last column too wide for the terminal wraps
// at blanks under itself, the other columns blank beside its further
// lines, each line painted on its own; a word longer than the column is
// cut.
func TestTableWrapsLastColumn(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, true)
	rows := [][]string{
		{"lease", "poller", "PASS", "held by pid 6330 for 3h12m, renewed 2s ago, one stand-by queued"},
		{"pooler", "-", "SKIP", "not asked"},
		{"dsn", "-", "FAIL", "postgres://app@db.internal.example:6432/app?sslmode=verify-full"},
	}
	opt := tableOptions{Width: 50, Paint: map[string]func(string) string{
		"RESULT": func(c string) string { return st.OK.Render(c) },
		"DETAIL": func(c string) string { return st.Dim.Render(c) },
	}}
	var out bytes.Buffer
	if err := writeTable(&out, []string{"CHECK", "ROLE", "RESULT", "DETAIL"}, rows, opt); err != nil {
		t.Fatal(err)
	}
	const want = "" +
		"CHECK   ROLE    RESULT  DETAIL\n" +
		"lease   poller  PASS    held by pid 6330 for\n" +
		"                        3h12m, renewed 2s ago, one\n" +
		"                        stand-by queued\n" +
		"pooler  -       SKIP    not asked\n" +
		"dsn     -       FAIL    postgres://app@db.internal\n" +
		"                        .example:6432/app?sslmode=\n" +
		"                        verify-full\n"
	if got := sgr.ReplaceAllString(out.String(), ""); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")[1:] {
		if open, shut := strings.Count(line, "\x1b[2m"), strings.Count(line, "\x1b[0m"); open != 1 || shut < 1 {
			t.Errorf("line %d does not open and close its own style: %q", i+1, line)
		}
	}
}

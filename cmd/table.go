package cmd

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/charmbracelet/lipgloss"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// tableOptions say how writeTable lays a table out.
type tableOptions struct {
	// Width is the width to fit the table to, in columns; 0: no limit.
	// The Shrink column gives way first, then the last column: its text
	// wraps, at blanks, under itself.
	Width int
	// Shrink names the column (by its header) whose long cells are cut,
	// ending in "…", to fit Width, down to minShrinkWidth: a name that only
	// identifies (an application name), not a detail to read whole.
	Shrink string
	// Drop names the columns (by header) left out, in this order, while
	// the table is wider than Width with Shrink cut as far as it goes.
	Drop []string
	// Paint styles the cells of the column of that header: it gets a
	// cell's escaped text and returns it styled. Only the styles it adds
	// reach the terminal as escape codes.
	Paint map[string]func(string) string
}

// minShrinkWidth is the narrowest the Shrink column is cut to.
const minShrinkWidth = 16

// minWrapWidth is the narrowest the last column is wrapped to: below it,
// lines are left long rather than broken into a column of fragments.
const minWrapWidth = 20

// writeTable prints a borderless table: a header line, then rows, columns
// left-aligned two spaces apart, no trailing blanks. Cells are plain text,
// from anywhere: writeTable escapes each one (termSafe) before it measures,
// wraps or paints it, so no cell can carry a control character to the
// terminal, whatever its source. It fits the table to Width itself, by the
// display width lipgloss measures (columns dropped, Shrink cut, the last
// column wrapped), paints the cells, and only then hands tablewriter
// (layoutTable) what fits, to lay out as it is.
func writeTable(w io.Writer, header []string, rows [][]string, opt tableOptions) error {
	header = slices.Clone(header)
	for i, h := range header {
		header[i] = termSafe(h)
	}
	safe := make([][]string, 0, len(rows))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = termSafe(c)
		}
		safe = append(safe, cells)
	}
	for _, name := range opt.Drop {
		col := slices.Index(header, name)
		if opt.Width <= 0 || col < 0 || len(header) < 2 || narrowest(header, safe, opt.Shrink) <= opt.Width {
			break
		}
		header = slices.Delete(header, col, col+1)
		for i, r := range safe {
			if col < len(r) {
				safe[i] = slices.Delete(r, col, col+1)
			}
		}
	}
	if opt.Width > 0 && opt.Shrink != "" {
		shrinkColumn(header, safe, slices.Index(header, opt.Shrink), opt.Width)
	}
	if opt.Width > 0 && len(header) > 1 {
		wrapLastColumn(header, safe, opt.Width)
	}
	for col, h := range header {
		paint := opt.Paint[h]
		if paint == nil {
			continue
		}
		for _, r := range safe {
			if col < len(r) && r[col] != "" {
				r[col] = paintCell(r[col], paint)
			}
		}
	}
	return layoutTable(w, header, safe)
}

// narrowest is the table's width with column shrink (by header) cut to
// minShrinkWidth.
func narrowest(header []string, rows [][]string, shrink string) int {
	total := 2 * (len(header) - 1)
	for c, h := range header {
		w := cellWidth(h)
		for _, r := range rows {
			if c < len(r) {
				w = max(w, cellWidth(r[c]))
			}
		}
		if h == shrink {
			w = min(w, max(minShrinkWidth, cellWidth(h)))
		}
		total += w
	}
	return total
}

// shrinkColumn cuts the cells of column col that make the table wider
// than width, ending them in "…", but never below minShrinkWidth (nor the
// header's width).
func shrinkColumn(header []string, rows [][]string, col, width int) {
	if col < 0 {
		return
	}
	total, colW := 2*(len(header)-1), 0
	for c := range header {
		w := cellWidth(header[c])
		for _, r := range rows {
			if c < len(r) {
				w = max(w, cellWidth(r[c]))
			}
		}
		total += w
		if c == col {
			colW = w
		}
	}
	fit := max(colW-(total-width), minShrinkWidth, cellWidth(header[col]))
	if total <= width || fit >= colW {
		return
	}
	for _, r := range rows {
		if col < len(r) && cellWidth(r[col]) > fit {
			head, _ := cutWidth(r[col], fit-1)
			r[col] = head + "…"
		}
	}
}

// wrapLastColumn wraps the last column's text so that every line fits in
// width: a cell too long becomes several lines, joined by "\n", that
// tablewriter prints under one another in that column, the other columns
// blank beside them. The other columns keep their widths. The breaks are
// wrapText's (greedy, at blanks, a word longer than the column cut), not
// tablewriter's own AutoWrap, which balances the lines instead, never cuts a
// word (so a line could overrun the terminal) and measures by other rules
// than lipgloss.
func wrapLastColumn(header []string, rows [][]string, width int) {
	last := len(header) - 1
	start := 0
	for col := range last {
		w := cellWidth(header[col])
		for _, r := range rows {
			if col < len(r) {
				w = max(w, cellWidth(r[col]))
			}
		}
		start += w + 2
	}
	avail := max(width-start, minWrapWidth)
	for _, r := range rows {
		if len(r) > last && cellWidth(r[last]) > avail {
			r[last] = strings.Join(wrapText(r[last], avail), "\n")
		}
	}
}

// paintCell styles each line of an escaped cell (several when it was
// wrapped), so that every line opens and closes its own styles.
func paintCell(c string, paint func(string) string) string {
	if !strings.Contains(c, "\n") {
		return paint(c)
	}
	lines := strings.Split(c, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = paint(l)
		}
	}
	return strings.Join(lines, "\n")
}

// tableRendition draws no border and no rule: only the cells, each followed
// by tablePadding, and a blank between columns, so two blanks apart.
var tableRendition = tw.Rendition{
	Borders: tw.BorderNone,
	Symbols: tw.NewSymbolCustom("leasectl").WithColumn(" "),
	Settings: tw.Settings{
		Separators: tw.Separators{ShowHeader: tw.Off, ShowFooter: tw.Off, BetweenRows: tw.Off, BetweenColumns: tw.On},
		Lines:      tw.Lines{ShowTop: tw.Off, ShowBottom: tw.Off, ShowHeaderLine: tw.Off, ShowFooterLine: tw.Off},
	},
}

// tablePadding is the blank after each cell (after the last column, with
// the column's own padding, trailing blanks that layoutTable cuts). One
// blank, not the gap's two: tablewriter repeats the padding string per
// column of padding, so a two-blank one pads every cell too far and then
// cuts it back, at a cost on every cell.
var tablePadding = tw.Padding{Left: "", Right: " ", Overwrite: true}

// tableCells is how tablewriter treats header and row cells alike: as
// they are, left-aligned, no title-casing, wrapping, trimming or merging.
var tableCells = tw.CellConfig{
	Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone, AutoFormat: tw.Off},
	Padding:    tw.CellPadding{Global: tablePadding},
	Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
	Merging:    tw.CellMerging{Mode: tw.MergeNone},
}

// tablewriterSetup sets tablewriter's process-wide options, once, before
// its first table.
var tablewriterSetup sync.Once

// layoutTable prints what writeTable describes, of cells already escaped,
// fitted and perhaps styled, through tablewriter: each column as wide as
// its widest cell, two blanks between columns, no trailing blanks. A cell
// of several lines ("\n") takes as many lines, the other columns blank.
func layoutTable(w io.Writer, header []string, rows [][]string) error {
	tablewriterSetup.Do(func() {
		// tablewriter memoizes every width it measures in a process-wide
		// LRU of 8,192 strings behind a mutex: for cells that are nearly
		// all short ASCII, measuring again is cheaper than the cache
		// (a fifth of the time of who --all at 10,000 locks, which
		// thrashes it).
		twwidth.SetCacheCapacity(0)
	})
	var buf bytes.Buffer
	buf.Grow(64 * (len(rows) + 1) * len(header))
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tableRendition)),
		// The width of a character must not follow the locale (a CJK one
		// makes "…" and box drawing two columns wide): it is what
		// lipgloss measures, by which the table was fitted.
		tablewriter.WithEastAsian(tw.Off),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tableCells,
			Row:    tableCells,
			Footer: tableCells,
			Behavior: tw.Behavior{AutoHide: tw.Off, TrimSpace: tw.Off, TrimTab: tw.Off, TrimLine: tw.Off,
				Structs: tw.Struct{AutoHeader: tw.Off}},
		}),
		// WithConfig merges, and takes neither WrapNone (zero) nor
		// TrimLine: set them as options.
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithTrimLine(tw.Off),
	)
	t.Header(header)
	if err := t.Bulk(rows); err != nil {
		return err
	}
	if err := t.Render(); err != nil {
		return err
	}
	// tablewriter pads the last column too: cut the blanks at the ends of
	// lines (a cell's own trailing blanks with them, as before).
	out := buf.Bytes()
	trimmed := out[:0]
	for len(out) > 0 {
		line, rest, _ := bytes.Cut(out, []byte{'\n'})
		trimmed = append(trimmed, bytes.TrimRight(line, " ")...)
		trimmed = append(trimmed, '\n')
		out = rest
	}
	_, err := w.Write(trimmed)
	return err
}

// cellWidth is the display width of c: its length for plain ASCII, which
// nearly every cell is, else what lipgloss measures without escape codes.
func cellWidth(c string) int {
	for i := 0; i < len(c); i++ {
		if c[i] >= 0x80 || c[i] == 0x1b {
			return lipgloss.Width(c)
		}
	}
	return len(c)
}

package cmd

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/charmbracelet/lipgloss"
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
// terminal, whatever its source.
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
		safe = wrapLastColumn(header, safe, opt.Width)
	}
	for col, h := range header {
		paint := opt.Paint[h]
		if paint == nil {
			continue
		}
		for _, r := range safe {
			if col < len(r) && r[col] != "" {
				r[col] = paint(r[col])
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
// width: a cell too long becomes more rows, empty but for the rest of its
// text. The other columns keep their widths.
func wrapLastColumn(header []string, rows [][]string, width int) [][]string {
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
	var out [][]string
	for _, r := range rows {
		if len(r) <= last || cellWidth(r[last]) <= avail {
			out = append(out, r)
			continue
		}
		for i, part := range wrapText(r[last], avail) {
			if i == 0 {
				first := slices.Clone(r)
				first[last] = part
				out = append(out, first)
				continue
			}
			more := make([]string, len(r))
			more[last] = part
			out = append(out, more)
		}
	}
	return out
}

// layoutTable prints what writeTable describes, of cells already escaped
// (and perhaps styled): each column as wide as its widest cell, by
// cellWidth, two blanks between columns, no trailing blanks.
func layoutTable(w io.Writer, header []string, rows [][]string) error {
	lines := append([][]string{header}, rows...)
	widths := make([]int, len(header))
	for _, r := range lines {
		for i, c := range r {
			widths[i] = max(widths[i], cellWidth(c))
		}
	}
	pad := strings.Repeat(" ", slices.Max(widths)+2)
	bw := bufio.NewWriterSize(w, 64<<10)
	var line []byte
	for _, r := range lines {
		line = line[:0]
		for i, c := range r {
			line = append(line, c...)
			if i < len(r)-1 {
				line = append(line, pad[:widths[i]-cellWidth(c)+2]...)
			}
		}
		bw.Write(bytes.TrimRight(line, " "))
		bw.WriteByte('\n')
	}
	return bw.Flush()
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

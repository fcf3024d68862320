package cmd

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// tablewriterMaxRows bounds the tables that tablewriter lays out. It spends
// tens of microseconds a row, which for `who --all` on a server with 10,000
// advisory locks was most of the run; larger tables go through
// writeColumns, which prints the same layout (TestColumnsMatchTablewriter).
const tablewriterMaxRows = 500

// writeTable prints a borderless table: a header line, then rows, columns
// left-aligned two spaces apart, no trailing blanks. Cells may carry
// lipgloss styles; widths ignore their escape codes.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	if len(rows) > tablewriterMaxRows {
		return writeColumns(w, header, rows)
	}
	var buf bytes.Buffer
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.Off},
			},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithPadding(tw.Padding{Left: "", Right: "  ", Overwrite: true}),
		tablewriter.WithTrimSpace(tw.Off),
	)
	t.Header(header)
	if err := t.Bulk(rows); err != nil {
		return err
	}
	if err := t.Render(); err != nil {
		return err
	}
	// tablewriter pads the last column too; trailing blanks only get in the
	// way of diff and grep.
	bw := bufio.NewWriter(w)
	for line := range strings.Lines(buf.String()) {
		bw.WriteString(strings.TrimRight(line, " \n"))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// writeColumns prints what writeTable prints, in one pass over the cells.
func writeColumns(w io.Writer, header []string, rows [][]string) error {
	widths := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], cellWidth(c))
		}
	}
	pad := strings.Repeat(" ", slices.Max(widths)+2)
	bw := bufio.NewWriterSize(w, 64<<10)
	var line []byte
	for _, r := range append([][]string{header}, rows...) {
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

package cmd

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
)

// defaultTermWidth is the width assumed for a terminal whose size cannot
// be read.
const defaultTermWidth = 80

// Width is the width, in columns, that text output is fitted to: 0 (no
// limit, lines are never wrapped) when stdout is not a terminal, since
// scripts read those lines; else $COLUMNS when it is set to a positive
// number, else the terminal's width as it is now (80 if it cannot be
// read), so that who --watch follows a resized window. Tests set
// IOStreams.Width to force a width without a terminal.
func (a *App) Width() int {
	if !a.IO.OutTTY {
		return a.IO.Width
	}
	if n, err := strconv.Atoi(strings.TrimSpace(a.Getenv("COLUMNS"))); err == nil && n > 0 {
		return n
	}
	if a.IO.TermWidth != nil {
		if w := a.IO.TermWidth(); w > 0 {
			return w
		}
	}
	if a.IO.Width > 0 {
		return a.IO.Width
	}
	return defaultTermWidth
}

// wrapText breaks s into lines of at most width columns, at blanks; a word
// longer than width is cut. s is plain text (no escape codes).
func wrapText(s string, width int) []string {
	if width < 1 || textWidth(s) <= width {
		return []string{s}
	}
	var lines []string
	var line strings.Builder
	lineW := 0
	for _, word := range strings.Fields(s) {
		ww := textWidth(word)
		if lineW > 0 && lineW+1+ww <= width {
			line.WriteByte(' ')
			line.WriteString(word)
			lineW += 1 + ww
			continue
		}
		if lineW > 0 {
			lines = append(lines, line.String())
			line.Reset()
			lineW = 0
		}
		for ww > width {
			head, rest := cutWidth(word, width)
			lines = append(lines, head)
			word, ww = rest, textWidth(rest)
		}
		line.WriteString(word)
		lineW = ww
	}
	if lineW > 0 {
		lines = append(lines, line.String())
	}
	return lines
}

// cutWidth splits s after its first width columns (at least one rune).
func cutWidth(s string, width int) (string, string) {
	w := 0
	for i, r := range s {
		rw := 1
		if r >= utf8.RuneSelf {
			rw = lipgloss.Width(string(r))
		}
		if w+rw > width && i > 0 {
			return s[:i], s[i:]
		}
		w += rw
	}
	return s, ""
}

// textWidth is the display width of plain text.
func textWidth(s string) int { return cellWidth(s) }

// wrapIndented writes text after a first line's prefix of prefixWidth
// columns, wrapped to width, its further lines indented to line up under
// the first: "  ✓ connect              connected to …" and its detail. With no
// width the text is one line.
func wrapIndented(prefixWidth int, text string, width int) string {
	if width <= 0 || prefixWidth+textWidth(text) <= width {
		return text
	}
	// Too narrow a terminal to line up under the first line: the lines
	// are left a little longer than it rather than cut to fragments.
	avail := max(width-prefixWidth, minWrapWidth)
	return strings.Join(wrapText(text, avail), "\n"+strings.Repeat(" ", prefixWidth))
}

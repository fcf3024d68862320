package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// An Example is a fenced block of a page that shows leasectl at work: its
// `$ ` command lines, each with the output the page shows under it. The
// line before the fence names, in a comment the reader does not see, the
// scenario the commands run in (`<!-- doccheck: NAME -->`), or why the
// block is not run (`<!-- doccheck: skip REASON -->`).
type Example struct {
	File     string
	Line     int // of the opening fence
	Scenario string
	Skip     string
	Commands []Command
}

// A Command is one `$ ` line of an example and the output shown under it,
// up to the next `$ ` line or the closing fence.
type Command struct {
	Line   int
	Text   string // without the "$ "
	Output []string
}

// Where is the example's place, as file:line.
func (e Example) Where() string { return fmt.Sprintf("%s:%d", e.File, e.Line) }

var marker = regexp.MustCompile(`^<!--\s*doccheck:\s*(.*?)\s*-->\s*$`)

// Examples returns the examples of every page Files covers, and a problem
// for each that breaks the rules: a block with a `$ leasectl` line and no
// marker, a marker with no such block under it, a skip with no reason.
func Examples(root string) ([]Example, []string, error) {
	files, err := Files(root)
	if err != nil {
		return nil, nil, err
	}
	var all []Example
	var problems []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, nil, err
		}
		ex, p := ParseExamples(f, string(data))
		all = append(all, ex...)
		problems = append(problems, p...)
	}
	return all, problems, nil
}

// ParseExamples returns the examples of one page's text (file names it in
// Example.File and in the problems).
func ParseExamples(file, text string) ([]Example, []string) {
	lines := strings.Split(text, "\n")
	var out []Example
	var problems []string
	pending, pendingLine := "", 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := marker.FindStringSubmatch(l); m != nil {
			if pending != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: doccheck marker %q has no example under it", file, pendingLine, pending))
			}
			pending, pendingLine = m[1], i+1
			continue
		}
		f := fence.FindStringSubmatch(l)
		if f == nil {
			if strings.TrimSpace(l) != "" && pending != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: doccheck marker %q is not on the line before a fenced block", file, pendingLine, pending))
				pending = ""
			}
			continue
		}
		ex := Example{File: file, Line: i + 1}
		var cur *Command
		leasectl := false
		for i++; i < len(lines); i++ {
			b := lines[i]
			if g := fence.FindStringSubmatch(b); g != nil && g[1] == f[1] {
				break
			}
			if strings.HasPrefix(b, "$ ") {
				ex.Commands = append(ex.Commands, Command{Line: i + 1, Text: strings.TrimSpace(b[2:])})
				cur = &ex.Commands[len(ex.Commands)-1]
				leasectl = leasectl || strings.HasPrefix(cur.Text, "leasectl ")
				continue
			}
			if cur != nil {
				cur.Output = append(cur.Output, b)
			}
		}
		name, reason, skip := strings.Cut(pending, " ")
		switch {
		case !leasectl && pending != "":
			problems = append(problems, fmt.Sprintf("%s:%d: doccheck marker %q is on a block with no $ leasectl line", file, pendingLine, pending))
		case !leasectl:
		case pending == "":
			problems = append(problems, fmt.Sprintf("%s:%d: a block with $ leasectl and no doccheck marker: put <!-- doccheck: SCENARIO --> (a scenario of cmd/doccheck_test.go) or <!-- doccheck: skip REASON --> on the line before its fence", file, ex.Line))
		case name == "skip" && (!skip || strings.TrimSpace(reason) == ""):
			problems = append(problems, fmt.Sprintf("%s:%d: doccheck: skip needs a reason", file, pendingLine))
		case name == "skip":
			ex.Skip = strings.TrimSpace(reason)
			out = append(out, ex)
		case skip:
			problems = append(problems, fmt.Sprintf("%s:%d: doccheck marker %q: one scenario name, or skip REASON", file, pendingLine, pending))
		default:
			ex.Scenario = name
			out = append(out, ex)
		}
		pending = ""
	}
	if pending != "" {
		problems = append(problems, fmt.Sprintf("%s:%d: doccheck marker %q has no example under it", file, pendingLine, pending))
	}
	return out, problems
}

// What varies from run to run, each replaced by a placeholder on both sides
// of a comparison. Durations are in leasectl's one format (internal/dur) or
// Go's (2h0m0s), times of day and dates in the server's clock.
var placeholders = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?)?`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`), "<time>"},
	{regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b`), "<addr>"},
	{regexp.MustCompile(`PostgreSQL \d+(?:\.\d+)?(?: \([^)]*\))?`), "PostgreSQL <version>"},
	{regexp.MustCompile(`\bsystem \d+`), "system <id>"},
	{regexp.MustCompile(`\b(pid|backend|server says) \d+`), "$1 <pid>"},
	{regexp.MustCompile(`\b\d+(?:\.\d+)? ms\b`), "<dur>"},
	{regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|µs|ns|[dhms])(?:\d+(?:\.\d+)?(?:ms|[hms]))*\b`), "<dur>"},
	// failover times a takeover on the tighter of the two clocks.
	{regexp.MustCompile(`\((?:server|client) clock\)`), "(<which> clock)"},
	// A cell cut to the terminal's width ends where the other cells let it.
	{regexp.MustCompile(`\S+…`), "…"},
}

// Columns of a table whose cells are pids or a host and pid.
var pidColumns = map[string]*regexp.Regexp{
	"PID":     regexp.MustCompile(`^\d+$`),
	"BACKEND": regexp.MustCompile(`^\d+$`),
	"FENCE":   regexp.MustCompile(`^\d+$`),
	"HOLDER":  regexp.MustCompile(`^\S+ pid \d+$`),
}

var (
	tableHeader = regexp.MustCompile(`^[A-Z][A-Z_]*(?: [A-Z][A-Z_]*)*(?:  +[A-Z][A-Z_]*(?: [A-Z][A-Z_]*)*)+$`)
	columnGap   = regexp.MustCompile(`  +`)
)

// Normalize puts output in the form two runs compare in: a note wrapped to
// the terminal's width is one line again, each table row is its cells
// (split where the header's columns begin) joined by two spaces, pids and
// everything in placeholders is replaced, and trailing blank lines go.
func Normalize(lines []string) []string {
	var out []string
	var cols []int
	var names []string
	for _, l := range lines {
		l = strings.TrimRight(l, " \t")
		switch {
		case l == "":
			cols = nil
		case strings.HasPrefix(l, "    ") && len(out) > 0 && out[len(out)-1] != "" && cols == nil:
			out[len(out)-1] += " " + strings.TrimSpace(l)
			continue
		case cols == nil && tableHeader.MatchString(l):
			cols, names = nil, nil
			for _, loc := range columnGap.Split(l, -1) {
				names = append(names, loc)
			}
			at := 0
			for _, n := range names {
				i := strings.Index(l[at:], n) + at
				cols = append(cols, utf8.RuneCountInString(l[:i]))
				at = i + len(n)
			}
		case cols != nil:
			r := []rune(l)
			cells := make([]string, len(cols))
			for i, c := range cols {
				end := len(r)
				if i+1 < len(cols) && cols[i+1] < end {
					end = cols[i+1]
				}
				if c < len(r) {
					cells[i] = strings.TrimSpace(string(r[c:end]))
				}
				if strings.HasSuffix(cells[i], "…") {
					cells[i] = "…" // cut to the terminal's width where the other cells let it
				}
				if re := pidColumns[names[i]]; re != nil && re.MatchString(cells[i]) {
					cells[i] = "<pid>"
					if names[i] == "HOLDER" {
						cells[i] = "<host> pid <pid>"
					}
				}
			}
			l = strings.Join(cells, "  ")
		}
		out = append(out, l)
	}
	for i, l := range out {
		for _, p := range placeholders {
			l = p.re.ReplaceAllString(l, p.with)
		}
		out[i] = strings.TrimRight(columnGap.ReplaceAllString(l, "  "), " ")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// Diff shows how got differs from want, line by line: "-" for a line only
// want has, "+" for one only got has; "" when they are equal.
func Diff(want, got []string) string {
	n, m := len(want), len(got)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if want[i] == got[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	same := true
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && want[i] == got[j]:
			b.WriteString("  " + want[i] + "\n")
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			b.WriteString("+ " + got[j] + "\n")
			j++
			same = false
		default:
			b.WriteString("- " + want[i] + "\n")
			i++
			same = false
		}
	}
	if same {
		return ""
	}
	return b.String()
}

// Compare returns the Diff of a page's output and a run's, both
// normalised; "" when they agree. A page's line that ends in "..." stands
// for any line of the run that begins as it does.
func Compare(page, real []string) string {
	want, got := Normalize(page), Normalize(real)
	for i, w := range want {
		prefix, ok := strings.CutSuffix(w, "...")
		if !ok {
			continue
		}
		for j, g := range got {
			if strings.HasPrefix(g, prefix) {
				got[j] = want[i]
				break
			}
		}
	}
	return Diff(want, got)
}

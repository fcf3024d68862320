package cmd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// Help fitted to the terminal: the help texts are written wrapped at about
// 78 columns, and cobra prints them as they are, so on a narrower terminal
// the terminal broke lines inside words, and on a wider one they stayed
// narrow. --help (and leasectl help CMD) reflows the long description's
// paragraphs and lists, and wraps the flags' descriptions, to the width of
// the terminal ($COLUMNS, else its size, as App.Width), or to 80 columns
// when stdout is not a terminal. Examples are left as they are: they are
// command lines to copy. The reference docs and man pages (gendocs) are
// generated from the texts as written.

func init() {
	// A command's line in a list of commands: "  NAME<pad> Short", its
	// Short wrapped under itself (namePadding -3: a line of its own).
	cobra.AddTemplateFunc("leasectlHangWrap", func(namePadding, width int, s string) string {
		return wrapIndented(namePadding+3, s, width)
	})
}

// helpWidth is the width --help is fitted to.
func (a *App) helpWidth() int {
	if w := a.Width(); w > 0 {
		return w
	}
	return defaultTermWidth
}

// setHelpWidth makes root and every command under it print help fitted to
// app's width.
func setHelpWidth(app *App, root *cobra.Command) {
	usage := root.UsageTemplate()
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		width := app.helpWidth()
		// The flag lists wrapped to the width, their descriptions under
		// themselves (pflag's FlagUsagesWrapped), and so the commands'
		// one-line descriptions.
		w := strconv.Itoa(width)
		c.Root().SetUsageTemplate(strings.NewReplacer(
			".LocalFlags.FlagUsages", ".LocalFlags.FlagUsagesWrapped "+w,
			".InheritedFlags.FlagUsages", ".InheritedFlags.FlagUsagesWrapped "+w,
			"{{rpad .Name .NamePadding }} {{.Short}}", "{{rpad .Name .NamePadding }} {{leasectlHangWrap .NamePadding "+w+" .Short}}",
			`Use "{{.CommandPath}} [command] --help" for more information about a command.`,
			`{{leasectlHangWrap -3 `+w+` (printf "Use %q for more information about a command." (print .CommandPath " [command] --help"))}}`,
		).Replace(usage))
		text := c.Long
		if text == "" {
			text = c.Short
		}
		out := c.OutOrStdout()
		if text = strings.TrimRight(reflowHelp(text, width), " \t\n"); text != "" {
			fmt.Fprintf(out, "%s\n\n", text)
		}
		if c.Runnable() || c.HasSubCommands() {
			fmt.Fprint(out, c.UsageString())
		}
	})
}

// reflowHelp rewraps a help text to width: each paragraph of prose (lines
// that start at the margin, up to a blank or an indented line) as one text;
// each item of an indented list ("  name   what it is", with its
// continuation lines indented further, which say where its text starts)
// with its text under itself, after the item's name. An indented line with
// no text column (a command line) is left as it is.
func reflowHelp(s string, width int) string {
	lines := strings.Split(s, "\n")
	var out []string
	for i := 0; i < len(lines); {
		line := lines[i]
		switch {
		case strings.TrimSpace(line) == "":
			out = append(out, "")
			i++
		case !startsIndented(line):
			var para []string
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != "" && !startsIndented(lines[i]); i++ {
				para = append(para, strings.TrimSpace(lines[i]))
			}
			out = append(out, wrapText(strings.Join(para, " "), width)...)
		default:
			indent := leadingBlanks(line)
			j := i + 1
			for j < len(lines) && strings.TrimSpace(lines[j]) != "" && leadingBlanks(lines[j]) > indent {
				j++
			}
			out = append(out, reflowItem(lines[i:j], width)...)
			i = j
		}
	}
	return strings.Join(out, "\n")
}

// reflowItem rewraps one item of an indented list: its first line and its
// continuation lines.
func reflowItem(item []string, width int) []string {
	first := item[0]
	col := -1
	if len(item) > 1 {
		col = leadingBlanks(item[1])
	} else if i := strings.LastIndex(first, "  "); i > leadingBlanks(first) {
		// After the last run of blanks: "  NAME   error  what it is"
		// keeps its columns.
		col = i + 2
	}
	if col <= leadingBlanks(first) || col >= len(first) || textWidth(first[:col]) != col {
		return item // no text column: a command line, say
	}
	words := []string{strings.TrimSpace(first[col:])}
	for _, l := range item[1:] {
		words = append(words, strings.TrimSpace(l))
	}
	text := strings.Join(words, " ")
	if col+textWidth(text) <= width {
		return []string{first[:col] + text}
	}
	wrapped := wrapText(text, max(width-col, minWrapWidth))
	out := []string{first[:col] + wrapped[0]}
	for _, l := range wrapped[1:] {
		out = append(out, strings.Repeat(" ", col)+l)
	}
	return out
}

func startsIndented(line string) bool { return leadingBlanks(line) > 0 }

func leadingBlanks(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

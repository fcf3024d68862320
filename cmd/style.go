package cmd

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// styles are the few text styles leasectl uses. With colour off every style
// renders its text unchanged, so plain output stays grep-able.
type styles struct {
	OK, Warn, Fail, Info, Dim, Bold lipgloss.Style
}

func newStyles(w io.Writer, color bool) styles {
	r := lipgloss.NewRenderer(w)
	if color {
		r.SetColorProfile(termenv.ANSI256)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return styles{
		OK:   r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		Warn: r.NewStyle().Foreground(lipgloss.Color("3")).Bold(true),
		Fail: r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		Info: r.NewStyle().Foreground(lipgloss.Color("6")),
		Dim:  r.NewStyle().Faint(true),
		Bold: r.NewStyle().Bold(true),
	}
}

// styles returns the styles for stdout.
func (a *App) styles() styles { return newStyles(a.IO.Out, a.Color()) }

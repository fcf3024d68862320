package cmd

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/dur"

	"github.com/charmbracelet/lipgloss"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// Text pieces that several commands render alike: the server line, styles
// that apply only with colour, ages and durations.

// serverLine names the server that answered, in one line; when that is
// wider than width (0: no limit), its parts go on further lines, indented.
func serverLine(st styles, color bool, server dbconn.ServerInfo, addr string, width int) string {
	if server.Addr != "" {
		addr = net.JoinHostPort(server.Addr, strconv.Itoa(server.Port))
	}
	label := "server"
	if color {
		label = st.Bold.Render(label)
	}
	parts := []string{"PostgreSQL " + termSafe(shortVersion(server.Version)), "database " + termSafe(server.Database), "as " + termSafe(server.User)}
	var b strings.Builder
	b.WriteString(label + " " + termSafe(addr))
	lineW := textWidth("server " + termSafe(addr))
	for _, p := range parts {
		if width > 0 && lineW+3+textWidth(p) > width {
			b.WriteString("\n  " + p)
			lineW = 2 + textWidth(p)
			continue
		}
		b.WriteString(" · " + p)
		lineW += 3 + textWidth(p)
	}
	b.WriteString("\n")
	return b.String()
}

// painter renders text in a style only when colour is on: lipgloss costs
// microseconds a cell, and who --all can have 10,000 rows.
func painter(color bool) func(lipgloss.Style, string) string {
	return func(s lipgloss.Style, text string) string {
		if !color {
			return text
		}
		return s.Render(text)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortVersion keeps "15.18" of "15.18 (Debian 15.18-0+deb12u1)".
func shortVersion(v string) string {
	if i := strings.IndexByte(v, ' '); i > 0 {
		return v[:i]
	}
	return v
}

// fmtAge renders a duration the way `who` shows ages: 3s, 2m05s, 1h02m,
// 3d04h.
func fmtAge(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func orQuoted(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// fmtMillis renders a measured duration the one way leasectl does
// (dur.Format): "0.6ms", "412ms", "4.0s".
func fmtMillis(d time.Duration) string { return dur.Format(d) }

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

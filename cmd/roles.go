package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
)

// What the commands that act on roles (who, failover, verify) share:
// loading the role map, resolving ROLE and KEY arguments, the server line,
// and asking for confirmation.

// loadRoleMap loads the keys file. When keysOptional is true (only numeric
// keys were asked for) a missing file is an empty role map, unless the file
// was named by --keys or LEASECTL_KEYS.
func loadRoleMap(app *App, keysOptional bool) (*keys.File, error) {
	f, err := app.LoadKeys()
	var missing *keys.NotFoundError
	if errors.As(err, &missing) && keysOptional && app.Global.Keys == "" && app.Getenv("LEASECTL_KEYS") == "" {
		return &keys.File{Path: missing.Path}, nil
	}
	return f, err
}

// roleOrKey resolves a ROLE name of f, else a numeric KEY (k, or k1,k2).
func roleOrKey(f *keys.File, arg string) (locks.Key, error) {
	if e, ok := f.Role(arg); ok {
		return locks.BigintKey(e.Key), nil
	}
	k, err := locks.ParseKey(arg)
	switch {
	case err != nil && meantAsKey(arg):
		return locks.Key{}, usageErrorf("invalid KEY: %v", err)
	case err != nil:
		return locks.Key{}, unknownRoleError(arg, f)
	}
	return k, nil
}

// meantAsKey reports whether arg was meant as a numeric KEY rather than a
// ROLE: role names start with a letter, so a digit or sign means a key (one
// out of range, say), and "unknown role" would be the wrong complaint.
func meantAsKey(arg string) bool {
	return arg != "" && strings.ContainsRune("0123456789-+", rune(arg[0]))
}

func unknownRoleError(name string, f *keys.File) error {
	if len(f.Roles) == 0 {
		return &InputError{Err: fmt.Errorf("unknown role %q: %s has no roles; give a numeric key (k or k1,k2) instead", name, f.Path)}
	}
	return &InputError{Err: fmt.Errorf("unknown role %q: %s has %s (or give a numeric key: k or k1,k2)",
		name, f.Path, strings.Join(f.Names(), ", "))}
}

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

// confirm asks question on w and reads the answer from the terminal: only
// "y" or "yes" is a yes; end of input is a no.
func confirm(app *App, w io.Writer, question string) (bool, error) {
	if _, err := fmt.Fprintf(w, "%s [y/N] ", question); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(app.IO.In).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(w)
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

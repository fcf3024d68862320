package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/leasectl/leasectl/test/pgtest"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal cols columns wide and returns its master
// and its slave (the terminal a program writes to).
func openPTY(t *testing.T, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestWhoOnAPseudoTerminal: the width comes from the terminal itself; on
// one 60 columns wide who shows its narrow columns, styled, within it, and
// $COLUMNS overrides the terminal's width.
func TestWhoOnAPseudoTerminal(t *testing.T) {
	withoutTermRecord(t) // plain holders, as before the term record
	keysPath := writeFile(t, "keys.yaml", "roles:\n  poller: 1840900021\n  scheduler: 1840900022\n")
	hold(t, pgtest.Conn(t, needLab(t).DirectDSN(), "poller-7f9c"), 1840900021)
	for _, tc := range []struct {
		columns string
		width   int
	}{{"", 60}, {"100", 100}} {
		master, slave := openPTY(t, 60)
		streams := fileStreams(slave, slave, slave)
		if !streams.OutTTY || streams.Width != 60 {
			t.Fatalf("a pseudo-terminal of 60 columns: terminal %v, width %d", streams.OutTTY, streams.Width)
		}
		var got bytes.Buffer
		read := make(chan struct{})
		go func() { _, _ = io.Copy(&got, master); close(read) }()
		app := &App{IO: streams, Getenv: func(k string) string {
			if k == "COLUMNS" {
				return tc.columns
			}
			return ""
		}}
		code := Run(context.Background(), app, []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who"})
		slave.Close()
		<-read                                                // the master reads EIO once the slave is closed
		out := strings.ReplaceAll(got.String(), "\r\n", "\n") // the terminal's line discipline
		if code != ExitOK {
			t.Fatalf("COLUMNS %q: exit %d\n%s", tc.columns, code, out)
		}
		if !sgrOnly.MatchString(out) {
			t.Errorf("COLUMNS %q: no styles on a terminal:\n%q", tc.columns, out)
		}
		linesWithin(t, "who on a pseudo-terminal", out, tc.width)
		if h := tableHeader(t, sgrOnly.ReplaceAllString(out, "")); strings.Join(h, ",") != strings.Join(sessionNarrowColumns, ",") {
			t.Errorf("COLUMNS %q: columns %q, want %q", tc.columns, h, sessionNarrowColumns)
		}
		row(t, sgrOnly.ReplaceAllString(out, ""), "poller", "HELD", "poller-7f9c")
		noRawControls(t, "who on a pseudo-terminal", out)
	}
}

// TestWidthFollowsAResizedTerminal: the width is read from the terminal
// each time output is laid out, so that the frames of who --watch follow
// a window that was resized.
func TestWidthFollowsAResizedTerminal(t *testing.T) {
	_, slave := openPTY(t, 60)
	app := &App{IO: fileStreams(slave, slave, slave), Getenv: func(string) string { return "" }}
	if w := app.Width(); w != 60 {
		t.Fatalf("width %d on a terminal of 60 columns", w)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 132}); err != nil {
		t.Fatal(err)
	}
	if w := app.Width(); w != 132 {
		t.Errorf("width %d after the terminal was resized to 132 columns", w)
	}
}

// TestWaitsShowThemselvesOnATerminal: a connect that takes a while shows,
// on a terminal, what it waits for; piped, it shows nothing but the error.
func TestWaitsShowThemselvesOnATerminal(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dsn := "postgres://u@" + l.Addr().String() + "/db"
	master, slave := openPTY(t, 100)
	var got bytes.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&got, master); close(read) }()
	app := &App{IO: fileStreams(slave, slave, slave), Getenv: func(string) string { return "" }}
	code := Run(context.Background(), app, []string{"--dsn", dsn, "--timeout", "1s", "who", "5"})
	slave.Close()
	<-read
	if code != ExitUnavailable || !strings.Contains(got.String(), "connecting to "+l.Addr().String()+" (up to 1s)") {
		t.Errorf("on a terminal: exit %d, output:\n%q", code, got.String())
	}
	piped := runCLI(t, nil, "--dsn", dsn, "--timeout", "1s", "who", "5")
	if piped.Code != ExitUnavailable || strings.Contains(piped.Stderr, "connecting to") {
		t.Errorf("piped: exit %d, stderr:\n%s", piped.Code, piped.Stderr)
	}
}

// TestProbeIdleCountsDownOnATerminal: `probe --idle` shows, on a terminal,
// the idle wait it is in and how long is left; piped, it shows nothing
// beyond the report.
func TestProbeIdleCountsDownOnATerminal(t *testing.T) {
	dsn := needLab(t).DirectDSN()
	master, slave := openPTY(t, 100)
	var got bytes.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&got, master); close(read) }()
	app := &App{IO: fileStreams(slave, slave, slave), Getenv: func(string) string { return "" }}
	code := Run(context.Background(), app, []string{"probe", "--idle", "2s", dsn})
	slave.Close()
	<-read
	out := got.String()
	if code != ExitOK || !strings.Contains(out, "connection A idle, holding the probe key: ") || !strings.Contains(out, "left of --idle 2s") {
		t.Errorf("on a terminal: exit %d, output:\n%q", code, out)
	}
	piped := runCLI(t, nil, "probe", "--idle", "1s", dsn)
	if piped.Code != ExitOK || strings.Contains(piped.Stdout+piped.Stderr, "holding the probe key:") || strings.Contains(piped.Stdout+piped.Stderr, "probing ") {
		t.Errorf("piped: exit %d:\n%s%s", piped.Code, piped.Stdout, piped.Stderr)
	}
}

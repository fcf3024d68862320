package cmd

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTermLogIsForPeople: on a terminal, a run log line is a short time,
// the level, the role and the message, then the fields that matter, with
// durations in leasectl's one format; no logfmt keys for time and level.
func TestTermLogIsForPeople(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(newTermLogHandler(&b, false)).With("role", "poller", "key", int64(1840000001))
	log.Info("leading", "state", "leading", "backend_pid", 4242, "epoch", 7, "fence_wait", 1500*time.Microsecond)
	log.Warn("cannot connect; retrying", "err", "connect to db: refused", "retry_in", 400*time.Millisecond)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^\d\d:\d\d:\d\d INFO  poller: leading  epoch=7  fence_wait=1\.5ms$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d WARN  poller: cannot connect; retrying  err="connect to db: refused"  retry_in=400ms$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), &b)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i], re)
		}
	}
}

// TestRunLogsForPeopleOnATerminal: leasectl run on a terminal writes the
// person's format, and a plain run (piped) keeps logfmt.
func TestRunLogsForPeopleOnATerminal(t *testing.T) {
	f := newRunFixture(t, "poller", 9300100)
	env := runEnv(f, needLab(t).DirectDSN())
	colour := runCLIWith(t, context.Background(), env, true, "", "run", "--role", "poller", "--", "true")
	if !strings.Contains(colour.Stderr, "\x1b[") {
		t.Errorf("on a terminal, no colour:\n%s", colour.Stderr)
	}
	env["NO_COLOR"] = "1"
	tty := runCLIWith(t, context.Background(), env, true, "", "run", "--role", "poller", "--", "true")
	if tty.Code != 0 || strings.Contains(tty.Stderr, "level=") || !regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d INFO  poller: leading`).MatchString(tty.Stderr) {
		t.Errorf("on a terminal: exit %d, stderr:\n%s", tty.Code, tty.Stderr)
	}
	piped := runCLI(t, env, "run", "--role", "poller", "--", "true")
	if piped.Code != 0 || !strings.Contains(piped.Stderr, "level=INFO msg=leading") {
		t.Errorf("piped: exit %d, stderr:\n%s", piped.Code, piped.Stderr)
	}
}

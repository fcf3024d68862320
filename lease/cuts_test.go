package lease

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// TestIdleCuts: sessions that keep ending (EOF) after the same silence,
// each followed by a connection to the same run of the same server, get
// one warning that names the likely cause; a server's FATAL, our own
// timeouts, ends after different silences, and ends after which the server
// that answers was restarted (an immediate shutdown ends sessions with EOF
// too) do not.
func TestIdleCuts(t *testing.T) {
	eof := fmt.Errorf("session ended: %w", io.ErrUnexpectedEOF)
	fatal := fmt.Errorf("session ended: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01"})
	s := time.Second
	boot := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	run := func(n int) dbconn.Identity {
		return dbconn.Identity{SystemID: 7, StartedAt: boot.Add(time.Duration(n) * time.Minute)}
	}
	same := []dbconn.Identity{run(0), run(0), run(0), run(0), run(0)}
	for _, tc := range []struct {
		name  string
		ends  []time.Duration
		errs  []error
		after []dbconn.Identity // the server the next connection reached
		warns int
	}{
		{"three cuts after 8 s", []time.Duration{8 * s, 8100 * time.Millisecond, 7900 * time.Millisecond}, []error{eof, eof, eof}, same, 1},
		{"two cuts suffice", []time.Duration{8 * s, 8 * s}, []error{eof, eof}, same, 1},
		{"different silences", []time.Duration{2 * s, 8 * s, 20 * s}, []error{eof, eof, eof}, same, 0},
		{"terminated by the server", []time.Duration{8 * s, 8 * s, 8 * s}, []error{fatal, fatal, fatal}, same, 0},
		{"a FATAL in between resets", []time.Duration{8 * s, 8 * s, 8 * s}, []error{eof, fatal, eof}, same, 0},
		{"said once", []time.Duration{8 * s, 8 * s, 8 * s, 8 * s, 8 * s}, []error{eof, eof, eof, eof, eof}, same, 1},
		{"instant ends are no idle cuts", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, []error{eof, eof}, same, 0},
		{"a new silence is said again", []time.Duration{8 * s, 8 * s, 30 * s, 30 * s}, []error{eof, eof, eof, eof}, same, 2},
		// pg_ctl restart -m immediate, again and again, heartbeat 1s: each
		// session ends with EOF after up to a second of silence, and the
		// server that answers next started anew.
		{"restarts", []time.Duration{800 * time.Millisecond, 900 * time.Millisecond, 850 * time.Millisecond, 820 * time.Millisecond},
			[]error{eof, eof, eof, eof}, []dbconn.Identity{run(1), run(2), run(3), run(4)}, 0},
		{"a restart between two cuts", []time.Duration{8 * s, 8 * s, 8 * s}, []error{eof, eof, eof}, []dbconn.Identity{run(0), run(1), run(1)}, 0},
		{"cuts again after a restart", []time.Duration{8 * s, 8 * s, 8 * s}, []error{eof, eof, eof}, []dbconn.Identity{run(1), run(1), run(1)}, 1},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		var c idleCuts
		on := run(0) // the server of the session that ends
		for i, d := range tc.ends {
			c.note(d, tc.errs[i], on, 15*s)
			c.reached(log, tc.after[i])
			on = tc.after[i]
		}
		if got := strings.Count(buf.String(), "keep ending after the same silence"); got != tc.warns {
			t.Errorf("%s: %d warnings, want %d:\n%s", tc.name, got, tc.warns, &buf)
		}
	}
	if isCut(errors.New("heartbeat: timeout")) {
		t.Error("an unrelated error counted as a cut")
	}
}

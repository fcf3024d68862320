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
)

// TestIdleCuts: sessions that keep ending (EOF) after the same silence get
// one warning that names the likely cause; a server's FATAL, our own
// timeouts, or ends after different silences do not.
func TestIdleCuts(t *testing.T) {
	eof := fmt.Errorf("session ended: %w", io.ErrUnexpectedEOF)
	fatal := fmt.Errorf("session ended: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01"})
	s := time.Second
	for _, tc := range []struct {
		name  string
		ends  []time.Duration
		errs  []error
		warns int
	}{
		{"three cuts after 8 s", []time.Duration{8 * s, 8100 * time.Millisecond, 7900 * time.Millisecond}, []error{eof, eof, eof}, 1},
		{"two cuts suffice", []time.Duration{8 * s, 8 * s}, []error{eof, eof}, 1},
		{"different silences", []time.Duration{2 * s, 8 * s, 20 * s}, []error{eof, eof, eof}, 0},
		{"terminated by the server", []time.Duration{8 * s, 8 * s, 8 * s}, []error{fatal, fatal, fatal}, 0},
		{"a FATAL in between resets", []time.Duration{8 * s, 8 * s, 8 * s}, []error{eof, fatal, eof}, 0},
		{"said once", []time.Duration{8 * s, 8 * s, 8 * s, 8 * s, 8 * s}, []error{eof, eof, eof, eof, eof}, 1},
		{"instant ends are no idle cuts", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, []error{eof, eof}, 0},
		{"a new silence is said again", []time.Duration{8 * s, 8 * s, 30 * s, 30 * s}, []error{eof, eof, eof, eof}, 2},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		var c idleCuts
		for i, d := range tc.ends {
			c.note(log, d, tc.errs[i], 15*s)
		}
		if got := strings.Count(buf.String(), "keep ending after the same silence"); got != tc.warns {
			t.Errorf("%s: %d warnings, want %d:\n%s", tc.name, got, tc.warns, &buf)
		}
	}
	if isCut(errors.New("heartbeat: timeout")) {
		t.Error("an unrelated error counted as a cut")
	}
}

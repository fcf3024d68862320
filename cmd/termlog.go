package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/leasectl/leasectl/internal/dur"
)

// termLogHandler writes leasectl run's log for a person at a terminal:
// short time, level, message, then the fields that matter, with colour.
// Piped, run keeps logfmt (or -o json) for machines.
type termLogHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	st    styles
	color bool
	attrs []slog.Attr
}

// termLogHidden are fields a person at the terminal does not need on
// every line: the state (the message says it), the server's pids, the
// key (the role names it) and the JSON schema.
var termLogHidden = map[string]bool{
	"state": true, "backend_pid": true, "fence_backend_pid": true, "key": true, "schema_version": true,
}

func newTermLogHandler(w io.Writer, color bool) *termLogHandler {
	return &termLogHandler{mu: &sync.Mutex{}, w: w, st: newStyles(w, color), color: color}
}

func (h *termLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *termLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup is not used by leasectl's logs; a group's attributes are
// shown without its name.
func (h *termLogHandler) WithGroup(string) slog.Handler { return h }

func (h *termLogHandler) Handle(_ context.Context, r slog.Record) error {
	paint := painter(h.color)
	var b bytes.Buffer
	b.WriteString(paint(h.st.Dim, r.Time.Format("15:04:05")))
	b.WriteByte(' ')
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString(paint(h.st.Fail, "ERROR"))
	case r.Level >= slog.LevelWarn:
		b.WriteString(paint(h.st.Warn, "WARN "))
	default:
		b.WriteString(paint(h.st.Info, "INFO "))
	}
	b.WriteByte(' ')
	var role string
	var fields []string
	add := func(a slog.Attr) {
		if a.Key == "role" || a.Key == "group" {
			role = a.Value.String()
			return
		}
		if termLogHidden[a.Key] || a.Equal(slog.Attr{}) {
			return
		}
		fields = append(fields, paint(h.st.Dim, a.Key+"=")+termLogValue(a.Value))
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	if role != "" {
		b.WriteString(paint(h.st.Bold, role))
		b.WriteString(": ")
	}
	b.WriteString(termSafe(r.Message))
	for _, f := range fields {
		b.WriteString("  ")
		b.WriteString(f)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b.Bytes())
	return err
}

// termLogValue renders one field's value: durations as everywhere else
// (dur.Format), times as a clock time, text quoted when it has spaces.
func termLogValue(v slog.Value) string {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return dur.Format(v.Duration())
	case slog.KindTime:
		return v.Time().Local().Format("15:04:05.000")
	case slog.KindString:
		s := termSafe(v.String())
		if s == "" || strings.ContainsAny(s, " \t=\"") {
			return strconv.Quote(s)
		}
		return s
	}
	return termSafe(fmt.Sprint(v.Any()))
}

var _ slog.Handler = (*termLogHandler)(nil)

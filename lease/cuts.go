package lease

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// idleCuts notices when lease sessions keep ending after the same silence:
// the signature of a proxy or load balancer that closes idle connections
// (HAProxy's timeout client and timeout server, a cloud load balancer's
// idle timeout). Each such end costs a takeover, and only a log line can
// say why.
type idleCuts struct {
	last   []time.Duration
	warned time.Duration
}

// note records that a session ended with err after being silent for
// silence, and logs a warning once the last ends agree.
func (c *idleCuts) note(log *slog.Logger, silence time.Duration, err error, heartbeat time.Duration) {
	if !isCut(err) || silence < 500*time.Millisecond {
		c.last = c.last[:0]
		return
	}
	if n := len(c.last); n > 0 && (silence-c.last[n-1]).Abs() > max(silence/10, 300*time.Millisecond) {
		c.last = c.last[:0] // a different silence: start over
	}
	c.last = append(c.last, silence)
	if len(c.last) > 3 {
		c.last = c.last[1:]
	}
	if len(c.last) < 2 {
		return
	}
	lo, hi := c.last[0], c.last[0]
	for _, d := range c.last {
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo > max(hi/10, 300*time.Millisecond) {
		return
	}
	about := ((lo + hi) / 2).Round(100 * time.Millisecond)
	if c.warned != 0 && (about-c.warned).Abs() < about/10 {
		return // said so already
	}
	c.warned = about
	log.Warn("lease sessions keep ending after the same silence: a proxy or load balancer between here and the server probably closes idle connections (HAProxy timeout client/server, a cloud load balancer's idle timeout); set its idle timeout above the heartbeat interval, or the heartbeat interval below it (a probe with an idle time tells)",
		"silence", about, "times", len(c.last), "heartbeat_interval", heartbeat)
}

// isCut reports whether err is a connection that the other side closed
// (EOF, reset), not a server's FATAL or our own timeout.
func isCut(err error) bool {
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

package lease

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// idleCuts notices when lease sessions keep ending after the same silence:
// the signature of a proxy or load balancer that closes idle connections
// (HAProxy's timeout client and timeout server, a cloud load balancer's
// idle timeout). Each such end costs a takeover, and only a log line can
// say why. A server restart ends every session with EOF too (an immediate
// shutdown sends no FATAL), after whatever silence the heartbeat had
// reached; so a cut counts only once the next connection has reached the
// same run of the same server (its postmaster start time is the cut
// session's).
type idleCuts struct {
	last   []time.Duration
	warned time.Duration
	// pending is the last cut, which the next connection judges.
	pending *idleCut
}

// idleCut is a session end that looked like a proxy's idle timeout.
type idleCut struct {
	silence   time.Duration
	server    dbconn.Identity
	heartbeat time.Duration
}

// note records that a session of server ended with err after being silent
// for silence; the next connection says whether it counts (reached).
func (c *idleCuts) note(silence time.Duration, err error, server dbconn.Identity, heartbeat time.Duration) {
	if !isCut(err) || silence < 500*time.Millisecond {
		c.last, c.pending = c.last[:0], nil
		return
	}
	c.pending = &idleCut{silence: silence, server: server, heartbeat: heartbeat}
}

// reached is told the server that a new connection reached: the pending
// cut counts when it is the cut session's server, still in the same run;
// after a restart (or on another server) it does not, and the count starts
// over. Once the last ends agree it logs a warning.
func (c *idleCuts) reached(log *slog.Logger, server dbconn.Identity) {
	p := c.pending
	c.pending = nil
	switch {
	case p == nil:
		return
	case !p.server.SameServer(server):
		c.last = c.last[:0]
		return
	}
	silence := p.silence
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
	log.Warn("lease sessions keep ending after the same silence, and the server that answers again is the same one (no restart): a proxy or load balancer between here and the server probably closes idle connections (HAProxy timeout client/server, a cloud load balancer's idle timeout); set its idle timeout above the heartbeat interval, or the heartbeat interval below it (a probe with an idle time tells)",
		"silence", about, "times", len(c.last), "heartbeat_interval", p.heartbeat)
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

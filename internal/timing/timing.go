package timing

import (
	"fmt"
	"math"
	"time"
)

// Defaults of a lease's timing, as `leasectl run` and lease.Config use them.
const (
	DefaultHeartbeatInterval = 15 * time.Second
	DefaultHeartbeatTimeout  = 5 * time.Second
	DefaultStopTimeout       = 10 * time.Second
)

// Defaults of the commands that look at leases, each flag's in one place.
const (
	// DefaultTimeout bounds a connect and each database step (--timeout).
	DefaultTimeout = DefaultHeartbeatTimeout
	// DefaultTakeoverWait is how long failover and verify wait for a
	// stand-by to take over (--wait).
	DefaultTakeoverWait = 15 * time.Second
	// DefaultStaleAfter is how long a holder may be idle before who and
	// verify call it stale (--stale): three missed heartbeats.
	DefaultStaleAfter = 3 * DefaultHeartbeatInterval
)

// KillReap is what a program's stop may take beyond its grace period: the
// SIGKILL, and reaping the process group after it.
const KillReap = 2 * time.Second

// CommandStop is the StopTimeout of a lease whose work is a program with
// grace period grace (`leasectl run --grace`): SIGTERM, grace, SIGKILL, and
// KillReap to reap.
func CommandStop(grace time.Duration) time.Duration { return grace + KillReap }

// Lease is the timing of one lease.
type Lease struct {
	// HeartbeatInterval is how often a leader proves its session on the
	// server; a stand-by's wait in the lock queue is bounded by it too.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout bounds each heartbeat.
	HeartbeatTimeout time.Duration
	// StopTimeout is how long the leader's work takes at most to stop once
	// the lease is lost.
	StopTimeout time.Duration
}

// Notice is how long after its last good round trip a leader whose network
// went silent notices: the next heartbeat is due after HeartbeatInterval
// and gives up after HeartbeatTimeout.
func (l Lease) Notice() time.Duration { return l.HeartbeatInterval + l.HeartbeatTimeout }

// Stopped is how long after its last good round trip a leader whose network
// went silent has stopped its work: Notice + StopTimeout. The server must
// keep such a leader's session (and the key) for longer than this.
func (l Lease) Stopped() time.Duration { return l.Notice() + l.StopTimeout }

// DefaultServerTimeout is the server timeout a lease uses unless told
// otherwise: Stopped plus one more HeartbeatTimeout of margin.
func (l Lease) DefaultServerTimeout() time.Duration { return l.Stopped() + l.HeartbeatTimeout }

// TermDeadline is how long after a term's last renewal, on the server's
// clock, its holder has certainly stopped its work if it lost its sessions
// (unless its process was frozen): the renewal's answer reaches the holder
// up to HeartbeatTimeout after the server ran it, the holder notices a loss
// within Notice of that, and stops its work within StopTimeout. A new
// leader that finds the previous term not ended waits until then.
func (l Lease) TermDeadline() time.Duration { return l.Stopped() + l.HeartbeatTimeout }

// CheckServerTimeout reports why serverTimeout, the time the server keeps a
// silent client's session, is unsafe for this lease: it must exceed Stopped.
func (l Lease) CheckServerTimeout(serverTimeout time.Duration) error {
	if serverTimeout <= l.Stopped() {
		return fmt.Errorf("%s must exceed heartbeat interval + heartbeat timeout + stop timeout = %s, or the server could hand the key to another replica before this one has stopped its work", serverTimeout, l.Stopped())
	}
	return nil
}

// ServerTCP is the server-side dead-peer detection a lease sets on its own
// sessions so that the server drops a silent client no sooner than
// serverTimeout after the last packet it received, whatever was in flight,
// and not much later: keepalive probes start once the session has been
// silent for longer than a live leader ever is (Notice, rounded up to whole
// seconds, as the server takes them), one a second, and tcp_user_timeout
// ends the session at serverTimeout. The count gives the same end on
// kernels without TCP_USER_TIMEOUT.
func (l Lease) ServerTCP(serverTimeout time.Duration) TCP {
	idle := time.Duration(math.Ceil(l.Notice().Seconds())) * time.Second
	count := max(1, int(math.Ceil(serverTimeout.Seconds()))-int(idle/time.Second))
	return TCP{Idle: idle, Interval: time.Second, Count: count, UserTimeout: serverTimeout}
}

// ClientTCP is the dead-peer detection of the leader's own socket. Settings
// on the client's side can only make a leader notice sooner, never later,
// so they are safe whatever they are: keepalives after HeartbeatInterval of
// silence, and unacknowledged data given up after HeartbeatTimeout.
func (l Lease) ClientTCP() TCP {
	return TCP{Idle: l.HeartbeatInterval, Interval: max(time.Second, l.HeartbeatTimeout/3), Count: 3, UserTimeout: l.HeartbeatTimeout}
}

// Linux's defaults for a socket with no keepalive settings of its own, and
// for retransmissions.
const (
	OSKeepalivesIdle     = 7200 * time.Second
	OSKeepalivesInterval = 75 * time.Second
	OSKeepalivesCount    = 9
	// OSRetransmitGiveUp is when Linux gives up retransmitting unacknowledged
	// data with tcp_retries2 = 15 (the default) and the minimum RTO of
	// 200 ms: 1023 × 0.2 s of doubling, then 6 × 120 s at the maximum RTO.
	OSRetransmitGiveUp = 924600 * time.Millisecond
)

// TCP is the dead-peer detection of one connection's end: the
// tcp_keepalives_idle, tcp_keepalives_interval, tcp_keepalives_count and
// tcp_user_timeout a PostgreSQL session runs with. Zero values mean the
// operating system's defaults.
//
// A peer that vanishes without a FIN (host death, partition) is noticed by
// one of two paths, and which one depends on what was in flight at the cut:
//
//   - Nothing unacknowledged (Silent): keepalive probes start after Idle of
//     silence, one every Interval. Without tcp_user_timeout the connection
//     is dropped when Count probes went unanswered; with it the count is
//     ignored, and it is dropped at the first probe by which nothing has
//     arrived for tcp_user_timeout, so never before Idle + Interval.
//   - Data unacknowledged (InFlight: a reply lost in the partition, a
//     delayed ACK that never came): keepalives do not run while data is
//     outstanding. The retransmission timer decides: the connection is
//     dropped tcp_user_timeout after the first unacknowledged send, or,
//     without tcp_user_timeout, when tcp_retries2 retransmissions failed
//     (about 15 min).
//
// Measured under real partitions by test/chaos's TestDeadPeerTime.
type TCP struct {
	Idle        time.Duration
	Interval    time.Duration
	Count       int
	UserTimeout time.Duration
}

func (t TCP) resolved() TCP {
	if t.Idle <= 0 {
		t.Idle = OSKeepalivesIdle
	}
	if t.Interval <= 0 {
		t.Interval = OSKeepalivesInterval
	}
	if t.Count <= 0 {
		t.Count = OSKeepalivesCount
	}
	return t
}

// Silent is when the connection is dropped after a cut with nothing in
// flight, counted from the last packet received.
func (t TCP) Silent() time.Duration {
	r := t.resolved()
	if r.UserTimeout <= 0 {
		return r.Idle + r.Interval*time.Duration(r.Count)
	}
	probes := max(1, (r.UserTimeout-r.Idle+r.Interval-1)/r.Interval) // ceil, at least the first probe
	return r.Idle + probes*r.Interval
}

// InFlight is the earliest the connection is dropped after a cut with
// unacknowledged data outstanding, counted from the first unacknowledged
// send (which is at or after the last packet received).
func (t TCP) InFlight() time.Duration {
	if t.UserTimeout > 0 {
		return t.UserTimeout
	}
	return OSRetransmitGiveUp
}

// Earliest is the soonest the connection can be dropped after a cut: the
// shorter of the two paths. A lease is safe only if its leader has stopped
// before this.
func (t TCP) Earliest() time.Duration { return min(t.Silent(), t.InFlight()) }

// Latest is how long the connection can live on after a cut: the longer of
// the two paths (the in-flight path ends a retransmission interval or so
// after InFlight). A partitioned leader's key is held this long.
func (t TCP) Latest() time.Duration { return max(t.Silent(), t.InFlight()) }

// String describes the settings the way PostgreSQL names them.
func (t TCP) String() string {
	return fmt.Sprintf("tcp_keepalives_idle=%s, interval=%s, count=%d, tcp_user_timeout=%s", t.Idle, t.Interval, t.Count, t.UserTimeout)
}

package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
)

// State is where a lease is in its life.
type State string

// The states of a lease. A lease starts Connecting, stands by, leads, and
// goes back to Connecting when the lease is lost; Refused is a connection
// that must not lead; Stopped is final.
const (
	// Connecting: opening a connection, or waiting to retry.
	Connecting State = "connecting"
	// Refused: connected, but this connection must never lead: the server is
	// a standby, or the preflight (the session-stability probe) failed.
	// Run retries after RetryInterval.
	Refused State = "refused"
	// StandingBy: waiting in the server's lock queue for the key.
	StandingBy State = "standing_by"
	// Leading: this session holds the key and work runs.
	Leading State = "leading"
	// Stopped: Run is returning; no session holds the key.
	Stopped State = "stopped"
)

// Change is one state change of a lease.
type Change struct {
	From, To State
	Role     string
	Key      int64
	// BackendPID is the server process of the lease session, 0 when there
	// is none.
	BackendPID uint32
	// Err says why, for changes caused by a failure: a lost lease, a refused
	// connection, a failed connect.
	Err error
	At  time.Time
	// Epoch is the new term's epoch, on a change to Leading; 0 when the
	// term record is not available. Leaderless is how long the role had no
	// term before this one began (0 for its first).
	Epoch      int64
	Leaderless time.Duration
}

// LostError is the cause of work's context when the lease is lost
// (context.Cause): the session ended, or a heartbeat failed.
type LostError struct {
	Err error
}

func (e *LostError) Error() string { return fmt.Sprintf("lease lost: %v", e.Err) }

// Unwrap returns why the lease was lost.
func (e *LostError) Unwrap() error { return e.Err }

// DSNError is the error Run returns for a DSN it cannot parse; its message
// never shows the DSN's password.
type DSNError = dbconn.DSNError

// ErrResigned is the cause of work's context when the leader was asked to
// step down (`leasectl failover` without --force): it stops work, releases
// the key to a stand-by and stands by again.
var ErrResigned = errors.New("asked to step down (leasectl failover)")

// RefusedError says why a connection must not lead.
type RefusedError struct {
	// Reason is a sentence for logs.
	Reason string
	// Err is the preflight's error, if it refused.
	Err error
	// BackendPID is the server process of the refused session.
	BackendPID uint32
	// Standby: the connection reached a standby, or a different server than
	// the first one; during an HA failover that changes within seconds.
	Standby bool
}

func (e *RefusedError) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

// Unwrap returns the preflight's error.
func (e *RefusedError) Unwrap() error { return e.Err }

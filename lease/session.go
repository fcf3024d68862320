package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/internal/timing"
)

// Session describes the lease that work runs under; work finds it with
// [SessionFrom].
type Session struct {
	Role string
	Key  int64
	// BackendPID is the server process that holds the key.
	BackendPID uint32
	// FenceBackendPID is the server process of the stop fence session,
	// which holds the key's fence (locks.Key.Fence) until work has stopped.
	FenceBackendPID uint32
	// Since is when work was started.
	Since time.Time
	// Epoch and TermID name the term that work runs in (see package doc):
	// the epoch increases with every term of the role. Both are zero when
	// the term record is not available.
	Epoch  int64
	TermID string

	conn, fence *pgx.Conn
}

// FenceToken is the term's fencing token, for leasectl.fence in work's own
// transactions (see Fence); "" without the term record.
func (s Session) FenceToken() string {
	if s.TermID == "" {
		return ""
	}
	return term.Token(s.Key, s.Epoch, s.TermID, s.Role)
}

type sessionKey struct{}

// SessionFrom returns the Session of the lease under which work was called
// with ctx.
func SessionFrom(ctx context.Context) (*Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(*Session)
	return s, ok
}

// DupSocket returns a duplicate of the lease connection's socket, for a child
// process to inherit. While any copy is open the operating system keeps the
// connection up, so if this process dies the server releases the key only
// after the child has exited too. The copy shares the socket: never read,
// write or change its flags. It is opened close-on-exec; os/exec's
// ExtraFiles clears that in the child.
func (s *Session) DupSocket() (*os.File, error) { return dupSocket(s.conn, "lease-socket") }

// DupFenceSocket is DupSocket for the stop fence session: a program that
// inherits it keeps the fence held, and a new leader waiting, for as long
// as the program or anything that inherited the descriptor lives.
func (s *Session) DupFenceSocket() (*os.File, error) { return dupSocket(s.fence, "fence-socket") }

// dialer returns pgx's DialFunc for lease connections: TCP keepalives from
// tcp (timing.Lease.ClientTCP), and, where the system has it,
// TCP_USER_TIMEOUT (setUserTimeout), so that this side notices a dead
// network by itself too. Settings on the client's side can only make a
// leader step down sooner, never later.
func dialer(tcp timing.TCP) pgconn.DialFunc {
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     tcp.Idle,
			Interval: tcp.Interval,
			Count:    tcp.Count,
		},
		Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil
			}
			var serr error
			err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, tcp.UserTimeout) })
			return errors.Join(err, serr)
		},
	}
	return d.DialContext
}

// The lease session's server settings. tcp_* make the server drop a client
// it cannot reach after ServerTimeout (never before: see the timing rule in
// the package doc); statement_timeout and idle_session_timeout, which a
// role or database may set, would cancel the stand-by's wait or end the
// leader's idle session. client_connection_check_interval (PostgreSQL 14+)
// makes a stand-by's wait in pg_advisory_lock end within a second of its
// client closing the connection: leasectl sends no cancel requests.
// idle_in_transaction_session_timeout would end a session that a role
// setting gives one. synchronous_commit=off would let a crash lose the last
// term record the lease wrote (a new term, or an end) after the server
// said it committed: its writes wait for the local WAL flush at least.
const (
	setupSQL = `SELECT set_config('tcp_keepalives_idle', $1, false),
       set_config('tcp_keepalives_interval', $2, false),
       set_config('tcp_keepalives_count', $3, false),
       set_config('tcp_user_timeout', $4, false),
       set_config('statement_timeout', '0', false),
       set_config('idle_in_transaction_session_timeout', '0', false),
       CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', false) END`
	setupSQL14 = setupSQL + `,
       set_config('idle_session_timeout', '0', false),
       set_config('client_connection_check_interval', '1s', false)`
)

// setupSession applies the lease settings (timing.Lease.ServerTCP) to the
// session. It runs only after the preflight passed: through a transaction
// pooler, session settings would leak to other clients.
func setupSession(ctx context.Context, conn *pgx.Conn, serverVersion int, tcp timing.TCP) error {
	sql := setupSQL
	if serverVersion >= 140000 {
		sql = setupSQL14
	}
	_, err := conn.Exec(ctx, sql, secs(tcp.Idle), secs(tcp.Interval), strconv.Itoa(tcp.Count), strconv.FormatInt(tcp.UserTimeout.Milliseconds(), 10))
	if err != nil {
		return fmt.Errorf("set the lease session's timeouts: %w", err)
	}
	return nil
}

func secs(d time.Duration) string { return strconv.Itoa(int(math.Ceil(d.Seconds()))) }

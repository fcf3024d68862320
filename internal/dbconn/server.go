package dbconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// Identity names the server that ran a statement: the cluster (the system
// identifier from pg_control_system(), which a streaming standby shares with
// its primary), one run of its postmaster (its start time, which tells a
// primary from its standby and a server from itself after a restart), and
// whether it is in recovery. A statement that reports a different Identity
// than the ones before it ran on another server: a load balancer or pooler
// spreads the connection's statements.
type Identity struct {
	SystemID   int64     `json:"system_identifier,string"`
	StartedAt  time.Time `json:"postmaster_start_time"`
	InRecovery bool      `json:"in_recovery"`
}

// SameServer reports whether i and o are the same run of the same server.
func (i Identity) SameServer(o Identity) bool {
	return i.SystemID == o.SystemID && i.StartedAt.Equal(o.StartedAt)
}

// String names the server for messages.
func (i Identity) String() string {
	role := "primary"
	if i.InRecovery {
		role = "standby"
	}
	return fmt.Sprintf("system %d, started %s, %s", i.SystemID, i.StartedAt.UTC().Format(time.RFC3339Nano), role)
}

// IdentityColumns is the select-list fragment that reads an [Identity], in
// field order; every statement that must say which server ran it includes
// it and scans it with [Identity.Scan].
const IdentityColumns = `(SELECT system_identifier FROM pg_control_system()), pg_postmaster_start_time(), pg_is_in_recovery()`

// Dest returns the scan destinations of IdentityColumns.
func (i *Identity) Dest() []any { return []any{&i.SystemID, &i.StartedAt, &i.InRecovery} }

// ServerInfo says which server and session answered.
type ServerInfo struct {
	// Version is server_version, e.g. "15.18 (Debian 15.18-0+deb12u1)".
	Version string `json:"version"`
	// VersionNum is server_version_num, e.g. 150018.
	VersionNum int `json:"version_num"`
	// Addr and Port are inet_server_addr() and inet_server_port(): where the
	// backend itself listens. Empty and 0 over a unix socket.
	Addr string `json:"addr"`
	Port int    `json:"port"`
	// InRecovery is pg_is_in_recovery(): true on a standby, where advisory
	// locks are local to that server and fence nothing on the primary.
	InRecovery bool   `json:"in_recovery"`
	Database   string `json:"database"`
	User       string `json:"user"`
	// BackendPID is pg_backend_pid(): the server process of this session
	// (through a pooler, of the server connection lent for this statement).
	BackendPID uint32 `json:"backend_pid"`
	// SystemID and StartedAt identify the server (see Identity).
	SystemID  int64     `json:"system_identifier,string"`
	StartedAt time.Time `json:"postmaster_start_time"`
}

// Identity returns the server's identity.
func (s ServerInfo) Identity() Identity {
	return Identity{SystemID: s.SystemID, StartedAt: s.StartedAt, InRecovery: s.InRecovery}
}

// ServerColumns is the select-list fragment that reads a [ServerInfo], in
// the order of [ServerInfo.Dest]; statements that must say which server and
// session answered include it.
const ServerColumns = `current_setting('server_version'),
       current_setting('server_version_num')::int,
       coalesce(host(inet_server_addr()), ''),
       coalesce(inet_server_port(), 0),
       current_database(),
       current_user,
       pg_backend_pid(), ` + IdentityColumns

// Dest returns the scan destinations of ServerColumns.
func (s *ServerInfo) Dest() []any {
	return []any{&s.Version, &s.VersionNum, &s.Addr, &s.Port, &s.Database, &s.User, &s.BackendPID, &s.SystemID, &s.StartedAt, &s.InRecovery}
}

// Server reads ServerInfo in one round trip. A connection to PgBouncer's
// admin console is refused first, with a NotADatabase error. When the
// statement fails, the error is a *FirstStatementError.
func Server(ctx context.Context, conn *pgx.Conn) (ServerInfo, error) {
	var s ServerInfo
	if err := NotADatabase(conn); err != nil {
		return s, err
	}
	if err := conn.QueryRow(ctx, "SELECT "+ServerColumns).Scan(s.Dest()...); err != nil {
		return s, &FirstStatementError{Config: conn.Config(), Err: err}
	}
	return s, nil
}

// FirstStatementError is the first statement of a connection failing (its
// server info, [Server]). Config is the connection's, for a caller that
// asks again on a fresh one ([UnreachableBehind]).
type FirstStatementError struct {
	Config *pgx.ConnConfig
	Err    error
}

func (e *FirstStatementError) Error() string { return "read server info: " + e.Err.Error() }
func (e *FirstStatementError) Unwrap() error { return e.Err }

// UnreachableBehind returns an error of kind errkind.Unavailable when a
// connection's first statement failed (err) because what accepted the
// connection, a pooler, cannot reach the database server behind it: the
// pooler says so (a connection exception, SQLSTATE class 08), or, after no
// answer at all, a fresh connection's statement gets that answer at once.
// PgBouncer keeps the client that came first waiting while it retries the
// server, and tells later ones straight away. The fresh connection has
// timeout to connect and at most a second for its statement. Nil when it
// is not that.
func UnreachableBehind(ctx context.Context, cfg *pgx.ConnConfig, err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = askAgain(ctx, cfg, timeout)
	}
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "08") {
		return nil
	}
	return errkind.Mark(fmt.Errorf("%s accepted the connection, but the database server behind it cannot be reached: %s: %s (SQLSTATE %s): is that server running, and is the pooler pointed at it?",
		Addrs(&cfg.Config), strings.ToLower(pgErr.Severity), pgErr.Message, pgErr.Code), errkind.Unavailable)
}

// askAgain opens a connection of its own and runs one trivial statement:
// the error it gets, or nil.
func askAgain(ctx context.Context, cfg *pgx.ConnConfig, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := Connect(cctx, cfg)
	if err != nil {
		var ce *ConnectError
		if errors.As(err, &ce) {
			return ce.Err
		}
		return err
	}
	defer conn.Close(context.Background())
	sctx, scancel := context.WithTimeout(cctx, min(time.Second, timeout))
	defer scancel()
	var one int
	return conn.QueryRow(sctx, "SELECT 1").Scan(&one)
}

// NotADatabase returns an error of kind errkind.Input when conn reached
// PgBouncer's admin console (the database "pgbouncer" of a PgBouncer), which
// answers only PgBouncer's own commands, in the simple query protocol: no
// lease, probe or reading of locks can run there, and trying again does not
// help. PgBouncer says so in the server_version it reports ("1.18.0/bouncer").
// Nil for a database.
func NotADatabase(conn *pgx.Conn) error {
	v, ok := strings.CutSuffix(conn.PgConn().ParameterStatus("server_version"), "/bouncer")
	if !ok {
		return nil
	}
	cfg := conn.Config()
	return errkind.New(errkind.Input, fmt.Sprintf("%s, database %s, is PgBouncer's admin console (PgBouncer %s), not a database: "+
		"give the database your workers use through that PgBouncer (its dbname in the DSN)", Addrs(&cfg.Config), cfg.Database, v))
}

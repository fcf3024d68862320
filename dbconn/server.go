package dbconn

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
}

// Server reads ServerInfo in one round trip.
func Server(ctx context.Context, conn *pgx.Conn) (ServerInfo, error) {
	var s ServerInfo
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version'),
       current_setting('server_version_num')::int,
       coalesce(host(inet_server_addr()), ''),
       coalesce(inet_server_port(), 0),
       pg_is_in_recovery(),
       current_database(),
       current_user,
       pg_backend_pid()`).Scan(&s.Version, &s.VersionNum, &s.Addr, &s.Port, &s.InRecovery, &s.Database, &s.User, &s.BackendPID)
	if err != nil {
		return s, fmt.Errorf("read server info: %w", err)
	}
	return s, nil
}

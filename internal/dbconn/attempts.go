package dbconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgx makes one attempt per address of a DSN, two with sslmode=prefer (the
// default): TLS first, then plain text. When every attempt fails it joins
// their errors, in order. This file picks, from those, what says why the
// connect failed: the TLS attempt that a server without TLS declined says
// nothing when a plain attempt followed, and a server that target_session_attrs
// turned away (a standby where the primary was wanted) says the most.

// TargetSessionAttrsError reports that target_session_attrs refused a
// server that Connect reached and logged into: a standby where the DSN
// wants the primary (target_session_attrs=primary or read-write), say. It
// wraps pgx's reason (pgconn.ErrStandbyConnection, ErrReadOnlyConnection,
// ErrReadWriteConnection or ErrPrimaryConnection).
type TargetSessionAttrsError struct {
	// Addr names the server: host:port as the DSN names it, with the
	// address connected to in parentheses where that host is a name, or
	// the socket's path.
	Addr string
	// Want is the DSN's target_session_attrs: read-write, primary,
	// read-only or standby.
	Want string
	// Server is what the server turned out to be: ServerStandby,
	// ServerPrimary, ServerReadOnlyPrimary or ServerReadOnly.
	Server string
	Err    error
}

// What a server that target_session_attrs refused turned out to be.
const (
	// ServerStandby is in recovery.
	ServerStandby = "standby"
	// ServerPrimary is not in recovery, and writable.
	ServerPrimary = "primary"
	// ServerReadOnlyPrimary is not in recovery, but read-only
	// (default_transaction_read_only is on).
	ServerReadOnlyPrimary = "read-only primary"
	// ServerReadOnly is read-only; whether it is in recovery could not be
	// found out.
	ServerReadOnly = "read-only"
)

func (e *TargetSessionAttrsError) Error() string {
	return fmt.Sprintf("%s %s, which target_session_attrs=%s refuses", e.Addr, e.is(), e.Want)
}

// Unwrap returns pgx's reason.
func (e *TargetSessionAttrsError) Unwrap() error { return e.Err }

// is says what the server is, after its name.
func (e *TargetSessionAttrsError) is() string {
	switch e.Server {
	case ServerStandby:
		return "is a standby (in recovery)"
	case ServerPrimary:
		return "is a primary (not in recovery)"
	case ServerReadOnlyPrimary:
		return "is read-only though not in recovery (default_transaction_read_only is on)"
	default:
		return "is read-only (transaction_read_only is on)"
	}
}

// advice says what to do about the refusal.
func (e *TargetSessionAttrsError) advice() string {
	switch e.Server {
	case ServerPrimary:
		return "leasectl needs the primary: set target_session_attrs=primary in the DSN, or leave it out"
	case ServerReadOnlyPrimary:
		return "turn default_transaction_read_only off (in the DSN's options, or for the role, the database or the server), or point the DSN at a writable primary"
	default:
		return "point the DSN at the primary, or list the primary among its hosts"
	}
}

// wants maps pgx's reasons for refusing a server to the
// target_session_attrs that gave them and what the server is.
var wants = []struct {
	reason       error
	want, server string
}{
	{pgconn.ErrStandbyConnection, "primary", ServerStandby},
	{pgconn.ErrReadOnlyConnection, "read-write", ""}, // a standby, or default_transaction_read_only: ask
	{pgconn.ErrReadWriteConnection, "read-only", ServerPrimary},
	{pgconn.ErrPrimaryConnection, "standby", ServerPrimary},
}

// explainRefusals wraps validate, the ValidateConnect that pgx derived
// from target_session_attrs, so that a refusal says which server was
// refused and why: a *TargetSessionAttrsError. Other errors pass
// unchanged, a *pgconn.NotPreferredError above all (pgx looks for that
// type itself: target_session_attrs=prefer-standby).
func explainRefusals(validate pgconn.ValidateConnectFunc, names *hostNames) pgconn.ValidateConnectFunc {
	return func(ctx context.Context, pc *pgconn.PgConn) error {
		err := validate(ctx, pc)
		var already *TargetSessionAttrsError
		if err == nil || errors.As(err, &already) {
			return err
		}
		if _, ok := err.(*pgconn.NotPreferredError); ok {
			return err
		}
		for _, w := range wants {
			if errors.Is(err, w.reason) {
				server := w.server
				if server == "" {
					server = readOnlyServer(ctx, pc)
				}
				return &TargetSessionAttrsError{Addr: names.name(pc.Conn().RemoteAddr()), Want: w.want, Server: server, Err: err}
			}
		}
		return err
	}
}

// readOnlyServer says what a read-only server is: a standby, or a primary
// with default_transaction_read_only. PostgreSQL 14 and later report
// in_hot_standby when the session starts; older servers (and poolers that
// do not pass it on) are asked.
func readOnlyServer(ctx context.Context, pc *pgconn.PgConn) string {
	inRecovery := pc.ParameterStatus("in_hot_standby")
	if inRecovery == "" {
		res, err := pc.Exec(ctx, "SELECT pg_is_in_recovery()").ReadAll()
		if err == nil && len(res) == 1 && len(res[0].Rows) == 1 && len(res[0].Rows[0]) == 1 {
			inRecovery = string(res[0].Rows[0][0])
		}
	}
	switch inRecovery {
	case "on", "t":
		return ServerStandby
	case "off", "f":
		return ServerReadOnlyPrimary
	}
	return ServerReadOnly
}

// hostNames remembers the host names of a DSN that pgx resolved, and what
// they resolved to, so that a message names a server as the DSN does.
type hostNames struct {
	// dsn holds the DSN's hosts, each with its port.
	dsn map[hostPort]bool

	mu       sync.Mutex
	resolved []resolved
}

// hostPort is one host of a DSN and its port.
type hostPort struct {
	host string
	port string
}

// resolved is one address that a name resolved to; port is set where the
// lookup gave one (pgx then connects there).
type resolved struct {
	ip, port, name string
}

// newHostNames returns the hostNames of cfg's hosts.
func newHostNames(cfg *pgconn.Config) *hostNames {
	h := &hostNames{dsn: map[hostPort]bool{{cfg.Host, strconv.Itoa(int(cfg.Port))}: true}}
	for _, fb := range cfg.Fallbacks {
		h.dsn[hostPort{fb.Host, strconv.Itoa(int(fb.Port))}] = true
	}
	return h
}

// wrap returns lookup, recording the names it resolves.
func (h *hostNames) wrap(lookup pgconn.LookupFunc) pgconn.LookupFunc {
	return func(ctx context.Context, host string) ([]string, error) {
		addrs, err := lookup(ctx, host)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, a := range addrs {
			r := resolved{ip: a, name: host}
			if ip, port, err := net.SplitHostPort(a); err == nil {
				r.ip, r.port = ip, port
			}
			if r.ip != host && !slices.Contains(h.resolved, r) {
				h.resolved = append(h.resolved, r)
			}
		}
		return addrs, err
	}
}

// name names the server at addr: host:port as the DSN names it, with the
// address in parentheses, where one host name of the DSN alone leads
// there; else the address (or the socket's path).
func (h *hostNames) name(addr net.Addr) string {
	if addr == nil || addr.String() == "" {
		return "the server"
	}
	s := addr.String()
	ip, port, err := net.SplitHostPort(s)
	if err != nil || h == nil || h.dsn[hostPort{ip, port}] {
		return s
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for _, r := range h.resolved {
		if r.ip == ip && (r.port == port || r.port == "" && h.dsn[hostPort{r.name, port}]) && !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
	}
	if len(names) != 1 {
		return s
	}
	return net.JoinHostPort(names[0], port) + " (" + ip + ")"
}

// attempts returns the errors of the connection attempts that err joins,
// in order; err alone when it joins none.
func attempts(err error) []error {
	for e := err; e != nil; {
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			var out []error
			for _, inner := range u.Unwrap() {
				out = append(out, attempts(inner)...)
			}
			return out
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		default:
			e = nil
		}
	}
	return []error{err}
}

// tlsRefused reports the attempt of sslmode=prefer (or allow) that a server
// without TLS declined. pgx does not export that error; its message is all
// there is to go by, and only which attempt a message shows depends on it.
func tlsRefused(err error) bool {
	return strings.Contains(err.Error(), "server refused TLS connection")
}

// sortAttempts splits the attempts that err joins into the servers that
// target_session_attrs refused (one per server) and the other failures.
// An attempt that a server declined TLS for is left out when another
// attempt was made: pgx tries plain text next, and what that attempt met
// is why the connect failed.
func sortAttempts(err error) (refused []*TargetSessionAttrsError, others []error) {
	all := attempts(err)
	var declinedTLS []error
	for _, a := range all {
		var r *TargetSessionAttrsError
		switch {
		case errors.As(a, &r):
			if !slices.ContainsFunc(refused, func(o *TargetSessionAttrsError) bool { return o.Addr == r.Addr && o.Server == r.Server }) {
				refused = append(refused, r)
			}
		case tlsRefused(a):
			declinedTLS = append(declinedTLS, a)
		default:
			others = append(others, a)
		}
	}
	if len(refused) == 0 && len(others) == 0 {
		others = declinedTLS // sslmode=require: TLS is all there was
	}
	return refused, others
}

// causeOf renders why a connect failed from its attempts: the other
// failures (conciseCause), and the servers target_session_attrs refused,
// each by its name.
func causeOf(err error) string {
	refused, others := sortAttempts(err)
	var cause string
	switch len(others) {
	case 0:
	case 1:
		cause = conciseCause(others[0])
	default:
		cause = conciseCause(errors.Join(others...))
	}
	switch {
	case len(refused) == 0:
		return cause
	case cause != "":
		// Name the address of the other failures where they are a
		// network's, at one address: the refused servers are named too.
		var addrs []string
		for _, o := range others {
			var opErr *net.OpError
			if !errors.As(o, &opErr) || opErr.Addr == nil {
				addrs = nil
				break
			}
			if a := opErr.Addr.String(); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 1 {
			cause = addrs[0] + ": " + cause
		}
		parts := []string{cause}
		for _, r := range refused {
			parts = append(parts, r.Error())
		}
		return strings.Join(parts, "; ")
	case len(refused) == 1 || !slices.ContainsFunc(refused, func(r *TargetSessionAttrsError) bool { return r.Addr != refused[0].Addr }):
		r := refused[0]
		return fmt.Sprintf("the server %s, and target_session_attrs=%s refuses it", r.is(), r.Want)
	}
	parts := make([]string, len(refused))
	for i, r := range refused {
		parts[i] = r.Addr + " " + r.is()
	}
	return fmt.Sprintf("target_session_attrs=%s refused every server: %s", refused[0].Want, strings.Join(parts, ", "))
}

// refusalAdvice is the hint of a connect that target_session_attrs
// refused on every server it reached.
func refusalAdvice(refused []*TargetSessionAttrsError) string {
	var advice []string
	for _, r := range refused {
		if a := r.advice(); !slices.Contains(advice, a) {
			advice = append(advice, a)
		}
	}
	return strings.Join(advice, "; ")
}

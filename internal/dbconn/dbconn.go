package dbconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DSNError reports a DSN that could not be parsed. Its message never
// contains the DSN itself, only the reason.
type DSNError struct {
	Reason string
}

func (e *DSNError) Error() string {
	return "malformed DSN: " + e.Reason + " (expected postgres://user@host:port/dbname?param=value or key=value pairs)"
}

// ConnectError reports that the server could not be reached or refused the
// connection (network, TLS, authentication), or that target_session_attrs
// refused every server reached (a standby where the primary is wanted: see
// [TargetSessionAttrsError]). Addr names the host:port or socket that was
// tried; the message says why, from the attempt that says most (not the
// TLS attempt that sslmode=prefer makes first), and what to check, and never
// shows a password of the DSN or the one pgx found in PGPASSWORD or a
// pgpass file.
type ConnectError struct {
	Addr string
	User string
	Err  error
	// Accepted: something at the address accepted the connection before
	// the attempt failed, so it failed in the login (a pooler that waits
	// for its server, say), not on the way there.
	Accepted bool
	hint     string
	secrets  []string
}

func (e *ConnectError) Error() string {
	msg := fmt.Sprintf("connect to %s: %s", e.Addr, causeOf(e.Err))
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return scrubSecrets(msg, e.secrets)
}

// Unwrap returns the underlying pgx or network error.
func (e *ConnectError) Unwrap() error { return e.Err }

// SetHint replaces the error's hint: the caller knows better what went
// wrong (no DSN was given at all, say).
func (e *ConnectError) SetHint(hint string) { e.hint = hint }

// TimedOut reports whether the attempt ran out of time.
func (e *ConnectError) TimedOut() bool {
	var netErr net.Error
	return errors.Is(e.Err, context.DeadlineExceeded) || (errors.As(e.Err, &netErr) && netErr.Timeout())
}

// IsAuth reports whether the server rejected the credentials.
func (e *ConnectError) IsAuth() bool {
	return isAuthError(e.Err)
}

// isAuthError reports a rejection of the credentials: SQLSTATE class 28
// from PostgreSQL, the protocol violation (08P01) "… authentication
// failed" that PgBouncer sends for a wrong password, or the internal error
// (XX000) "authentication failed" that pgpool-II sends.
func isAuthError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "28") ||
		(pgErr.Code == "08P01" || pgErr.Code == "XX000") && strings.Contains(pgErr.Message, "authentication failed"))
}

// Parse parses dsn like libpq does (URL or key=value, with PG* environment
// variables, pgpass and service files filling in what it leaves out) and
// returns a config that works through poolers: no statement cache and
// QueryExecModeExec. A connect timeout is applied when timeout > 0 and the
// DSN does not set connect_timeout itself.
//
// A DSN that would put a piece of its password where messages show it (an
// unescaped "@" or "/" in a URL's password makes its tail the host, the
// database name or a query parameter) is refused with a *DSNError that
// says how to write it, before anything connects.
func Parse(dsn string, timeout time.Duration) (*pgx.ConnConfig, error) {
	if reason := checkURL(dsn); reason != "" {
		return nil, &DSNError{Reason: reason}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, &DSNError{Reason: Scrub(parseReason(err), dsn)}
	}
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	if reason := checkHosts(hosts...); reason != "" {
		return nil, &DSNError{Reason: reason}
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.StatementCacheCapacity = 0
	cfg.DescriptionCacheCapacity = 0
	if timeout > 0 && !strings.Contains(dsn, "connect_timeout") {
		cfg.ConnectTimeout = timeout
	}
	return cfg, nil
}

// Connect opens one connection with cfg. The context bounds the whole
// attempt, including authentication. Failures are returned as *ConnectError.
//
// The connection never sends a cancel request. pgx sends one when a
// statement is interrupted (its context ends, its deadline passes), and
// PgBouncer 1.18, the version Debian 12 ships, crashes when several arrive
// at once (FATAL in disconnect_client(): bad client state), taking every
// client's session with it, a leader's included. An interrupted statement
// closes its connection instead; the server notices the closed socket at
// its next write, or sooner where client_connection_check_interval is set
// (the lease sets it on its sessions).
//
// Where cfg names one address, a socket or an IP address, Connect dials it
// before pgx prepares the connection (pgx builds its type registry first,
// half a millisecond in a new process), so that the server forks the
// session's backend meanwhile.
//
// A server that target_session_attrs turns away (a standby where the
// primary is wanted) fails its attempt with a *TargetSessionAttrsError
// that names it and says what it is, and the ConnectError says so rather
// than what another attempt met (the TLS that sslmode=prefer tries first).
func Connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	ctx = context.WithValue(ctx, connecting{}, true)
	c := cfg.Copy()
	d := &noCancelDialer{dial: c.DialFunc}
	c.DialFunc = d.Dial
	if c.ValidateConnect != nil {
		names := newHostNames(&c.Config)
		if c.LookupFunc != nil {
			c.LookupFunc = names.wrap(c.LookupFunc)
		}
		c.ValidateConnect = explainRefusals(c.ValidateConnect, names)
	}
	d.dialEarly(ctx, c)
	conn, err := pgx.ConnectConfig(ctx, c)
	d.dropEarly()
	if err != nil {
		return nil, newConnectError(cfg, err, d.accepted.Load())
	}
	d.established.Store(true)
	return conn, nil
}

// errNoCancel is what pgx gets when it tries to dial for a cancel request.
var errNoCancel = errors.New("leasectl sends no cancel requests (PgBouncer 1.18 crashes on bursts of them); the interrupted connection is closed instead")

// connecting marks the context of a Connect: its dials open a connection.
// A config taken from an open connection (conn.Config()) dials through that
// connection's noCancelDialer, which must then let them pass.
type connecting struct{}

// noCancelDialer dials only until its connection is established: pgx dials
// again after that only to send a cancel request, outside a Connect. Each
// connection has its own.
type noCancelDialer struct {
	dial        pgconn.DialFunc
	established atomic.Bool
	// accepted: a dial succeeded.
	accepted atomic.Bool

	// early is the dial made before pgx asked for it (dialEarly), until
	// pgx takes it or Connect drops it. mu guards it: pgx may dial from
	// another goroutine while Connect runs (a cancel request when a
	// connection attempt breaks off, go test -race shows it in the lease's
	// restart tests).
	mu    sync.Mutex
	early *earlyDial
}

// earlyDial is a dial's outcome, kept for pgx's first dial of that address.
type earlyDial struct {
	network, addr string
	conn          net.Conn
	err           error
}

// dialFunc is d's way to dial: the config's DialFunc, else a TCP dialer
// with keepalives.
func (d *noCancelDialer) dialFunc() pgconn.DialFunc {
	if d.dial != nil {
		return d.dial
	}
	return (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
}

// dialEarly dials the address pgx will dial first, when cfg has one
// address (fallbacks that differ only in TLS go to the same one) and it
// needs no name lookup. Anything else waits for pgx.
func (d *noCancelDialer) dialEarly(ctx context.Context, cfg *pgx.ConnConfig) {
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			return
		}
	}
	if !strings.HasPrefix(cfg.Host, "/") && net.ParseIP(cfg.Host) == nil {
		return
	}
	if cfg.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	network, addr := pgconn.NetworkAddress(cfg.Host, cfg.Port)
	conn, err := d.dialFunc()(ctx, network, addr)
	d.mu.Lock()
	d.early = &earlyDial{network: network, addr: addr, conn: conn, err: err}
	d.mu.Unlock()
}

// takeEarly returns the early dial of network and addr, once.
func (d *noCancelDialer) takeEarly(network, addr string) *earlyDial {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.early
	if e == nil || e.network != network || e.addr != addr {
		return nil
	}
	d.early = nil
	return e
}

// dropEarly closes an early connection that pgx never asked for.
func (d *noCancelDialer) dropEarly() {
	d.mu.Lock()
	e := d.early
	d.early = nil
	d.mu.Unlock()
	if e != nil && e.conn != nil {
		e.conn.Close()
	}
}

// Dial is the connection's pgconn.DialFunc.
func (d *noCancelDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.established.Load() && ctx.Value(connecting{}) == nil {
		return nil, errNoCancel
	}
	var conn net.Conn
	var err error
	if e := d.takeEarly(network, addr); e != nil {
		conn, err = e.conn, e.err
	} else {
		conn, err = d.dialFunc()(ctx, network, addr)
	}
	if err == nil {
		d.accepted.Store(true)
	}
	return conn, err
}

// Addr renders the first host of cfg as host:port, or the socket path for a
// unix-socket host.
func Addr(cfg *pgconn.Config) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", strings.TrimSuffix(cfg.Host, "/"), cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// Addrs renders every host pgx will try, in order, comma separated.
func Addrs(cfg *pgconn.Config) string {
	addrs := []string{Addr(cfg)}
	for _, fb := range cfg.Fallbacks {
		a := Addr(&pgconn.Config{Host: fb.Host, Port: fb.Port})
		if a != addrs[len(addrs)-1] {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ",")
}

func newConnectError(cfg *pgx.ConnConfig, err error, accepted bool) *ConnectError {
	ce := &ConnectError{Addr: Addrs(&cfg.Config), User: cfg.User, Err: err, Accepted: accepted, secrets: Secrets(cfg.ConnString())}
	if cfg.Password != "" {
		ce.secrets = append(ce.secrets, cfg.Password)
		slices.SortStableFunc(ce.secrets, func(a, b string) int { return len(b) - len(a) })
	}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	refused, others := sortAttempts(err)
	switch {
	case len(refused) > 0 && len(others) == 0:
		// Every server it reached was the wrong kind: a standby, say.
		ce.hint = refusalAdvice(refused)
	case isAuthError(err):
		ce.hint = fmt.Sprintf("authentication failed for user %q: check the user and password in the DSN, PGPASSWORD or the pgpass file", cfg.User)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		ce.hint = "the database does not exist: check the dbname in the DSN"
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		ce.hint = fmt.Sprintf("role %q may not connect to database %q: GRANT CONNECT ON DATABASE %s TO %s, or use another dbname in the DSN",
			cfg.User, cfg.Database, pgx.Identifier{cfg.Database}.Sanitize(), pgx.Identifier{cfg.User}.Sanitize())
	case errors.As(err, &pgErr) && pgErr.Code == "53300":
		ce.hint = "the server has no free connection slots: raise max_connections or close idle sessions"
	case ce.TimedOut() && accepted:
		// The host and port are right: the login is what never ended.
		ce.hint = "it accepted the connection but did not complete the login in time: " + LoginWait
	case ce.TimedOut():
		ce.hint = "no answer in time: is the host reachable and the port right?"
	case errors.Is(err, syscall.ECONNREFUSED):
		ce.hint = "is the server running? check the host and port in the DSN"
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		ce.hint = "the host name does not resolve: check the DSN"
	case isProtocolError(err):
		ce.hint = "whatever answers there does not speak the PostgreSQL protocol: check the host and port in the DSN"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		ce.hint = "the connection was closed during the handshake: is a PostgreSQL server or pooler listening there? check the host and port in the DSN, and the server's log"
	case errors.Is(err, fs.ErrNotExist):
		ce.hint = "no server socket at that path: is the server running? check host= in the DSN"
	default:
		ce.hint = "check the DSN and that the server is running"
	}
	return ce
}

// LoginWait says why a connection that was accepted may never complete its
// login.
const LoginWait = "a pooler there waits for a connection to the database server behind it: is that server running, " +
	"and is the pooler pointed at it? Or the server is overloaded"

// isProtocolError reports whether err is pgx's complaint about bytes that
// are not the PostgreSQL protocol (an HTTP server, say). pgproto3 does not
// export these error types, so their messages are all there is to go by;
// only the hint depends on it, never the exit code.
func isProtocolError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "invalid body length") || strings.Contains(msg, "unexpected message") || strings.Contains(msg, "unknown message type")
}

// conciseCause renders the reason a connection failed without pgx's
// "failed to connect to `user=… database=…`:" wrapper: the server's error,
// the network error, or the innermost error's first line. causeOf calls it
// with the attempts worth showing.
func conciseCause(err error) string {
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &pgErr):
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", strings.ToLower(pgErr.Severity), pgErr.Message, pgErr.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve %s: %s", dnsErr.Name, dnsErr.Err)
	case errors.As(err, &opErr) && opErr.Err != nil:
		return opErr.Err.Error()
	}
	for {
		var inner error
		switch e := err.(type) {
		case interface{ Unwrap() error }:
			inner = e.Unwrap()
		case interface{ Unwrap() []error }:
			// pgx joins the errors of each address it tried: the first one
			// stands for them (Addr names every address).
			if errs := e.Unwrap(); len(errs) > 0 {
				inner = errs[0]
			}
		}
		if inner == nil {
			break
		}
		err = inner
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// parseReason keeps the reason of a pgx parse error and drops the quoted
// connection string that pgx redacts only on a best-effort basis.
func parseReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	} else {
		var pce *pgconn.ParseConfigError
		if !errors.As(err, &pce) || pce.Unwrap() == nil {
			return "cannot parse"
		}
		msg = pce.Unwrap().Error()
	}
	return withoutFragments(msg)
}

var (
	kvNoEquals  = lazyRegexp(`missing "=" after ".*" in connection info string|invalid keyword/value`)
	kvUnclosed  = lazyRegexp(`unterminated quoted string in connection info string`)
	urlNoEquals = lazyRegexp(`(missing|extra) key/value separator "=" in URI query parameter: ".*"`)
	// pgx quotes the part of a URL that it cannot decode; after an
	// unescaped "@" or "/" in a password that part is the password's tail.
	urlSpaces = lazyRegexp(`unexpected spaces found in ".*", use percent-encoded spaces \(%20\) instead`)
	urlBadHex = lazyRegexp(`(invalid percent-encoded token|forbidden value %00 in percent-encoded value): ".*"`)
)

// withoutFragments replaces the piece of the DSN that pgx quotes when a word
// lacks its "=" or a part of a URL cannot be decoded: that piece is most
// often the tail of a password with a space or a quote (key=value form) or
// an "&" (URL form) that was not quoted or escaped, so it must not be shown.
// The replacement says how to write such a value.
func withoutFragments(reason string) string {
	reason = kvNoEquals().ReplaceAllLiteralString(reason,
		`a word without "=" in key=value form (a value with spaces or quotes, a password say, must be quoted: password='two words', with ' and \ inside written \' and \\)`)
	reason = kvUnclosed().ReplaceAllLiteralString(reason,
		`unterminated quoted string in key=value form (a quoted value ends at the first ' not written \': password='it\'s')`)
	reason = urlSpaces().ReplaceAllLiteralString(reason,
		`unexpected spaces in a part of the URL: write a space as %20 (and "@" in a user name or password as %40)`)
	reason = urlBadHex().ReplaceAllString(reason, `${1} in a part of the URL: write "%" as %25`)
	return urlNoEquals().ReplaceAllString(reason,
		`a query parameter with ${1} "=" (in a URL, escape "&" as %26 and "=" as %3D inside values such as the password)`)
}

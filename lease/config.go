package lease

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/locks"
)

// Defaults of [Config]; the timing ones come from package timing.
const (
	DefaultRetryInterval     = 5 * time.Second
	DefaultHeartbeatInterval = timing.DefaultHeartbeatInterval
	DefaultHeartbeatTimeout  = timing.DefaultHeartbeatTimeout
	DefaultStopTimeout       = timing.DefaultStopTimeout
	DefaultHistoryKeep       = 1000
)

// Config configures [Run]. Only Key and a database (DSN or ConnConfig) are
// required.
type Config struct {
	// Role names the lease in logs and state changes, usually a role of
	// keys.yaml. Empty means "key N".
	Role string
	// Key is the advisory-lock key that the replicas of this role contend
	// for. It must not be in the probe's range (locks.IsProbeKey).
	Key int64

	// DSN is the database, parsed with dbconn.Parse (pooler-safe exec mode)
	// when ConnConfig is nil. Use target_session_attrs=primary with several
	// hosts: a standby never leads.
	DSN string
	// ConnConfig is used instead of DSN when set. Run works on a copy; it
	// replaces the copy's DialFunc with one that sets TCP keepalives and
	// TCP_USER_TIMEOUT derived from the heartbeat settings.
	ConnConfig *pgx.ConnConfig

	// RetryInterval bounds the wait between reconnect attempts (which back
	// off from 100 ms) and is the wait after a refusal. Default 5 s.
	RetryInterval time.Duration
	// HeartbeatInterval is how often the leader proves its hold (one
	// statement: its backend, its server and the key; locks.Prove), and the
	// stand-by's lock_timeout. Default 15 s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout bounds each heartbeat and each connect attempt (when
	// ConnConfig sets no ConnectTimeout). Default 5 s.
	HeartbeatTimeout time.Duration
	// StopTimeout is how long work may take to return once its context is
	// cancelled. Run always waits for work; past StopTimeout it logs that the
	// timing rule is broken. Default 10 s.
	StopTimeout time.Duration
	// ServerTimeout is how long the server keeps the session of a client it
	// cannot reach, and with it the key (tcp_user_timeout and keepalives of
	// the session). It must exceed HeartbeatInterval + HeartbeatTimeout +
	// StopTimeout (timing.Lease.Stopped). Default HeartbeatInterval + 2 ×
	// HeartbeatTimeout + StopTimeout (35 s with the other defaults).
	ServerTimeout time.Duration
	// TakeoverDelay is how long a new leader holds the key before it starts
	// work. Zero (the default) starts at once. After the server itself ends
	// the old leader's session (pg_terminate_backend, a restart), the old
	// leader notices at once and stops its work, but a stand-by gets the key
	// just as fast; a delay longer than the old work's stop time rules out
	// the overlap, like consul's lock-delay.
	TakeoverDelay time.Duration

	// Fencing makes the term record a condition of leading: without it (a
	// database without the schema leasectl, and a role that may not create
	// it) the lease refuses to lead, instead of leading without terms. Work
	// that checks its term in its own transactions (Fence) needs it.
	Fencing bool

	// HistoryKeep is how many terms of the role the term record's history
	// keeps (leasectl history); each new term deletes older ones. Default
	// 1000.
	HistoryKeep int

	// ApplicationName is the application_name of the lease session, so
	// that `leasectl who` and `leasectl failover` show which replica leads;
	// the stop fence session gets it with " fence" appended. It is used only
	// when the DSN (or PGAPPNAME) sets none, and kept as given (cut to 63
	// bytes). Default "leasectl lease ROLE@HOSTNAME#PID"
	// ([DefaultApplicationName]): two replicas on one host differ by their
	// process ids.
	ApplicationName string

	// Preflight decides whether this DSN may lead; it runs on every new
	// connection before the connection stands by. A non-nil error refuses.
	// Nil means the session-stability probe, which then runs its connection
	// A on the lease session itself and opens one more connection.
	Preflight func(ctx context.Context, cfg *pgx.ConnConfig) error

	// Logger receives a line for every state change, with role, key and
	// backend_pid. Nil discards.
	Logger *slog.Logger
	// OnStateChange, when set, is called synchronously on every state change.
	OnStateChange func(Change)
	// OnHeartbeat, when set, is called synchronously after every round trip
	// that proves the lease session alive: connect, each stand-by wait,
	// each heartbeat.
	OnHeartbeat func(at time.Time)

	// termPoll is the longest wait for the previous term's end between two
	// readings of it (default 1s; tests make it longer, so that a missed
	// notification shows as a hang); afterTermRead, when set, runs on the
	// lease session after each of those readings (tests: export_test.go).
	termPoll      time.Duration
	afterTermRead func(conn *pgx.Conn)
}

// ConfigError reports an unusable [Config]; Run returns it before connecting.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("lease: invalid %s: %s", e.Field, e.Reason)
}

// withDefaults validates c and fills in defaults; it parses the DSN.
func (c Config) withDefaults() (Config, error) {
	if locks.IsProbeKey(c.Key) {
		return c, &ConfigError{"Key", fmt.Sprintf("%d is in the probe's key range (locks.IsProbeKey); give the role its own key", c.Key)}
	}
	c.Role = c.Name()
	for _, d := range []struct {
		v    *time.Duration
		def  time.Duration
		name string
	}{
		{&c.RetryInterval, DefaultRetryInterval, "RetryInterval"},
		{&c.HeartbeatInterval, DefaultHeartbeatInterval, "HeartbeatInterval"},
		{&c.HeartbeatTimeout, DefaultHeartbeatTimeout, "HeartbeatTimeout"},
		{&c.StopTimeout, DefaultStopTimeout, "StopTimeout"},
		{&c.ServerTimeout, 0, "ServerTimeout"},
	} {
		if *d.v < 0 {
			return c, &ConfigError{d.name, fmt.Sprintf("%s is negative", *d.v)}
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = c.timing().DefaultServerTimeout()
	}
	if c.HistoryKeep < 0 {
		return c, &ConfigError{"HistoryKeep", "it is negative"}
	}
	if c.HistoryKeep == 0 {
		c.HistoryKeep = DefaultHistoryKeep
	}
	if c.TakeoverDelay < 0 {
		return c, &ConfigError{"TakeoverDelay", "it is negative"}
	}
	if err := c.timing().CheckServerTimeout(c.ServerTimeout); err != nil {
		return c, &ConfigError{"ServerTimeout", err.Error()}
	}
	if c.ConnConfig == nil {
		cfg, err := dbconn.Parse(c.DSN, 0)
		if err != nil {
			return c, err
		}
		c.ConnConfig = cfg
	} else {
		c.ConnConfig = c.ConnConfig.Copy()
	}
	c.ConnConfig.DialFunc = dialer(c.timing().ClientTCP())
	if c.ApplicationName == "" {
		c.ApplicationName = DefaultApplicationName("leasectl lease", c.Role)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

// Name is how the lease names itself in logs, metrics and its term
// record: Role, or "key N" when Role is empty.
func (c Config) Name() string {
	return locks.RoleName(c.Role, locks.BigintKey(c.Key))
}

// DefaultApplicationName is "PREFIX ROLE@HOSTNAME#PID", the
// application_name that tells replicas apart: the host, and this process
// among the replicas on it (the process id, which the term record keeps
// as its holder's OS pid). locks.Replica.Host reads the host back. A name
// too long for PostgreSQL's 63 bytes with " fence" after it (the stop
// fence session's) is cut in ROLE first, then at the end of HOSTNAME:
// "#PID" stays whole.
func DefaultApplicationName(prefix, role string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := "#" + strconv.Itoa(os.Getpid())
	limit := maxNameLen - len(fenceSuffix)
	head, tail := prefix+" "+role, "@"+host+pid
	if len(head)+len(tail) > limit {
		head = truncateName(head, max(limit-len(tail), len(prefix)+2))
	}
	return truncateName(head+"@"+host, limit-len(pid)) + pid
}

// fenceSuffix ends the application_name of a single lease's stop fence
// session.
const fenceSuffix = " fence"

// maxNameLen is the longest application_name PostgreSQL keeps
// (NAMEDATALEN - 1 bytes); it cuts longer ones.
const maxNameLen = 63

// sessionConfigs returns the configs of the lease session, which reports
// notifications to onNote, and of the stop fence session, each with its
// application_name unless the DSN sets one; the fence session's name ends
// in suffix.
func (c Config) sessionConfigs(onNote pgconn.NotificationHandler, suffix string) (main, fence *pgx.ConnConfig) {
	main, fence = c.ConnConfig.Copy(), c.ConnConfig.Copy()
	name := main.RuntimeParams["application_name"]
	if name == "" {
		name = c.ApplicationName
		main.RuntimeParams["application_name"] = truncateName(name, maxNameLen)
	}
	fence.RuntimeParams["application_name"] = truncateName(name, maxNameLen-len(suffix)) + suffix
	main.OnNotification = onNote
	return main, fence
}

// truncateName cuts s to at most n bytes without splitting a UTF-8
// sequence.
func truncateName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// timing is the lease's timing model.
func (c Config) timing() timing.Lease {
	return timing.Lease{HeartbeatInterval: c.HeartbeatInterval, HeartbeatTimeout: c.HeartbeatTimeout, StopTimeout: c.StopTimeout}
}

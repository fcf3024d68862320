package probe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/dur"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/locks"
)

// Verdict is the probe's answer.
type Verdict string

const (
	// Stable means session-level advisory locks give mutual exclusion over
	// the DSN: a lease is safe.
	Stable Verdict = "STABLE"
	// Refused means they do not, or the probe could not show that they do.
	Refused Verdict = "REFUSED"
)

// Status is the outcome of one check.
type Status string

// Check outcomes. Only Fail refuses the DSN; Warn does too in strict mode.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	Info Status = "info"
)

// Cause says what a failing check puts at risk.
type Cause string

const (
	// Safety: a lease over this DSN can elect two leaders.
	Safety Cause = "safety"
	// Liveness: a lease over this DSN would not work: stand-bys cannot
	// wait, or the leader keeps losing its session.
	Liveness Cause = "liveness"
	// Strict: only warnings, refused because of --strict.
	Strict Cause = "strict"
)

// The names of the checks, stable for JSON consumers.
const (
	CheckConnect            = "connect"
	CheckPrimary            = "primary"
	CheckContinuity         = "session_continuity"
	CheckExclusion          = "exclusion"
	CheckRelease            = "release"
	CheckPgPool             = "pgpool"
	CheckIdleSurvival       = "idle_survival"
	CheckProxy              = "proxy"
	CheckIdleSessionTimeout = "idle_session_timeout"
	CheckDeadPeer           = "dead_peer_detection"
	CheckPrivileges         = "privileges"
	CheckCleanup            = "cleanup"
)

// Check is one row of the report: a name, an outcome and one line of why.
type Check struct {
	Name   string
	Status Status
	Detail string
	// Cause is what a failing check puts at risk; empty unless it fails.
	Cause Cause
	// Summary, when set, says in a few words what the failure stops, for
	// the verdict's line.
	Summary string
}

func pass(name, detail string) Check { return Check{Name: name, Status: Pass, Detail: detail} }
func warn(name, detail string) Check { return Check{Name: name, Status: Warn, Detail: detail} }
func info(name, detail string) Check { return Check{Name: name, Status: Info, Detail: detail} }
func fail(name string, c Cause, d string) Check {
	return Check{Name: name, Status: Fail, Detail: d, Cause: c}
}

// Options configure [Run].
type Options struct {
	// ConnConfig is the DSN to probe, parsed by dbconn.Parse. Every probe
	// connection is opened from a copy of it.
	ConnConfig *pgx.ConnConfig
	// Conn, when set, is an open connection over ConnConfig to run as
	// connection A, instead of opening one: a lease probes on its own
	// session, so that a reconnect needs one connection less. The probe
	// leaves it open and holding nothing of the probe's; that the key dies
	// with its connection is then shown on a contender's connection, which
	// takes the key over from A and closes.
	Conn *pgx.Conn
	// Key is the advisory key the probe takes; 0 means a key picked at
	// random from the probe's range (see RandomKey), so that probes running
	// at the same time never contend with each other. No role may use it.
	Key int64
	// Contenders is how many further connections contend for the key while
	// the first holds it; default 1 (each costs a server connection).
	Contenders int
	// Rounds is how many times the contenders try; default 2.
	Rounds int
	// Timeout bounds connecting and each step; default 5s. A contender that
	// cannot get a server connection in this time fails the exclusion check.
	Timeout time.Duration
	// HeartbeatInterval is the lease heartbeat the server settings are
	// judged against; default 15s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a lease waits for a heartbeat; default 5s.
	HeartbeatTimeout time.Duration
	// Idle, when set, keeps connection A idle this long while it holds the
	// key and then checks that its session survived: proxies and load
	// balancers cut idle connections (HAProxy's timeout client).
	Idle time.Duration
	// OnIdle, when set, is called as connection A begins its Idle wait,
	// with the time the wait ends: the probe's one long pause, which a
	// command may show.
	OnIdle func(until time.Time)
	// Strict makes warnings refuse the DSN too.
	Strict bool
}

// DefaultApplicationName is the application_name of probe connections when
// the DSN sets none, so that `leasectl who --all` can tell them apart.
const DefaultApplicationName = "leasectl probe"

func (o *Options) withDefaults() Options {
	out := *o
	if out.Key == 0 {
		out.Key = RandomKey()
	}
	if out.Contenders <= 0 {
		out.Contenders = 1
	}
	if out.Rounds <= 0 {
		out.Rounds = 2
	}
	if out.Timeout <= 0 {
		out.Timeout = 5 * time.Second
	}
	if out.HeartbeatInterval <= 0 {
		out.HeartbeatInterval = 15 * time.Second
	}
	if out.HeartbeatTimeout <= 0 {
		out.HeartbeatTimeout = 5 * time.Second
	}
	return out
}

// RandomKey picks a probe key: the high 32 bits of locks.DefaultProbeKey
// ("leas") and random low 32 bits, in the range that keys lint keeps free
// of roles (locks.IsProbeKey). Concurrent probes, and what an interrupted
// probe may have left on a pooled server connection, never meet.
func RandomKey() int64 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		k := locks.ProbeKeyBase | int64(binary.BigEndian.Uint32(b[:]))
		if k != locks.DefaultProbeKey {
			return k
		}
	}
}

// Report is the probe's result. `leasectl probe -o json` renders it in
// the schema of docs/json.md.
type Report struct {
	Verdict Verdict
	// Refusal is the cause of a Refused verdict: safety when any failing
	// check puts mutual exclusion at risk, liveness when they only keep a
	// lease from working, strict when only warnings refused it.
	Refusal Cause
	Strict  bool
	Target  string
	// User and Database are the DSN's; the server's own names for them
	// are in Server (a pooler may map a database name to another).
	User, Database string
	Key            int64
	Server         *dbconn.ServerInfo
	Checks         []Check
	// Elapsed is the wall time of the whole probe.
	Elapsed time.Duration
	// ElapsedMS is Elapsed in milliseconds.
	ElapsedMS float64
}

// Check returns the check called name, and whether the report has it.
func (r *Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Reasons returns the details of the checks that decided a Refused verdict.
func (r *Report) Reasons() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail || (r.Strict && c.Status == Warn) {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

// Decide assembles the verdict from the checks: any failure refuses, and in
// strict mode any warning does too. The cause is safety if any failing
// check says so, else liveness, else strict.
func Decide(checks []Check, strict bool) (Verdict, Cause) {
	cause := Cause("")
	for _, c := range checks {
		switch {
		case c.Status == Fail && c.Cause == Safety:
			return Refused, Safety
		case c.Status == Fail:
			cause = Liveness
		case strict && c.Status == Warn && cause == "":
			cause = Strict
		}
	}
	if cause != "" {
		return Refused, cause
	}
	return Stable, ""
}

// ErrInterrupted is returned, wrapping the context's error, when the probe
// was cancelled before it reached a verdict. It cleaned up regardless.
var ErrInterrupted = errkind.New(errkind.Interrupted, "probe interrupted: no verdict")

// Run probes opts.ConnConfig. It returns an error only when the DSN cannot
// be used at all, when opts is incomplete, or when ctx ended first
// (ErrInterrupted). The DSN cannot be used when the first connection fails
// (a *dbconn.ConnectError, or an error of kind Unavailable naming a pooler
// that does not log clients in), when it reaches PgBouncer's admin console
// (kind Input), when a pooler says it cannot reach the server behind it
// (kind Unavailable), and when the server or a pooler admits no more
// clients, whichever of the probe's connections meets the limit (kind
// Unavailable). Everything else, including other failures of later
// connections, is a check in the report.
//
// Connection A takes the probe key in its first statement, which also says
// which server and backend ran it and reads the settings the checks judge.
// Every contender then tries the key (it must be refused, on another
// backend of the same server), and A proves it still holds it (unlock and
// take again, in one statement): Rounds times. Behind a proxy,
// SpreadConnections more contenders are then opened one after another, each
// trying the key once, and A proves its hold again. With Idle, A then waits. Then A
// disconnects and a contender checks that the key was released with it.
// Every statement is its own round trip and transaction and says which
// backend and server ran it; none reads pg_locks unless something already
// went wrong.
func Run(ctx context.Context, opts Options) (rep *Report, err error) {
	if opts.ConnConfig == nil {
		return nil, errors.New("probe: no connection config")
	}
	o := opts.withDefaults()
	start := time.Now()
	p := &run{opts: o, target: dbconn.Addrs(&o.ConnConfig.Config), randomKey: opts.Key == 0}
	rep = &Report{Strict: o.Strict, Target: p.target, User: o.ConnConfig.User, Database: o.ConnConfig.Database, Key: o.Key}

	if err := p.connectAll(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
		}
		return nil, p.connectFailed("", err)
	}
	defer p.closeAll()
	// Cleanup runs even when ctx is cancelled (Ctrl-C): nothing may be left
	// behind, so it gets a context of its own.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
		defer cancel()
		cleanup := p.cleanup(cctx)
		if rep == nil {
			return // no verdict: err says why
		}
		rep.Checks = append(rep.Checks, cleanup)
		rep.Verdict, rep.Refusal = Decide(rep.Checks, o.Strict)
		rep.Elapsed = time.Since(start)
		rep.ElapsedMS = float64(rep.Elapsed.Microseconds()) / 1000
		if ctx.Err() != nil {
			rep, err = nil, fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
		}
	}()
	if err := dbconn.NotADatabase(p.a); err != nil {
		return nil, err
	}

	connected := fmt.Sprintf("connected to %s in %s as %s", rep.Target, dur.Format(p.connectTime), o.ConnConfig.User)
	if p.borrowedA {
		connected = fmt.Sprintf("connected to %s as %s (connection A is the lease's own session)", rep.Target, o.ConnConfig.User)
	}
	rep.Checks = append(rep.Checks, pass(CheckConnect, connected))
	first, err := p.first(ctx)
	if err != nil {
		p.firstFailed = true
		if ctx.Err() != nil {
			return rep, nil // the deferred cleanup makes this ErrInterrupted
		}
		if err := dbconn.UnreachableBehind(ctx, p.connConfig(), err, p.opts.Timeout); err != nil {
			return nil, err
		}
		rep.Checks[0] = fail(CheckConnect, Liveness, connected+", but "+p.firstStatementFailed(err))
		rep.Checks[0].Summary = "connection A's first statement failed"
		if errors.Is(err, context.DeadlineExceeded) {
			rep.Checks[0].Summary = fmt.Sprintf("connection A got no server connection within %s", o.Timeout)
		}
		return rep, nil
	}
	rep.Server = &first.info
	rep.Checks = append(rep.Checks, checkPrimary(first.info, o.ConnConfig, p.connectedPort()))
	proxy := p.proxyHints(first)
	p.proxied = proxy.check.Status != Pass
	if proxy.pgpool != nil {
		rep.Checks = append(rep.Checks, *proxy.pgpool)
	}

	p.contendersReady()
	for i, c := range p.contenders {
		if fatalConnectError(c.err) {
			// Not a property of the DSN: the server or the pooler is full.
			return nil, p.connectFailed(fmt.Sprintf("the probe's connection %d", i+2), c.err)
		}
	}
	exclusion := p.exclusion(ctx, first)
	if p.fatal != nil {
		return nil, p.fatal
	}
	var idleCut *Check
	if o.Idle > 0 && exclusion.Status == Pass && ctx.Err() == nil {
		c := p.idleSurvival(ctx)
		idleCut = &c
	}
	rep.Checks = append(rep.Checks, p.continuity(), exclusion)
	if idleCut != nil {
		rep.Checks = append(rep.Checks, *idleCut)
	}
	if exclusion.Status == Pass && (idleCut == nil || idleCut.Status == Pass) && ctx.Err() == nil {
		rep.Checks = append(rep.Checks, p.release(ctx))
	}
	rep.Checks = append(rep.Checks, proxy.check,
		checkIdleSessionTimeout(first.settings.Timeouts, o.HeartbeatInterval),
		checkDeadPeer(first.settings, proxy.relayedTCP, p.pooler, o.HeartbeatInterval, o.HeartbeatTimeout),
		checkPrivileges(first.settings))
	return rep, nil
}

// run is the state of one probe: its connections and what they observed.
type run struct {
	opts Options
	// target names the DSN's hosts for messages.
	target string
	a      *pgx.Conn
	// borrowedA: a is Options.Conn, which the probe must leave open.
	borrowedA   bool
	contenders  []*contender
	connectTime time.Duration

	mu sync.Mutex
	// pids are every backend pid any probe statement ran on: the sessions
	// that may hold the probe key and must be released.
	pids map[uint32]bool
	// aObs are A's statements: backend and server, in order.
	aObs []observation
	// aLocked says A may hold the key; aClosed that A disconnected.
	aLocked, aClosed bool
	// multiplexed says a statement ran on another client's backend, or one
	// of A's moved: the key may be left on pooled backends.
	multiplexed bool
	// firstFailed: A's first statement, which takes the key, did not
	// complete, and A's connection is closed.
	firstFailed bool
	// unsure: a statement that takes the key failed or was interrupted
	// without its result, so the key may be held by a backend the probe
	// never saw (a pooled one, after its client left). randomKey: the
	// probe picked the key itself, so no one else holds it.
	unsure, randomKey bool
	// releaseFree: the release check saw the key free after the
	// connection that held it closed.
	releaseFree bool
	// proxied: the proxy check saw signs of a proxy or pooler, so the
	// probe also opens contenders one after another (see sequential).
	proxied bool
	// pooler names the pooler in the path when the probe knows it
	// (pgpoolName), for advice that names its settings.
	pooler string
	// fatal is an error that ends the probe without a verdict, found
	// while it ran (a pooler's client limit).
	fatal error

	// bg tracks the contenders' background connects.
	bg       sync.WaitGroup
	cancelBG context.CancelFunc
	stopBG   func()
}

// observation is which backend, on which server, ran a statement.
type observation struct {
	pid    uint32
	server dbconn.Identity
}

type contender struct {
	conn    *pgx.Conn
	err     error
	tookKey bool
	// after: opened one after another once A held the key (sequential),
	// not at the same time as A.
	after bool
}

func (p *run) connConfig() *pgx.ConnConfig {
	cfg := p.opts.ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = DefaultApplicationName
	}
	return cfg
}

// connectAll opens A and starts the contenders' connections, which go on in
// the background: the probe's cost is mostly connection setup, and it must
// not cost much more than the textbook probe's single connection.
func (p *run) connectAll(ctx context.Context) error {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.Timeout)
	p.cancelBG = cancel
	stop := context.AfterFunc(ctx, cancel) // Ctrl-C still stops them
	p.stopBG = func() { stop() }
	start := time.Now()
	p.contenders = make([]*contender, p.opts.Contenders)
	for i := range p.contenders {
		c := &contender{}
		p.contenders[i] = c
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			c.conn, c.err = dbconn.Connect(bg, p.connConfig())
		}()
	}
	if p.opts.Conn != nil {
		p.a, p.borrowedA = p.opts.Conn, true
		return nil
	}
	actx, acancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer acancel()
	a, err := dbconn.Connect(actx, p.connConfig())
	p.connectTime = time.Since(start)
	if err != nil {
		p.closeAll()
		return err
	}
	p.a = a
	return nil
}

// contendersReady waits until every contender connected or failed to.
func (p *run) contendersReady() { p.bg.Wait() }

// closeAll closes every connection in parallel, after stopping and waiting
// for the background connects.
func (p *run) closeAll() {
	p.cancelBG()
	p.bg.Wait()
	p.stopBG()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, conn := range append([]*pgx.Conn{p.a}, p.contenderConns()...) {
		if conn != nil && !conn.IsClosed() && !(p.borrowedA && conn == p.a) {
			wg.Add(1)
			go func() { defer wg.Done(); conn.Close(ctx) }()
		}
	}
	wg.Wait()
}

func (p *run) contenderConns() []*pgx.Conn {
	var out []*pgx.Conn
	for _, c := range p.contenders {
		if c.conn != nil {
			out = append(out, c.conn)
		}
	}
	return out
}

func (p *run) step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.opts.Timeout)
}

// mayHaveTaken records that a statement that takes the key ended without
// its result (see run.unsure).
func (p *run) mayHaveTaken() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsure = true
}

func (p *run) sawPID(pid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pids == nil {
		p.pids = map[uint32]bool{}
	}
	p.pids[pid] = true
}

// connectedPort is the port A's socket is connected to, or 0 over a unix
// socket: with several hosts in the DSN, the one pgx chose.
func (p *run) connectedPort() int {
	if addr, ok := p.a.PgConn().Conn().RemoteAddr().(*net.TCPAddr); ok {
		return addr.Port
	}
	return 0
}

// localPort is the client-side port of a TCP connection, or 0.
func localPort(conn *pgx.Conn) int {
	if addr, ok := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr); ok {
		return addr.Port
	}
	return 0
}

// explain renders an error of a probe statement, naming the pooler trap
// when the error is its signature.
func (p *run) explain(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", p.opts.Timeout)
	}
	switch sqlState(err) {
	case "42P05", "26000":
		return fmt.Sprintf("%v: prepared statements of one client appear on another client's server connection: connections are multiplexed (transaction or statement pooling)", err)
	case "57014":
		return fmt.Sprintf("%v: the server's statement_timeout (from the DSN's options, or set for the role or database) is shorter than this statement", err)
	}
	return err.Error()
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// ---- errors that leave no verdict ----

// clientLimit reports a pooler refusing a client because it admits no
// more (PgBouncer's max_client_conn).
func clientLimit(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "max_client_conn")
}

// fatalConnectError reports a failed connect that says the server or the
// pooler is full: not a property of the DSN, and the same answer whichever
// of the probe's connections met it.
func fatalConnectError(err error) bool {
	return err != nil && (clientLimit(err) || dbconn.TooManyConnections(err))
}

// connectFailed renders the error of a connect that ends the probe;
// which names the connection when it is not A.
func (p *run) connectFailed(which string, err error) error {
	if clientLimit(err) {
		var pgErr *pgconn.PgError
		errors.As(err, &pgErr)
		return errkind.Mark(fmt.Errorf("connect to %s: the pooler there admits no more clients (%s): the probe needs %d connections at once, and a lease two per replica; raise its client limit (PgBouncer: max_client_conn) or close idle clients, then probe again",
			p.target, pgErr.Message, 1+p.opts.Contenders), errkind.Unavailable)
	}
	var ce *dbconn.ConnectError
	if which == "" && errors.As(err, &ce) && ce.TimedOut() && ce.Accepted {
		return errkind.Mark(fmt.Errorf("connect to %s: it accepted the connection but did not complete the login within %s: %s",
			p.target, p.opts.Timeout, dbconn.LoginWait), errkind.Unavailable)
	}
	if which != "" {
		return fmt.Errorf("%s: %w", which, err)
	}
	return err
}

// firstStatementFailed says why A's first statement failed, when the DSN
// is not unreachable.
func (p *run) firstStatementFailed(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("connection A's first statement got no answer within %s: the pooler there gave it no server connection in that time (every server connection of its pool is in use, or it is still trying to reach the server), or the server is stalled; a stand-by could not even get a server connection to wait on", p.opts.Timeout)
	}
	return "connection A's first statement failed: " + p.explain(err)
}

package probe

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/timing"
)

// ---- session continuity (the runbook's probe) ----

// continuity holds what the runbook's probe observed on connection A.
type continuity struct {
	createErr error
}

// continuityStart creates the temp table with its row, in a statement of its
// own. The rest of the runbook's probe runs after the exclusion check, so
// that the session has to survive contention too.
func (p *run) continuityStart(ctx context.Context) continuity {
	ctx, cancel := p.step(ctx)
	defer cancel()
	_, err := p.a.Exec(ctx, "CREATE TEMP TABLE "+p.ident()+" AS SELECT 42 AS v")
	// Drop it on cleanup unless the server certainly did not create it.
	p.tableMaybe = err == nil || sqlState(err) == ""
	return continuity{createErr: err}
}

func (p *run) ident() string { return pgx.Identifier{p.table}.Sanitize() }

// continuityFinish reads the backend pid again and the row back, each in its
// own round trip, and judges the sequence of pids A's statements ran on. On
// a read-only standby, where no temp table can be made, only the pids count.
func (p *run) continuityFinish(ctx context.Context, c continuity, server dbconn.ServerInfo) Check {
	standby := c.createErr != nil && server.InRecovery && sqlState(c.createErr) == "25006"
	if c.createErr != nil && !standby {
		detail := "CREATE TEMP TABLE failed: " + p.explain(c.createErr)
		if sqlState(c.createErr) == "42501" {
			// Without the temp table the runbook's probe cannot run, so
			// the DSN cannot be shown safe: say what would let it.
			detail += fmt.Sprintf("; the probe needs a temp table: GRANT TEMPORARY ON DATABASE %s TO %s, or probe as a role that may create one",
				pgx.Identifier{server.Database}.Sanitize(), pgx.Identifier{server.User}.Sanitize())
		}
		return Check{CheckContinuity, Fail, detail}
	}
	sctx, cancel := p.step(ctx)
	var pid uint32
	err := p.a.QueryRow(sctx, "SELECT pg_backend_pid()").Scan(&pid)
	cancel()
	if err != nil {
		return Check{CheckContinuity, Fail, "SELECT pg_backend_pid() failed: " + p.explain(err)}
	}
	p.sawPID(pid)
	p.aPIDs = append(p.aPIDs, pid)
	what := "no temp table on a read-only standby"
	if !standby {
		sctx, cancel = p.step(ctx)
		var v int
		err = p.a.QueryRow(sctx, "SELECT v FROM "+p.ident()).Scan(&v)
		cancel()
		switch {
		case sqlState(err) == "42P01":
			return Check{CheckContinuity, Fail, fmt.Sprintf("the temp table created earlier is gone (backend pids seen: %s): statements run in different sessions", pidList(p.aPIDs))}
		case err != nil:
			return Check{CheckContinuity, Fail, "reading the temp table back failed: " + p.explain(err)}
		case v != 42:
			return Check{CheckContinuity, Fail, fmt.Sprintf("the temp table row came back as %d, not 42", v)}
		}
		what = "temp table row read back (the runbook's probe: necessary, not sufficient)"
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(p.aPIDs))); len(distinct) > 1 {
		return Check{CheckContinuity, Fail, fmt.Sprintf("connection A's statements ran on %d backends (%s): no stable session", len(distinct), pidList(p.aPIDs))}
	}
	return Check{CheckContinuity, Pass, fmt.Sprintf("backend pid %d for all %d round trips of connection A; %s", pid, len(p.aPIDs)+2, what)}
}

// ---- exclusion under contention ----

// exclusion takes the probe key on A and has every contender try it, Rounds
// times, each try its own statement; A re-reads the key's holders after each
// round. Any of these refuses the DSN: a contender takes the key, a
// contender's statement runs on A's backend, A's statements move to another
// backend, A's key is gone, or a contender cannot get a server connection.
func (p *run) exclusion(ctx context.Context) Check {
	key := p.opts.Key
	sctx, cancel := p.step(ctx)
	lockPID, ok, err := locks.TryLockPID(sctx, p.a, key)
	cancel()
	if err != nil {
		return Check{CheckExclusion, Fail, "connection A could not take the probe key: " + p.explain(err)}
	}
	p.sawPID(lockPID)
	p.aPIDs = append(p.aPIDs, lockPID)
	if !ok {
		sctx, cancel := p.step(ctx)
		_, holders, _ := locks.KeyHolders(sctx, p.a, key)
		cancel()
		return Check{CheckExclusion, Fail, fmt.Sprintf("probe key %d is already held by backend pid(s) %s (another probe running, a worker using the probe key, or a lock stranded on a pooled server connection): try again, pass another --probe-key, or end the holder: SELECT pg_terminate_backend(pid)", key, pidList(holders))}
	}
	p.aLocked = true

	f := newFindings()
	for i, c := range p.contenders {
		if c.err != nil {
			f.note(fmt.Sprintf("contender %d could not connect: %v", i+1, c.err))
		}
	}
	contenderPIDs := map[uint32]bool{}
	live := 0
	for round := 1; round <= p.opts.Rounds; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, c := range p.contenders {
			if c.conn == nil || c.conn.IsClosed() {
				continue
			}
			if round == 1 {
				live++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := p.step(ctx)
				pid, took, err := locks.TryLockPID(sctx, c.conn, key)
				timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
				cancel()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && timedOut:
					f.add("starved", i+1, 0, round)
					c.conn.Close(context.Background())
				case err != nil:
					f.note(fmt.Sprintf("contender %d: %s", i+1, p.explain(err)))
				default:
					p.sawPID(pid)
					contenderPIDs[pid] = true
					if took {
						c.tookKey = true
						f.add("took", i+1, pid, round)
					}
					if pid == lockPID {
						f.add("shared", i+1, pid, round)
					}
				}
			}()
		}
		wg.Wait()

		sctx, cancel := p.step(ctx)
		self, holders, err := locks.KeyHolders(sctx, p.a, key)
		cancel()
		if err != nil {
			f.note("connection A could not read the key's holders: " + p.explain(err))
			continue
		}
		p.sawPID(self)
		p.aPIDs = append(p.aPIDs, self)
		if !slices.Contains(holders, lockPID) {
			f.add("released", 0, 0, round)
		}
		if self != lockPID {
			f.add("moved", 0, self, round)
		}
	}
	if problems := f.render(lockPID, p.opts.Timeout); len(problems) > 0 {
		return Check{CheckExclusion, Fail, strings.Join(problems, "; ")}
	}
	if live == 0 {
		return Check{CheckExclusion, Fail, "no contender connection: exclusion is unproven"}
	}
	others := make([]uint32, 0, len(contenderPIDs))
	for pid := range contenderPIDs {
		others = append(others, pid)
	}
	return Check{CheckExclusion, Pass, fmt.Sprintf("while A (backend pid %d) held key %d, %d contender connection(s) on other backends (%s) were refused it in %d rounds, and A still held it", lockPID, key, live, pidList(others), p.opts.Rounds)}
}

// findings gathers what went wrong in the exclusion check, by kind, so that
// the check's one line of why names each kind once.
type findings struct {
	order []string
	kinds map[string]*finding
	notes []string
}

type finding struct {
	who    []int
	pids   []uint32
	rounds []int
}

func newFindings() *findings { return &findings{kinds: map[string]*finding{}} }

func (f *findings) add(kind string, who int, pid uint32, round int) {
	k := f.kinds[kind]
	if k == nil {
		k = &finding{}
		f.kinds[kind] = k
		f.order = append(f.order, kind)
	}
	if who > 0 && !slices.Contains(k.who, who) {
		k.who = append(k.who, who)
	}
	if pid > 0 && !slices.Contains(k.pids, pid) {
		k.pids = append(k.pids, pid)
	}
	if !slices.Contains(k.rounds, round) {
		k.rounds = append(k.rounds, round)
	}
}

func (f *findings) note(msg string) {
	if !slices.Contains(f.notes, msg) {
		f.notes = append(f.notes, msg)
	}
}

func (f *findings) render(lockPID uint32, timeout time.Duration) []string {
	var out []string
	took, shared := f.kinds["took"], f.kinds["shared"]
	if took != nil && shared != nil {
		out = append(out, fmt.Sprintf("%s ran on A's own backend (pid %s) and took the key A holds: connections share server sessions (transaction or statement pooling), so two clients would both lead", contenders(took.who), pidList(shared.pids)))
		took, shared = nil, nil
	}
	for _, kind := range f.order {
		k := f.kinds[kind]
		switch kind {
		case "took":
			if took != nil {
				out = append(out, fmt.Sprintf("%s took the key A holds (on backend pid %s): two clients would both lead", contenders(k.who), pidList(k.pids)))
			}
		case "shared":
			if shared != nil {
				out = append(out, fmt.Sprintf("%s ran on A's own backend (pid %s): connections share server sessions (transaction or statement pooling)", contenders(k.who), pidList(k.pids)))
			}
		case "starved":
			out = append(out, fmt.Sprintf("%s got no server connection within %s while A held its session: the pool is exhausted (a pool of one?), so a stand-by could not even wait for the lease", contenders(k.who), timeout))
		case "released":
			out = append(out, fmt.Sprintf("A's key was no longer held by its backend pid %d after round %s: something between client and server released it", lockPID, intList(k.rounds)))
		case "moved":
			out = append(out, fmt.Sprintf("A's statements moved from backend pid %d, which holds its key, to %s: A has no stable session", lockPID, pidList(k.pids)))
		}
	}
	return append(out, f.notes...)
}

func contenders(who []int) string {
	if len(who) == 1 {
		return fmt.Sprintf("contender %d", who[0])
	}
	return "contenders " + intList(who)
}

func intList(ns []int) string {
	s := slices.Clone(ns)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// ---- cleanup ----

// cleanup drops the temp table and releases the probe key on every
// connection that may hold it, then checks on the server that neither is
// left on a backend our statements ran on. Through a transaction pooler a
// later statement may not reach the backend that an earlier one left them
// on: then it sweeps (see sweep) and reports what is still left.
func (p *run) cleanup(ctx context.Context) Check {
	live := p.liveConns()
	if len(live) == 0 {
		return Check{CheckCleanup, Pass, "every probe connection is closed; the server released the probe's session state"}
	}
	var problems []string
	if p.tableMaybe && p.a != nil && !p.a.IsClosed() {
		if _, err := p.a.Exec(ctx, "DROP TABLE IF EXISTS "+p.ident()); err != nil {
			problems = append(problems, "drop the temp table: "+p.explain(err))
		}
	}
	released := 0
	for _, conn := range p.mayHoldKey() {
		n, err := locks.Unlock(ctx, conn, p.opts.Key)
		released += n
		if err != nil {
			problems = append(problems, "release the probe key: "+p.explain(err))
		}
	}
	table, stranded, err := p.leftovers(ctx, live[0])
	for attempt := 0; err == nil && (table || len(stranded) > 0) && attempt < 3; attempt++ {
		p.sweep(ctx, table)
		table, stranded, err = p.leftovers(ctx, live[0])
	}
	switch {
	case err != nil:
		problems = append(problems, "check that nothing is left: "+p.explain(err))
	case table || len(stranded) > 0:
		if table {
			problems = append(problems, fmt.Sprintf("temp table %s is left on a pooled server connection that our statements do not reach; it goes when the pooler closes that connection", p.table))
		}
		if len(stranded) > 0 {
			problems = append(problems, fmt.Sprintf("probe key %d is still held by backend pid(s) %s, which a pooler's server connection keeps after our client left; it goes when the pooler closes that connection (server_lifetime), or end it: SELECT pg_terminate_backend(pid)", p.opts.Key, pidList(stranded)))
		}
	}
	if len(problems) > 0 {
		return Check{CheckCleanup, Warn, strings.Join(problems, "; ")}
	}
	what := "probe key released"
	if p.tableMaybe {
		what = "temp table dropped, probe key released"
	}
	return Check{CheckCleanup, Pass, fmt.Sprintf("%s (%d hold(s))", what, released)}
}

// mayHoldKey are the open connections whose statements took the key.
func (p *run) mayHoldKey() []*pgx.Conn {
	var out []*pgx.Conn
	if p.aLocked && p.a != nil && !p.a.IsClosed() {
		out = append(out, p.a)
	}
	for _, c := range p.contenders {
		if c.tookKey && c.conn != nil && !c.conn.IsClosed() {
			out = append(out, c.conn)
		}
	}
	return out
}

// leftovers reports whether the temp table still exists (pg_class lists
// every session's temp tables) and which backends our statements ran on
// still hold the probe key.
func (p *run) leftovers(ctx context.Context, conn *pgx.Conn) (table bool, stranded []uint32, err error) {
	if p.tableMaybe {
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 AND relpersistence = 't')", p.table).Scan(&table); err != nil {
			return false, nil, err
		}
	}
	_, holders, err := locks.KeyHolders(ctx, conn, p.opts.Key)
	if err != nil {
		return table, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pid := range holders {
		if p.pids[pid] {
			stranded = append(stranded, pid)
		}
	}
	return table, stranded, nil
}

// sweep runs the cleanup on as many connections at once as there were
// backends our statements ran on, plus one: each statement keeps its server
// connection for a moment, so a pooler must hand them distinct backends, and
// the most recently used ones, which are ours, come first.
func (p *run) sweep(ctx context.Context, table bool) {
	p.mu.Lock()
	n := len(p.pids) + 1
	p.mu.Unlock()
	conns := p.liveConns()
	var extra []*pgx.Conn
	for len(conns)+len(extra) < min(n, 8) {
		conn, err := dbconn.Connect(ctx, p.connConfig())
		if err != nil {
			break
		}
		extra = append(extra, conn)
	}
	defer func() {
		for _, conn := range extra {
			conn.Close(context.Background())
		}
	}()
	var wg sync.WaitGroup
	for _, conn := range append(conns, extra...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if table {
				_, _ = conn.Exec(ctx, "DO $$BEGIN PERFORM pg_sleep(0.05); DROP TABLE IF EXISTS "+p.ident()+"; END$$")
			}
			_ = locks.UnlockLingering(ctx, conn, p.opts.Key, 50*time.Millisecond)
		}()
	}
	wg.Wait()
}

func (p *run) liveConns() []*pgx.Conn {
	var out []*pgx.Conn
	if p.a != nil && !p.a.IsClosed() {
		out = append(out, p.a)
	}
	for _, c := range p.contenders {
		if c.conn != nil && !c.conn.IsClosed() {
			out = append(out, c.conn)
		}
	}
	return out
}

// ---- server settings and privileges ----

// serverSettings are the settings and privileges the probe judges.
type serverSettings struct {
	IdleSessionTimeout time.Duration
	KeepalivesIdle     time.Duration
	KeepalivesInterval time.Duration
	KeepalivesCount    int
	UserTimeout        time.Duration
	ClientPort         int
	Superuser          bool
	ReadAllStats       bool
	SignalBackend      bool
}

// readSettings reads serverSettings on conn in one statement.
func (p *run) readSettings(ctx context.Context, conn *pgx.Conn) (serverSettings, error) {
	ctx, cancel := p.step(ctx)
	defer cancel()
	var s serverSettings
	var idleMS, kaIdle, kaInterval, utMS int64
	err := conn.QueryRow(ctx, `SELECT
  coalesce((SELECT setting::bigint FROM pg_settings WHERE name = 'idle_session_timeout'), 0),
  coalesce((SELECT setting::bigint FROM pg_settings WHERE name = 'tcp_keepalives_idle'), 0),
  coalesce((SELECT setting::bigint FROM pg_settings WHERE name = 'tcp_keepalives_interval'), 0),
  coalesce((SELECT setting::int FROM pg_settings WHERE name = 'tcp_keepalives_count'), 0),
  coalesce((SELECT setting::bigint FROM pg_settings WHERE name = 'tcp_user_timeout'), 0),
  coalesce((SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()), 0),
  coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
  pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
  pg_has_role(current_user, 'pg_signal_backend', 'USAGE')`).Scan(
		&idleMS, &kaIdle, &kaInterval, &s.KeepalivesCount, &utMS, &s.ClientPort, &s.Superuser, &s.ReadAllStats, &s.SignalBackend)
	s.IdleSessionTimeout = time.Duration(idleMS) * time.Millisecond
	s.KeepalivesIdle = time.Duration(kaIdle) * time.Second
	s.KeepalivesInterval = time.Duration(kaInterval) * time.Second
	s.UserTimeout = time.Duration(utMS) * time.Millisecond
	return s, err
}

// proxyHints collects the signs that something sits between client and
// server. They warn and never refuse: a session-mode pooler is safe.
// clientPort is the local port of the connection the settings were read on.
func (p *run) proxyHints(info dbconn.ServerInfo, s serverSettings, settingsErr error, clientPort int) Check {
	var hints []string
	if proto := p.a.PgConn().PID(); proto != info.BackendPID {
		hints = append(hints, fmt.Sprintf("the protocol says backend pid %d but the server says %d: a proxy or pooler hands out its own pids (PgBouncer does)", proto, info.BackendPID))
	}
	cfg := p.opts.ConnConfig
	if !p.viaSocket() && info.Port != 0 && info.Port != int(cfg.Port) {
		hints = append(hints, fmt.Sprintf("you dialed port %d but the backend listens on %d: the connection is forwarded", cfg.Port, info.Port))
	}
	if settingsErr == nil && s.ClientPort != 0 && clientPort != 0 && clientPort != s.ClientPort {
		hints = append(hints, fmt.Sprintf("the server sees a client on port %d whose local socket is port %d: the connection is relayed (a pooler or proxy, or NAT)", s.ClientPort, clientPort))
	}
	hints = append(hints, EndpointHints(cfg.Host, cfg.Port)...)
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			hints = append(hints, EndpointHints(fb.Host, fb.Port)...)
		}
	}
	if len(hints) == 0 {
		return Check{CheckProxy, Pass, "no sign of a proxy: protocol pid = backend pid, ports match"}
	}
	return Check{CheckProxy, Warn, strings.Join(slices.Compact(hints), "; ") + " (safe only if it keeps one server session per client, like PgBouncer in session mode)"}
}

// EndpointHints names well-known pooler and proxy endpoints in a host and
// port: hints, not verdicts.
func EndpointHints(host string, port uint16) []string {
	var out []string
	h := strings.ToLower(host)
	switch port {
	case 6432:
		out = append(out, "port 6432 is PgBouncer's (and pgcat's) default port")
	case 6543:
		out = append(out, "port 6543 is Supabase's transaction-mode pooler")
	}
	switch {
	case strings.Contains(h, "pooler.supabase.com"):
		out = append(out, "pooler.supabase.com is Supabase's pooler (Supavisor)")
	case strings.Contains(h, "-pooler"):
		out = append(out, "a \"-pooler\" host name is Neon's pooled endpoint (PgBouncer in transaction mode)")
	case strings.Contains(h, ".proxy-"):
		out = append(out, "a \".proxy-\" host name is an RDS Proxy endpoint: it pins a session that takes an advisory lock, but closes idle clients after 1800 s by default")
	}
	return out
}

func checkPrimary(info dbconn.ServerInfo, cfg *pgx.ConnConfig) Check {
	if info.InRecovery {
		return Check{CheckPrimary, Fail, "the server is a standby (pg_is_in_recovery() = true): advisory locks there are local to it and fence nothing on the primary; point the DSN at the primary (multi-host DSNs: target_session_attrs=primary)"}
	}
	if len(cfg.Fallbacks) > 0 && !sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsPrimary) {
		return Check{CheckPrimary, Warn, "primary now, but this multi-host DSN lacks target_session_attrs=primary: after an HA failover it can land on a standby, where every replica wins its own lock (read-write tests the wrong thing)"}
	}
	return Check{CheckPrimary, Pass, fmt.Sprintf("primary (not in recovery), PostgreSQL %s", info.Version)}
}

func sameFunc(a, b pgconn.ValidateConnectFunc) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// checkIdleSessionTimeout judges idle_session_timeout against the lease's
// heartbeat: a server that ends idle sessions sooner than the next heartbeat
// takes every leader's lock away.
func checkIdleSessionTimeout(timeout, heartbeat time.Duration) Check {
	switch {
	case timeout == 0:
		return Check{CheckIdle, Pass, "idle_session_timeout = 0: idle lease sessions are not ended"}
	case timeout <= heartbeat:
		return Check{CheckIdle, Fail, fmt.Sprintf("idle_session_timeout = %s is not above the heartbeat interval %s: the server ends a leader's idle session between heartbeats; set it to 0 for the lease role (ALTER ROLE … SET idle_session_timeout = 0)", timeout, heartbeat)}
	default:
		return Check{CheckIdle, Warn, fmt.Sprintf("idle_session_timeout = %s: a lease session silent for longer is ended; leasectl's heartbeat (every %s) keeps it alive, but a worker that holds the lock without heartbeats loses it", timeout, heartbeat)}
	}
}

// checkDeadPeer judges the server's dead-peer detection against the lease
// (package timing): a leader notices its lost session within heartbeat +
// timeout, and the server must not hand its key to someone else before, on
// either path (nothing in flight at the cut, or a reply in flight).
func checkDeadPeer(s serverSettings, heartbeat, hbTimeout time.Duration, socket bool) Check {
	if socket {
		return Check{CheckDeadPeer, Pass, "unix socket: no network between client and server, a dead client is noticed at once"}
	}
	tcp := timing.TCP{Idle: s.KeepalivesIdle, Interval: s.KeepalivesInterval, Count: s.KeepalivesCount, UserTimeout: s.UserTimeout}
	earliest, latest := tcp.Earliest(), tcp.Latest()
	notice := timing.Lease{HeartbeatInterval: heartbeat, HeartbeatTimeout: hbTimeout}.Notice()
	switch {
	case earliest <= notice:
		how := "with nothing in flight"
		if tcp.InFlight() < tcp.Silent() {
			how = "when a reply is in flight at the cut (tcp_user_timeout)"
		}
		return Check{CheckDeadPeer, Warn, fmt.Sprintf("the server can drop a silent client after ≈%s %s (%s), before a lease with heartbeat %s and timeout %s notices: after a partition two workers could run at once; keep heartbeat + timeout below %s (leasectl's lease sets safe keepalives per session)", earliest, how, tcp, heartbeat, hbTimeout, earliest)}
	case latest > 10*time.Minute:
		return Check{CheckDeadPeer, Warn, fmt.Sprintf("a partitioned or dead leader can keep its lock for ≈%s (%s): set tcp_keepalives_idle=30, tcp_keepalives_interval=10, tcp_keepalives_count=3 and tcp_user_timeout=60000 for the lease role (≈60 s; leasectl's lease sets this per session)", humanDuration(latest), tcp)}
	default:
		return Check{CheckDeadPeer, Pass, fmt.Sprintf("a dead client's lock is released after ≈%s to %s (%s), after a lease notices the loss (≤ %s)", earliest, latest, tcp, notice)}
	}
}

func checkPrivileges(s serverSettings) Check {
	var who, failover string
	switch {
	case s.Superuser:
		return Check{CheckPrivileges, Info, "superuser: `leasectl who` sees every session and `leasectl failover` can end any backend"}
	case s.ReadAllStats:
		who = "`who` sees every session (pg_read_all_stats)"
	default:
		who = "`who` shows other roles' sessions as hidden (GRANT pg_read_all_stats TO this role to see them)"
	}
	if s.SignalBackend {
		failover = "`failover` can end other roles' non-superuser backends (pg_signal_backend)"
	} else {
		failover = "`failover` can end only this role's own backends (GRANT pg_signal_backend TO this role for others)"
	}
	return Check{CheckPrivileges, Info, who + "; " + failover}
}

func humanDuration(d time.Duration) string {
	h := int(d.Hours())
	m := int(d.Minutes()) % 60
	if h > 0 {
		return fmt.Sprintf("%dh%02dm", h, m)
	}
	return d.Round(time.Second).String()
}

func pidList(pids []uint32) string {
	if len(pids) == 0 {
		return "none"
	}
	s := slices.Clone(pids)
	slices.Sort(s)
	s = slices.Compact(s)
	parts := make([]string, len(s))
	for i, pid := range s {
		parts[i] = itoa(pid)
	}
	return strings.Join(parts, ", ")
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// The probe's statements. Each says which backend and server ran it.
const (
	// firstSQL is A's first statement: the server and session, the probe
	// key, how the server sees its client, and the settings and
	// privileges the checks judge.
	firstSQL = `SELECT ` + dbconn.ServerColumns + `,
       pg_try_advisory_lock($1),
       inet_client_addr() IS NULL,
       coalesce(inet_client_port(), 0),
       (SELECT json_object_agg(name, setting) FROM pg_settings
         WHERE name IN ('idle_session_timeout', 'statement_timeout', 'idle_in_transaction_session_timeout', 'tcp_keepalives_idle', 'tcp_keepalives_interval',
                        'tcp_keepalives_count', 'tcp_user_timeout')),
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
       pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
       pg_has_role(current_user, 'pg_signal_backend', 'USAGE')`
	// tryOnSQL is a contender's try for the key.
	tryOnSQL = `SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `, pg_try_advisory_lock($1)`
	// recheckSQL is A proving it still holds the key: it releases it (true
	// only if its backend held it) and takes it again, in one statement.
	recheckSQL = `SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `, released, pg_try_advisory_lock($1)
  FROM (SELECT pg_advisory_unlock($1) AS released OFFSET 0) s`
	// releaseWaitSQL waits, with a transaction-local lock_timeout of %d ms,
	// until the key %d is free, takes it and releases it again: one round
	// trip that returns the moment the holder's session lets go, or fails
	// with 55P03 (lock_not_available). A DO block takes no parameters:
	// both are integers formatted into it.
	releaseWaitSQL = `DO $$BEGIN
  PERFORM set_config('lock_timeout', '%d', true);
  PERFORM pg_advisory_lock(%d::bigint);
  PERFORM pg_advisory_unlock(%d::bigint);
END$$`
	// pgpoolNodesSQL is pgpool-II's own command; PostgreSQL rejects it.
	pgpoolNodesSQL = `SHOW pool_nodes`
	// pgpoolLBSQL is pgpool-II's view of one of its settings.
	pgpoolLBSQL = `PGPOOL SHOW load_balance_mode`
)

// ---- A's first statement ----

// firstResult is what A's first statement read.
type firstResult struct {
	info     dbconn.ServerInfo
	locked   bool
	settings serverSettings
}

// serverSettings are the settings and privileges the probe judges, as the
// server applies them to this session.
type serverSettings struct {
	Timeouts sessionTimeouts
	TCP      timing.TCP
	// ClientOnSocket: the server sees its client on a unix socket (no
	// inet_client_addr), whatever the DSN said.
	ClientOnSocket bool
	ClientPort     int
	Superuser      bool
	ReadAllStats   bool
	SignalBackend  bool
}

func (p *run) first(ctx context.Context) (firstResult, error) {
	ctx, cancel := p.step(ctx)
	defer cancel()
	var r firstResult
	var settings map[string]string
	dest := append(r.info.Dest(), &r.locked, &r.settings.ClientOnSocket, &r.settings.ClientPort, &settings,
		&r.settings.Superuser, &r.settings.ReadAllStats, &r.settings.SignalBackend)
	if err := p.a.QueryRow(ctx, firstSQL, p.opts.Key).Scan(dest...); err != nil {
		return r, err
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(settings[name], 10, 64)
		return n
	}
	s := &r.settings
	s.Timeouts = sessionTimeouts{
		Idle:              time.Duration(num("idle_session_timeout")) * time.Millisecond,
		Statement:         time.Duration(num("statement_timeout")) * time.Millisecond,
		IdleInTransaction: time.Duration(num("idle_in_transaction_session_timeout")) * time.Millisecond,
	}
	s.TCP = timing.TCP{
		Idle:        time.Duration(num("tcp_keepalives_idle")) * time.Second,
		Interval:    time.Duration(num("tcp_keepalives_interval")) * time.Second,
		Count:       int(num("tcp_keepalives_count")),
		UserTimeout: time.Duration(num("tcp_user_timeout")) * time.Millisecond,
	}
	p.observeA(observation{r.info.BackendPID, r.info.Identity()})
	p.aLocked = r.locked
	return r, nil
}

func (p *run) observeA(o observation) {
	p.sawPID(o.pid)
	p.mu.Lock()
	p.aObs = append(p.aObs, o)
	p.mu.Unlock()
}

// home is A's first observation: the backend and server every later
// statement is compared with.
func (p *run) home() observation { return p.aObs[0] }

// elsewhere says why o is not on A's server, or "".
func (p *run) elsewhere(o observation) string {
	h := p.home()
	switch {
	case !o.server.SameServer(h.server):
		return fmt.Sprintf("another server (%s) than A's first (%s)", o.server, h.server)
	case o.server.InRecovery:
		return "a standby (" + o.server.String() + ")"
	}
	return ""
}

// ---- session continuity ----

// continuity judges the sequence of backends and servers A's statements
// ran on: one backend, one server, a primary.
func (p *run) continuity() Check {
	p.mu.Lock()
	obs := slices.Clone(p.aObs)
	p.mu.Unlock()
	h := obs[0]
	var pids []uint32
	for _, o := range obs {
		pids = append(pids, o.pid)
		if why := p.elsewhere(o); why != "" {
			return fail(CheckContinuity, Safety, "one of connection A's statements ran on "+why+": a load balancer or pooler spreads statements over servers (pgpool-II's load balancing routes read-only ones to standbys), each of which holds its own locks")
		}
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(pids))); len(distinct) > 1 {
		return fail(CheckContinuity, Safety, fmt.Sprintf("connection A's statements ran on %d backends (%s): no stable session", len(distinct), pidList(pids)))
	}
	return pass(CheckContinuity, fmt.Sprintf("backend pid %d on one server for all %d statements of connection A (each its own round trip and transaction)", h.pid, len(obs)))
}

// ---- exclusion under contention ----

// exclusion has every contender try the key A holds, Rounds times, each try
// its own statement; after each round A proves that it still holds it. Any
// of these refuses the DSN: a contender takes the key, a contender's
// statement runs on A's backend or on another server, A's statements move,
// A's key is gone, or a contender cannot get a server connection.
func (p *run) exclusion(ctx context.Context, first firstResult) Check {
	key := p.opts.Key
	home := p.home()
	if !first.locked {
		sctx, cancel := p.step(ctx)
		_, holders, _ := locks.KeyHolders(sctx, p.a, key)
		cancel()
		return fail(CheckExclusion, Safety, fmt.Sprintf("probe key %d, picked at random, is already held by backend pid(s) %s: some other client uses the probe's key range, or shares this session's backend", key, pidList(holders)))
	}
	f := newFindings()
	for i, c := range p.contenders {
		if c.err != nil {
			f.note(fmt.Sprintf("contender %d could not connect: %v", i+1, c.err))
		}
	}
	contenderPIDs := map[uint32]bool{}
	live := 0
	for round := 1; round <= p.opts.Rounds && ctx.Err() == nil; round++ {
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
				var o observation
				var took bool
				err := c.conn.QueryRow(sctx, tryOnSQL, key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &took)
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
					p.sawPID(o.pid)
					contenderPIDs[o.pid] = true
					if took {
						c.tookKey = true
						f.add("took", i+1, o.pid, round)
					}
					if why := p.elsewhere(o); why != "" {
						f.addWhy("elsewhere", i+1, why)
					} else if o.pid == home.pid {
						f.add("shared", i+1, o.pid, round)
					}
				}
			}()
		}
		wg.Wait()

		sctx, cancel := p.step(ctx)
		var o observation
		var held, again bool
		err := p.a.QueryRow(sctx, recheckSQL, key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &held, &again)
		cancel()
		if err != nil {
			f.note("connection A could not prove its hold: " + p.explain(err))
			continue
		}
		p.observeA(o)
		switch {
		case o.pid != home.pid:
			f.add("moved", 0, o.pid, round)
		case !held:
			f.add("released", 0, 0, round)
		}
	}
	if f.any("shared", "took", "moved", "elsewhere") {
		p.multiplexed = true
	}
	if problems := f.render(home.pid, p.opts.Timeout); len(problems) > 0 {
		cause := Safety
		if !f.any("took", "shared", "moved", "released", "elsewhere") {
			cause = Liveness // only starved contenders, or notes
		}
		return fail(CheckExclusion, cause, strings.Join(problems, "; "))
	}
	if live == 0 {
		return fail(CheckExclusion, Liveness, "no contender connection: exclusion is unproven")
	}
	others := make([]uint32, 0, len(contenderPIDs))
	for pid := range contenderPIDs {
		others = append(others, pid)
	}
	return pass(CheckExclusion, fmt.Sprintf("while A (backend pid %d) held key %d, %d contender connection(s) on other backends of the same server (%s) were refused it in %d rounds, and A still held it", home.pid, key, live, pidList(others), p.opts.Rounds))
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
	whys   []string
}

func newFindings() *findings { return &findings{kinds: map[string]*finding{}} }

func (f *findings) get(kind string) *finding {
	k := f.kinds[kind]
	if k == nil {
		k = &finding{}
		f.kinds[kind] = k
		f.order = append(f.order, kind)
	}
	return k
}

func (f *findings) add(kind string, who int, pid uint32, round int) {
	k := f.get(kind)
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

func (f *findings) addWhy(kind string, who int, why string) {
	k := f.get(kind)
	if !slices.Contains(k.who, who) {
		k.who = append(k.who, who)
	}
	if !slices.Contains(k.whys, why) {
		k.whys = append(k.whys, why)
	}
}

func (f *findings) any(kinds ...string) bool {
	for _, k := range kinds {
		if f.kinds[k] != nil {
			return true
		}
	}
	return false
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
		case "elsewhere":
			out = append(out, fmt.Sprintf("%s reached %s: a load balancer (HAProxy round-robin, pgpool-II load balancing) spreads connections over servers, each of which holds its own locks, so two clients would both lead", contenders(k.who), strings.Join(k.whys, "; ")))
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

// ---- idle survival ----

// idleSurvival keeps A idle for Options.Idle while it holds the key, then
// has it prove its hold again: a proxy that cuts idle connections ends the
// session, and a leader, idle between heartbeats, would lose its lease.
func (p *run) idleSurvival(ctx context.Context) Check {
	idle := p.opts.Idle
	t := time.NewTimer(idle)
	select {
	case <-ctx.Done():
		t.Stop()
		return info(CheckIdleCut, "interrupted")
	case <-t.C:
	}
	sctx, cancel := p.step(ctx)
	defer cancel()
	var o observation
	var held, again bool
	err := p.a.QueryRow(sctx, recheckSQL, p.opts.Key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &held, &again)
	switch {
	case err != nil:
		return fail(CheckIdleCut, Liveness, fmt.Sprintf("connection A's session did not survive %s idle (%s): a proxy or load balancer between client and server closes idle connections (HAProxy timeout client/server, a cloud load balancer's idle timeout); a leader is idle between heartbeats and would lose its lease every time; raise that timeout above the heartbeat interval", idle, p.explain(err)))
	case o.pid != p.home().pid || p.elsewhere(o) != "":
		p.multiplexed = true
		return fail(CheckIdleCut, Safety, fmt.Sprintf("after %s idle, connection A's statement ran on backend pid %d, not its own pid %d: its session was handed elsewhere", idle, o.pid, p.home().pid))
	case !held:
		return fail(CheckIdleCut, Safety, fmt.Sprintf("after %s idle, A's backend pid %d no longer held the key", idle, o.pid))
	}
	p.observeA(o)
	return pass(CheckIdleCut, fmt.Sprintf("connection A's session, holding the key, survived %s idle", idle))
}

// ---- the lock dies with its connection ----

// release closes A, which holds the key, and checks from another
// connection that the key was released with it: a pooler that hands its
// server connections on without resetting them (PgBouncer in session mode
// with an empty server_reset_query) keeps a dead leader's lock for the next
// client.
func (p *run) release(ctx context.Context) Check {
	if p.borrowedA {
		return p.releaseOnContender(ctx)
	}
	checker, own := p.liveContender(), false
	if checker == nil {
		c, err := dbconn.Connect(ctx, p.connConfig())
		if err != nil {
			return fail(CheckRelease, Liveness, "no connection to check that the key is released after A closes: "+p.explain(err))
		}
		checker, own = c, true
	}
	if own {
		defer checker.Close(context.Background())
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = p.a.Close(cctx)
	cancel()
	p.aClosed = true
	return p.releaseSeen(ctx, checker, time.Now(), "connection A")
}

// releaseOnContender shows that the key dies with its connection when A
// must stay open (Options.Conn): A releases the key, a contender takes it
// and closes, and A waits for it.
func (p *run) releaseOnContender(ctx context.Context) Check {
	var holder *contender
	for _, c := range p.contenders {
		if c.conn != nil && !c.conn.IsClosed() {
			holder = c
			break
		}
	}
	if holder == nil {
		return fail(CheckRelease, Liveness, "no contender connection left to check that the key is released when its connection closes")
	}
	sctx, cancel := p.step(ctx)
	defer cancel()
	if _, err := locks.Unlock(sctx, p.a, p.opts.Key); err != nil {
		return fail(CheckRelease, Liveness, "connection A could not release the key: "+p.explain(err))
	}
	p.aLocked = false
	var o observation
	var took bool
	if err := holder.conn.QueryRow(sctx, tryOnSQL, p.opts.Key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &took); err != nil {
		return fail(CheckRelease, Liveness, "a contender could not take the key over from A: "+p.explain(err))
	}
	p.sawPID(o.pid)
	holder.tookKey = took
	if !took {
		return fail(CheckRelease, Safety, fmt.Sprintf("after A released the key, a contender (backend pid %d) could not take it: something else holds it", o.pid))
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	_ = holder.conn.Close(cctx)
	ccancel()
	return p.releaseSeen(ctx, p.a, time.Now(), "the contender's connection")
}

// releaseSeen waits on checker until the key is free, after the
// connection that held it (what) closed at closed.
func (p *run) releaseSeen(ctx context.Context, checker *pgx.Conn, closed time.Time, what string) Check {
	// Through a session pooler the reset runs after the client left, and a
	// backend takes a moment to exit: wait in the server's lock queue for
	// the key, up to a limit.
	limit := min(p.opts.Timeout, 2*time.Second)
	sctx, cancel := context.WithTimeout(ctx, limit+p.opts.Timeout)
	defer cancel()
	_, err := checker.Exec(sctx, fmt.Sprintf(releaseWaitSQL, limit.Milliseconds(), p.opts.Key, p.opts.Key))
	waited := time.Since(closed)
	switch {
	case err == nil:
		p.aLocked = false
		return pass(CheckRelease, fmt.Sprintf("the key was free %s after %s closed: the lock died with its connection", roundDuration(waited), what))
	case sqlState(err) == "55P03":
		p.multiplexed = true // the key sits on a pooled server connection: sweep it
		return fail(CheckRelease, Safety, fmt.Sprintf("the key stayed held for %s after %s, which held it, closed: its server session outlived it, so a dead leader's lock would pass to whichever client gets that server connection next; a pooler hands connections on without resetting them (PgBouncer: set server_reset_query = DISCARD ALL, or server_reset_query_always)", roundDuration(waited), what))
	case ctx.Err() != nil:
		return info(CheckRelease, "interrupted")
	default:
		return fail(CheckRelease, Liveness, fmt.Sprintf("could not check that the key was released after %s closed: %s", what, p.explain(err)))
	}
}

func (p *run) liveContender() *pgx.Conn {
	for _, c := range p.contenders {
		if c.conn != nil && !c.conn.IsClosed() {
			return c.conn
		}
	}
	return nil
}

// ---- cleanup ----

// cleanup releases the probe key on every open connection that may hold it.
// When connections turned out to share backends (a transaction pooler), a
// later statement may not reach the backend that holds it: then it sweeps
// (see sweep) and reports what is still left, reading pg_locks.
func (p *run) cleanup(ctx context.Context) Check {
	released := 0
	var problems []string
	for _, conn := range p.mayHoldKey() {
		n, err := locks.Unlock(ctx, conn, p.opts.Key)
		released += n
		if err != nil {
			problems = append(problems, "release the probe key: "+p.explain(err))
		}
	}
	if p.multiplexed {
		if conn := p.anyLive(); conn != nil {
			stranded, err := p.leftovers(ctx, conn)
			for attempt := 0; err == nil && len(stranded) > 0 && attempt < 3; attempt++ {
				p.sweep(ctx)
				stranded, err = p.leftovers(ctx, conn)
			}
			switch {
			case err != nil:
				problems = append(problems, "check that nothing is left: "+p.explain(err))
			case len(stranded) > 0:
				problems = append(problems, fmt.Sprintf("probe key %d is still held by backend pid(s) %s, which a pooler's server connection keeps after our client left; it goes when the pooler closes that connection (server_lifetime), or end it: SELECT pg_terminate_backend(pid). No later probe uses this key", p.opts.Key, pidList(stranded)))
			}
		}
	}
	if len(problems) > 0 {
		return warn(CheckCleanup, strings.Join(problems, "; "))
	}
	if p.aClosed && !p.multiplexed {
		return pass(CheckCleanup, "probe key released with connection A")
	}
	return pass(CheckCleanup, fmt.Sprintf("probe key released (%d hold(s))", released))
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

func (p *run) anyLive() *pgx.Conn {
	if p.a != nil && !p.a.IsClosed() {
		return p.a
	}
	return p.liveContender()
}

// leftovers reports which backends our statements ran on still hold the
// probe key (pg_locks: only when connections were multiplexed).
func (p *run) leftovers(ctx context.Context, conn *pgx.Conn) (stranded []uint32, err error) {
	_, holders, err := locks.KeyHolders(ctx, conn, p.opts.Key)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pid := range holders {
		if p.pids[pid] {
			stranded = append(stranded, pid)
		}
	}
	return stranded, nil
}

// sweep runs the release on as many connections at once as there were
// backends our statements ran on, plus one: each statement keeps its server
// connection for a moment, so a pooler must hand them distinct backends, and
// the most recently used ones, which are ours, come first.
func (p *run) sweep(ctx context.Context) {
	p.mu.Lock()
	n := len(p.pids) + 1
	p.mu.Unlock()
	var conns []*pgx.Conn
	if p.a != nil && !p.a.IsClosed() {
		conns = append(conns, p.a)
	}
	for _, c := range p.contenders {
		if c.conn != nil && !c.conn.IsClosed() {
			conns = append(conns, c.conn)
		}
	}
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
			_ = locks.UnlockLingering(ctx, conn, p.opts.Key, 50*time.Millisecond)
		}()
	}
	wg.Wait()
}

// ---- proxies and poolers ----

// proxyResult is the proxy check, and pgpool-II's when it is in the path.
type proxyResult struct {
	check  Check
	pgpool *Check
}

// proxyHints collects the signs that something sits between client and
// server. They warn and never refuse: a session-mode pooler is safe. When
// the protocol's pid is not the server's (a proxy), it asks whether the
// proxy is pgpool-II, whose load balancing refuses the DSN.
func (p *run) proxyHints(first firstResult) proxyResult {
	var res proxyResult
	var hints []string
	info, s := first.info, first.settings
	proxied := p.a.PgConn().PID() != info.BackendPID
	if proxied {
		hints = append(hints, fmt.Sprintf("the protocol says backend pid %d but the server says %d: a proxy or pooler hands out its own pids (PgBouncer and pgpool-II do)", p.a.PgConn().PID(), info.BackendPID))
		res.pgpool = p.pgpool()
	}
	if dialed := p.connectedPort(); dialed != 0 && info.Port != 0 && info.Port != dialed {
		hints = append(hints, fmt.Sprintf("you reached port %d but the backend listens on %d: the connection is forwarded", dialed, info.Port))
	}
	if local := localPort(p.a); !s.ClientOnSocket && s.ClientPort != 0 && local != 0 && local != s.ClientPort {
		hints = append(hints, fmt.Sprintf("the server sees a client on port %d whose local socket is port %d: the connection is relayed (a pooler or proxy, or NAT)", s.ClientPort, local))
	}
	if p.connectedPort() == 0 && !s.ClientOnSocket {
		hints = append(hints, "you connected over a unix socket, but the server sees a TCP client: a relay (a cloud SQL proxy, socat, a pooler) carries the connection over a network")
	}
	cfg := p.opts.ConnConfig
	hints = append(hints, EndpointHints(cfg.Host, cfg.Port)...)
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			hints = append(hints, EndpointHints(fb.Host, fb.Port)...)
		}
	}
	if len(hints) == 0 {
		res.check = pass(CheckProxy, "no sign of a proxy: protocol pid = backend pid, ports match")
		return res
	}
	res.check = warn(CheckProxy, strings.Join(slices.Compact(hints), "; ")+" (safe only if it keeps one server session per client, like PgBouncer in session mode)")
	return res
}

// pgpool asks the proxy whether it is pgpool-II (SHOW pool_nodes, which
// PostgreSQL rejects) and judges its load balancing: pgpool-II routes each
// statement by the volatility of its functions and its read_only and write
// function lists, so with a standby in the balance a lock function can run
// on the standby, where it fences nothing. Nil when it is not pgpool-II.
func (p *run) pgpool() *Check {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.Timeout)
	defer cancel()
	rows, err := p.a.Query(ctx, pgpoolNodesSQL, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil || len(nodes) == 0 {
		return nil
	}
	var mode string
	if err := p.a.QueryRow(ctx, pgpoolLBSQL, pgx.QueryExecModeSimpleProtocol).Scan(&mode); err == nil && mode == "off" {
		c := info(CheckPrimary, fmt.Sprintf("pgpool-II with %d node(s) and load_balance_mode = off: every statement goes to the primary", len(nodes)))
		c.Name = "pgpool"
		return &c
	}
	var balanced []string
	for _, n := range nodes {
		role, status := fmt.Sprint(n["role"]), fmt.Sprint(n["status"])
		weight, _ := strconv.ParseFloat(fmt.Sprint(n["lb_weight"]), 64)
		if role != "primary" && status != "down" && weight > 0 {
			balanced = append(balanced, fmt.Sprintf("%s:%v (%s, weight %v)", n["hostname"], n["port"], role, weight))
		}
	}
	if len(balanced) == 0 {
		c := info(CheckPrimary, fmt.Sprintf("pgpool-II with %d node(s), none but the primary in its load balancing", len(nodes)))
		c.Name = "pgpool"
		return &c
	}
	c := fail("pgpool", Safety, fmt.Sprintf("pgpool-II balances load to %s: it routes each statement by the volatility of its functions and its write_function_list / read_only_function_list, so a lock or a heartbeat can run on a standby, where locks fence nothing, and two clients can hold one key on two servers; give leases a DSN with load_balance_mode = off (or straight to the primary)", strings.Join(balanced, ", ")))
	return &c
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

// ---- settings ----

// distinctHosts counts the different host:port pairs a DSN may connect to;
// pgx adds a fallback per TLS mode for each host, which is not another
// host.
func distinctHosts(cfg *pgx.ConnConfig) int {
	seen := map[string]bool{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))): true}
	for _, fb := range cfg.Fallbacks {
		seen[net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port)))] = true
	}
	return len(seen)
}

func checkPrimary(info dbconn.ServerInfo, cfg *pgx.ConnConfig, _ int) Check {
	if info.InRecovery {
		return fail(CheckPrimary, Safety, "the server is a standby (pg_is_in_recovery() = true): advisory locks there are local to it and fence nothing on the primary; point the DSN at the primary (multi-host DSNs: target_session_attrs=primary)")
	}
	if distinctHosts(cfg) > 1 && !sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsPrimary) {
		return warn(CheckPrimary, "primary now, but this multi-host DSN lacks target_session_attrs=primary: after an HA failover it can land on a standby, where every replica wins its own lock (read-write tests the wrong thing)")
	}
	return pass(CheckPrimary, fmt.Sprintf("primary (not in recovery), PostgreSQL %s, system %d", info.Version, info.SystemID))
}

func sameFunc(a, b pgconn.ValidateConnectFunc) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// sessionTimeouts are the timeouts a role or database setting may give
// every session, which would break a lease session that kept them: the
// server ends an idle leader's session (idle_session_timeout), cancels a
// stand-by's wait in the lock queue (statement_timeout), or ends a session
// left in a transaction (idle_in_transaction_session_timeout).
type sessionTimeouts struct {
	Idle, Statement, IdleInTransaction time.Duration
}

// checkIdleSessionTimeout says which of the session timeouts are set for
// this role and database, and what they would break. Any client may set
// them for its own session, and leasectl's lease sets all three to 0 on its
// sessions, so a setting is a warning for whoever else holds a lease over
// the DSN, never a refusal.
func checkIdleSessionTimeout(t sessionTimeouts, heartbeat time.Duration) Check {
	var set []string
	if t.Idle > 0 {
		effect := "a lease session silent for longer is ended"
		if t.Idle <= heartbeat {
			effect = fmt.Sprintf("it would end a leader's idle session between heartbeats (every %s)", heartbeat)
		}
		set = append(set, fmt.Sprintf("idle_session_timeout = %s: %s", t.Idle, effect))
	}
	if t.Statement > 0 && t.Statement <= heartbeat {
		set = append(set, fmt.Sprintf("statement_timeout = %s: it would cancel a stand-by's wait in the lock queue", t.Statement))
	}
	if t.IdleInTransaction > 0 {
		set = append(set, fmt.Sprintf("idle_in_transaction_session_timeout = %s: it ends a session left in a transaction", t.IdleInTransaction))
	}
	if len(set) == 0 {
		return pass(CheckIdle, "idle_session_timeout = 0: idle lease sessions are not ended")
	}
	return warn(CheckIdle, strings.Join(set, "; ")+" (a role or database setting, e.g. ALTER ROLE … SET). leasectl's lease sets these to 0 on its own sessions; any other lease over this DSN must do the same (SET idle_session_timeout = 0, …), or lose its lock")
}

// checkDeadPeer judges the server's dead-peer detection for this session,
// as the server sees it, against the lease (package timing): a leader
// notices its lost session within heartbeat + timeout, and the server must
// not hand its key to someone else before, on either path (nothing in
// flight at the cut, or a reply in flight). Only a client that the server
// itself sees on a unix socket has no network in between: a unix-socket
// DSN may reach a relay that carries the connection over TCP.
func checkDeadPeer(s serverSettings, heartbeat, hbTimeout time.Duration) Check {
	if s.ClientOnSocket {
		return pass(CheckDeadPeer, "the server sees its client on a unix socket: no network between them, a dead client is noticed at once")
	}
	tcp := s.TCP
	earliest, latest := tcp.Earliest(), tcp.Latest()
	notice := timing.Lease{HeartbeatInterval: heartbeat, HeartbeatTimeout: hbTimeout}.Notice()
	switch {
	case earliest <= notice:
		how := "with nothing in flight"
		if tcp.InFlight() < tcp.Silent() {
			how = "when a reply is in flight at the cut (tcp_user_timeout)"
		}
		return warn(CheckDeadPeer, fmt.Sprintf("the server can drop a silent client after ≈%s %s (%s), before a lease with heartbeat %s and timeout %s notices: after a partition two workers could run at once; keep heartbeat + timeout below %s (leasectl's lease sets safe keepalives per session)", earliest, how, tcp, heartbeat, hbTimeout, earliest))
	case latest > 10*time.Minute:
		return warn(CheckDeadPeer, fmt.Sprintf("the server sees a TCP client, and a partitioned or dead leader can keep its lock for ≈%s (%s): set tcp_keepalives_idle=30, tcp_keepalives_interval=10, tcp_keepalives_count=3 and tcp_user_timeout=60000 for the lease role (≈60 s; leasectl's lease sets this per session)", humanDuration(latest), tcp))
	default:
		return pass(CheckDeadPeer, fmt.Sprintf("a dead client's lock is released after ≈%s to %s (%s), after a lease notices the loss (≤ %s)", earliest, latest, tcp, notice))
	}
}

func checkPrivileges(s serverSettings) Check {
	var who, failover string
	switch {
	case s.Superuser:
		return info(CheckPrivileges, "superuser: `leasectl who` sees every session and `leasectl failover` can end any backend")
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
	return info(CheckPrivileges, who+"; "+failover)
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

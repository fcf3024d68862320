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
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/dur"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/locks"
)

// The probe's statements. Each says which backend and server ran it.
const (
	// firstSQL is A's first statement: the server and session, the probe
	// key, taken twice (see recheckSQL), how the server sees its client,
	// and the settings and privileges the checks judge.
	firstSQL = `SELECT ` + dbconn.ServerColumns + `,
       pg_try_advisory_lock($1), pg_try_advisory_lock($1),
       inet_client_addr() IS NULL,
       coalesce(inet_client_port(), 0),
       current_setting('idle_session_timeout'), current_setting('statement_timeout'),
       current_setting('idle_in_transaction_session_timeout'), current_setting('tcp_keepalives_idle'),
       current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'),
       current_setting('tcp_user_timeout'),
       current_setting('is_superuser') = 'on',
       current_setting('is_superuser') = 'on' OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
       current_setting('is_superuser') = 'on' OR pg_has_role(current_user, 'pg_signal_backend', 'USAGE')`
	// tryOnSQL is a contender's try for the key.
	tryOnSQL = `SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `, pg_try_advisory_lock($1)`
	// recheckSQL is A proving it still holds the key: it releases it once
	// (true only if its backend held it) and takes it again, in one
	// statement. A holds the key twice, so it never lets go of it: the
	// contenders may try at the same moment.
	recheckSQL = `SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `, released, pg_try_advisory_lock($1)
  FROM (SELECT pg_advisory_unlock($1) AS released OFFSET 0) s`
	// releaseWaitSQL waits until the key %[3]d is free, takes it and
	// releases it again, and says which backend and server ran it: one
	// round trip that returns the moment the holder's session lets go, or
	// fails with 55P03 (lock_not_available) after %[2]d ms. It is the one
	// statement that waits, so it is also the one whose transaction sets
	// the probe's own statement_timeout (%[1]d ms), which a DSN's options
	// or a role setting could make too short for the wait: three
	// statements in one transaction, sent as one string, with the key and
	// the timeouts formatted into it as integers (no parameters).
	releaseWaitSQL = `SET LOCAL statement_timeout = %[1]d; SET LOCAL lock_timeout = %[2]d;
SELECT pg_backend_pid(), ` + dbconn.IdentityColumns + `, pg_advisory_lock(%[3]d::bigint) IS NULL, pg_advisory_unlock(%[3]d::bigint)`
	// pgpoolNodesSQL is pgpool-II's own command; PostgreSQL rejects it.
	pgpoolNodesSQL = `SHOW pool_nodes`
	// pgpoolLBSQL and pgpoolModeSQL are pgpool-II's view of two of its
	// settings.
	pgpoolLBSQL   = `PGPOOL SHOW load_balance_mode`
	pgpoolModeSQL = `PGPOOL SHOW backend_clustering_mode`
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
	sctx, cancel := p.step(ctx)
	defer cancel()
	var r firstResult
	var set [7]string
	var again bool
	dest := append(r.info.Dest(), &r.locked, &again, &r.settings.ClientOnSocket, &r.settings.ClientPort,
		&set[0], &set[1], &set[2], &set[3], &set[4], &set[5], &set[6],
		&r.settings.Superuser, &r.settings.ReadAllStats, &r.settings.SignalBackend)
	if err := p.a.QueryRow(sctx, firstSQL, p.opts.Key).Scan(dest...); err != nil {
		// Interrupted, the statement may have run and its result been
		// lost. A timeout is a pool's wait or a dead server, where it
		// did not run (checking would wait as long again).
		if ctx.Err() != nil {
			p.mayHaveTaken()
		}
		return r, err
	}
	r.locked = r.locked && again
	s := &r.settings
	s.Timeouts = sessionTimeouts{
		Idle:              gucDuration(set[0], time.Millisecond),
		Statement:         gucDuration(set[1], time.Millisecond),
		IdleInTransaction: gucDuration(set[2], time.Millisecond),
	}
	count, _ := strconv.Atoi(set[5])
	s.TCP = timing.TCP{
		Idle:        gucDuration(set[3], time.Second),
		Interval:    gucDuration(set[4], time.Second),
		Count:       count,
		UserTimeout: gucDuration(set[6], time.Millisecond),
	}
	p.observeA(observation{r.info.BackendPID, r.info.Identity()})
	p.aLocked = r.locked
	return r, nil
}

// gucDuration reads a time setting as current_setting shows it: an integer
// in the setting's base unit, or with the largest unit that divides it
// ("500ms", "30s", "2min", "2h", "1d"). What it cannot read is 0.
func gucDuration(v string, base time.Duration) time.Duration {
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"min", time.Minute}, {"s", time.Second}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	unit := base
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, unit = strings.TrimSuffix(v, u.suffix), u.d
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(n) * unit
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

// elsewhere says why o is not on A's server, or "". A standby that A's
// first statement ran on is the primary check's finding, not this one's.
func (p *run) elsewhere(o observation) string {
	h := p.home()
	switch {
	case !o.server.SameServer(h.server):
		return fmt.Sprintf("another server (%s) than A's first (%s)", o.server, h.server)
	case o.server.InRecovery && !h.server.InRecovery:
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
	server := "one server"
	if h.server.InRecovery {
		server = "one server, a standby,"
	}
	return pass(CheckContinuity, fmt.Sprintf("backend pid %d on %s for all %d statements of connection A (each its own round trip and transaction)", h.pid, server, len(obs)))
}

// ---- exclusion under contention ----

// exclusion has every contender try the key A holds, Rounds times, each try
// its own statement; after each round A proves that it still holds it. Any
// of these refuses the DSN: a contender takes the key, a contender's
// statement runs on A's backend or on another server, A's statements move,
// A's key is gone, or a contender cannot get a server connection.
//
// Behind a proxy, the contenders opened at the same time as A are not
// enough: a balancer may well put connections that arrive together on one
// server (leastconn does, when its servers are equally loaded). So when the
// proxy check saw a proxy, Contenders+1 more contenders are opened one
// after another once A holds the key, each while the earlier ones stay
// open, and each tries the key once (see sequential).
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
	e := &tries{p: p, f: f, home: home, pids: map[uint32]bool{}}
	live := 0
	// In each round every contender tries the key, and A proves that it
	// still holds it. A holds it twice and never lets go of it, so on a
	// direct connection the two happen at the same moment; behind a proxy
	// A waits for the tries, as a quiet transaction pooler then hands the
	// contender A's own backend, and keeps every hold on it.
	for round := 1; round <= p.opts.Rounds && ctx.Err() == nil; round++ {
		var wg sync.WaitGroup
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
				e.try(ctx, i+1, c, round)
			}()
		}
		if p.proxied {
			wg.Wait()
		}
		e.recheck(ctx, round)
		wg.Wait()
	}
	after := 0
	if p.proxied && f.empty() && ctx.Err() == nil {
		after = p.sequential(ctx, e, p.opts.Rounds+1)
		live += after
		if after > 0 && f.empty() {
			e.recheck(ctx, p.opts.Rounds+1)
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
	others := make([]uint32, 0, len(e.pids))
	for pid := range e.pids {
		others = append(others, pid)
	}
	detail := fmt.Sprintf("while A (backend pid %d) held key %d, %d contender connection(s) on other backends of the same server (%s) were refused it in %d rounds, and A still held it", home.pid, key, live, pidList(others), p.opts.Rounds)
	if after > 0 {
		detail = fmt.Sprintf("while A (backend pid %d) held key %d, %d contender connection(s) on other backends of the same server (%s) were refused it, and A still held it (%d opened with A, in %d rounds; as a proxy is in the path, %d more opened one after another once A held the key: a balancer over two or more servers that gives each new connection an even chance of another one (round robin, also per worker; random; least connections) sends all %d to A's server with a chance of at most 1 in %d)", home.pid, key, live, pidList(others), live-after, p.opts.Rounds, after, after, 1<<after)
	}
	return pass(CheckExclusion, detail)
}

// tries records the contenders' tries for the key: what each found, and
// the backends they ran on. Concurrent tries share it.
type tries struct {
	p    *run
	f    *findings
	home observation
	mu   sync.Mutex
	pids map[uint32]bool
}

// try has contender n (c) try the key once, in round.
func (e *tries) try(ctx context.Context, n int, c *contender, round int) {
	p := e.p
	sctx, cancel := p.step(ctx)
	var o observation
	var took bool
	err := c.conn.QueryRow(sctx, tryOnSQL, p.opts.Key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &took)
	timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && timedOut:
		e.f.add("starved", n, 0, round)
		c.conn.Close(context.Background())
	case err != nil:
		p.mayHaveTaken()
		e.f.note(fmt.Sprintf("contender %d: %s", n, p.explain(err)))
	default:
		p.sawPID(o.pid)
		e.pids[o.pid] = true
		if took {
			c.tookKey = true
			e.f.add("took", n, o.pid, round)
		}
		if why := p.elsewhere(o); why != "" {
			e.f.addWhy("elsewhere", n, why)
		} else if o.pid == e.home.pid {
			e.f.add("shared", n, o.pid, round)
		}
	}
}

// recheck has A prove that it still holds the key, in round.
func (e *tries) recheck(ctx context.Context, round int) {
	p := e.p
	sctx, cancel := p.step(ctx)
	var o observation
	var held, again bool
	err := p.a.QueryRow(sctx, recheckSQL, p.opts.Key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &held, &again)
	cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.f.note("connection A could not prove its hold: " + p.explain(err))
		return
	}
	p.observeA(o)
	switch {
	case o.pid != e.home.pid:
		e.f.add("moved", 0, o.pid, round)
	case !held:
		e.f.add("released", 0, 0, round)
	}
}

// SpreadConnections is how many contenders the probe opens one after
// another behind a proxy. A balancer over two or more servers that gives
// each new connection at least an even chance of a server other than A's
// (round robin, shared or per worker process amid other clients'
// connections; random; least connections with the loads within the
// connections the probe holds open) sends all of them to A's server with a
// chance of at most 2^-10, below 1 in 1,000.
const SpreadConnections = 10

// sequential opens SpreadConnections more contenders one after another,
// each once the one before it has connected and tried the key, and records
// each one's try (in round). A balancer places each new connection by what
// it already carries: a contender opened at the same moment as A may land
// beside it, and one opened after it has been placed lands where the
// balancer puts the next client (round robin: the next server; random: any;
// leastconn: the one with fewer connections, which with A and the earlier
// contenders open is another one as soon as the servers' loads differ by
// less than the number of contenders open). The first Contenders+1 stay
// open; each later one closes once its try found nothing, so that a session
// pooler's pool holds no more of the probe's server connections than
// before. It stops at the first finding. It returns how many contenders it
// opened.
func (p *run) sequential(ctx context.Context, e *tries, round int) int {
	opened := 0
	keep := p.opts.Contenders + 1
	for range SpreadConnections {
		if ctx.Err() != nil || !e.f.empty() {
			break
		}
		cctx, cancel := p.step(ctx)
		conn, err := dbconn.Connect(cctx, p.connConfig())
		cancel()
		n := len(p.contenders) + 1
		if err != nil {
			if fatalConnectError(err) {
				p.fatal = p.connectFailed(fmt.Sprintf("the probe's connection %d", n+1), err)
			} else if ctx.Err() == nil {
				e.f.note(fmt.Sprintf("contender %d, opened after A, could not connect: %v", n, err))
			}
			break
		}
		c := &contender{conn: conn, after: true}
		p.contenders = append(p.contenders, c)
		opened++
		e.try(ctx, n, c, round)
		if opened > keep && e.f.empty() && !c.tookKey {
			// Close sends Terminate and does not wait for an answer.
			cctx, cancel := p.step(ctx)
			conn.Close(cctx)
			cancel()
		}
	}
	return opened
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

func (f *findings) empty() bool { return len(f.order) == 0 && len(f.notes) == 0 }

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
			out = append(out, fmt.Sprintf("%s reached %s: a load balancer (HAProxy, pgpool-II load balancing, a host name for several servers) spreads connections over servers, each of which holds its own locks, so two clients would both lead", contenders(k.who), strings.Join(k.whys, "; ")))
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
	if p.opts.OnIdle != nil {
		p.opts.OnIdle(time.Now().Add(idle))
	}
	select {
	case <-ctx.Done():
		t.Stop()
		return info(CheckIdleSurvival, "interrupted")
	case <-t.C:
	}
	sctx, cancel := p.step(ctx)
	defer cancel()
	var o observation
	var held, again bool
	err := p.a.QueryRow(sctx, recheckSQL, p.opts.Key).Scan(&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery, &held, &again)
	switch {
	case err != nil:
		return fail(CheckIdleSurvival, Liveness, fmt.Sprintf("connection A's session did not survive %s idle (%s): a proxy or load balancer between client and server closes idle connections (HAProxy timeout client/server, a cloud load balancer's idle timeout); a leader is idle between heartbeats and would lose its lease every time; raise that timeout above the heartbeat interval", idle, p.explain(err)))
	case o.pid != p.home().pid || p.elsewhere(o) != "":
		p.multiplexed = true
		return fail(CheckIdleSurvival, Safety, fmt.Sprintf("after %s idle, connection A's statement ran on backend pid %d, not its own pid %d: its session was handed elsewhere", idle, o.pid, p.home().pid))
	case !held:
		return fail(CheckIdleSurvival, Safety, fmt.Sprintf("after %s idle, A's backend pid %d no longer held the key", idle, o.pid))
	}
	p.observeA(o)
	return pass(CheckIdleSurvival, fmt.Sprintf("connection A's session, holding the key, survived %s idle", idle))
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
		p.mayHaveTaken()
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
// connection that held it (what) closed at closed. The checker must be on
// A's server: on another one the key is free whatever happened to A's.
func (p *run) releaseSeen(ctx context.Context, checker *pgx.Conn, closed time.Time, what string) Check {
	// Through a session pooler the reset runs after the client left, and a
	// backend takes a moment to exit: wait in the server's lock queue for
	// the key, up to a limit.
	limit := min(p.opts.Timeout, 2*time.Second)
	sctx, cancel := context.WithTimeout(ctx, limit+p.opts.Timeout)
	defer cancel()
	sql := fmt.Sprintf(releaseWaitSQL, (limit + p.opts.Timeout).Milliseconds(), limit.Milliseconds(), p.opts.Key)
	o, err := p.scanObservation(checker, checker.PgConn().Exec(sctx, sql))
	waited := time.Since(closed)
	switch {
	case err == nil && p.elsewhere(o) != "":
		p.multiplexed = true
		return fail(CheckRelease, Safety, fmt.Sprintf("the connection that checked the release reached %s: a load balancer spreads connections over servers, each of which holds its own locks, so two clients would both lead", p.elsewhere(o)))
	case err == nil:
		p.sawPID(o.pid)
		p.aLocked = false
		p.releaseFree = true
		return pass(CheckRelease, fmt.Sprintf("the key was free %s after %s closed: the lock died with its connection", dur.Format(waited), what))
	case sqlState(err) == "55P03":
		p.multiplexed = true // the key sits on a pooled server connection: sweep it
		return fail(CheckRelease, Safety, fmt.Sprintf("the key stayed held for %s after %s, which held it, closed: its server session outlived it, so a dead leader's lock would pass to whichever client gets that server connection next; %s", dur.Format(waited), what, p.resetAdvice()))
	case ctx.Err() != nil:
		return info(CheckRelease, "interrupted")
	default:
		return fail(CheckRelease, Liveness, fmt.Sprintf("could not check that the key was released after %s closed: %s", what, p.explain(err)))
	}
}

// scanObservation reads the backend and server that the last statement of
// a multi-statement string reported, as its first columns (pg_backend_pid
// and the IdentityColumns), decoding the text of each with conn's types.
func (p *run) scanObservation(conn *pgx.Conn, mrr *pgconn.MultiResultReader) (observation, error) {
	var o observation
	results, err := mrr.ReadAll()
	if err != nil {
		return o, err
	}
	if len(results) == 0 || len(results[len(results)-1].Rows) != 1 {
		return o, errors.New("the statement returned no row")
	}
	last := results[len(results)-1]
	row, fields := last.Rows[0], last.FieldDescriptions
	dest := []any{&o.pid, &o.server.SystemID, &o.server.StartedAt, &o.server.InRecovery}
	if len(row) < len(dest) {
		return o, fmt.Errorf("the statement returned %d columns, want at least %d", len(row), len(dest))
	}
	m := conn.TypeMap()
	for i, d := range dest {
		if err := m.Scan(fields[i].DataTypeOID, fields[i].Format, row[i], d); err != nil {
			return o, fmt.Errorf("column %d: %w", i+1, err)
		}
	}
	return o, nil
}

// pgpoolName is run.pooler when pgpool-II is in the path.
const pgpoolName = "pgpool-II"

// resetAdvice names the setting that makes the pooler in the path reset
// a server connection before handing it on.
func (p *run) resetAdvice() string {
	if p.pooler == pgpoolName {
		return "pgpool-II keeps a client's backend connections cached for the next one (connection_cache) and resets them with reset_query_list: set it to its default, 'ABORT; DISCARD ALL'"
	}
	return "a pooler hands connections on without resetting them (PgBouncer: set server_reset_query = DISCARD ALL, or server_reset_query_always)"
}

// lifetimeAdvice names the setting after which the pooler in the path
// closes a server connection, and with it a key stranded there.
func (p *run) lifetimeAdvice() string {
	if p.pooler == pgpoolName {
		return "it goes when pgpool-II closes that cached backend connection (connection_life_time, 0 by default: never; or when its child process exits, child_life_time)"
	}
	return "it goes when the pooler closes that connection (PgBouncer: server_lifetime)"
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
	p.contendersReady() // A's first statement may have ended before they connected
	released := 0
	var problems []string
	holders := p.mayHoldKey()
	lost := false // a connection that took the key no longer holds it
	for _, conn := range holders {
		n, err := locks.Unlock(ctx, conn, p.opts.Key)
		released += n
		lost = lost || n == 0
		if err != nil {
			problems = append(problems, "release the probe key: "+p.explain(err))
		}
	}
	// Where a connection that held the key closed and nothing saw the key
	// free afterwards, where one lost it, or where connections share
	// backends, only pg_locks can say what is left.
	verify := p.multiplexed || lost || (p.aClosed && !p.releaseFree) || p.unsure
	checked := false
	if verify {
		conn := p.anyLive()
		if conn == nil {
			c, err := dbconn.Connect(ctx, p.connConfig())
			if err != nil {
				problems = append(problems, "no connection to check that nothing is left: "+p.explain(err))
			} else {
				defer c.Close(context.Background())
				conn = c
			}
		}
		if conn != nil {
			stranded, err := p.leftovers(ctx, conn)
			for attempt := 0; err == nil && len(stranded) > 0 && attempt < 3; attempt++ {
				p.sweep(ctx)
				stranded, err = p.leftovers(ctx, conn)
			}
			switch {
			case err != nil:
				problems = append(problems, "check that nothing is left: "+p.explain(err))
			case len(stranded) > 0:
				problems = append(problems, fmt.Sprintf("probe key %d is still held by backend pid(s) %s, which a pooler's server connection keeps after our client left; %s, or end it: SELECT pg_terminate_backend(pid). No later probe uses this key", p.opts.Key, pidList(stranded), p.lifetimeAdvice()))
			default:
				checked = true
			}
		}
	}
	switch {
	case len(problems) > 0:
		return warn(CheckCleanup, strings.Join(problems, "; "))
	case checked:
		return pass(CheckCleanup, fmt.Sprintf("probe key released: pg_locks shows it held by none of the backends the probe ran on (%d hold(s) released)", released))
	case p.releaseFree && released == 0:
		return pass(CheckCleanup, "probe key released with connection A: the release check saw it free")
	case released > 0:
		return pass(CheckCleanup, fmt.Sprintf("probe key released (%d hold(s))", released))
	case p.firstFailed:
		return info(CheckCleanup, "nothing to release: connection A's first statement, which takes the key, did not complete, and its connection is closed")
	default:
		return info(CheckCleanup, "nothing to release: no probe connection took the key")
	}
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
		// A key the probe picked at random is held by nobody else, so
		// after a statement whose result was lost every holder is ours.
		if p.pids[pid] || (p.unsure && p.randomKey) {
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
	if p.unsure {
		n++ // the backend whose statement's result was lost
	}
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
	// relayedTCP: the client's own link is TCP to something that carries
	// the session on to the server (a pooler or proxy), seen from evidence
	// (pids or ports that differ, or a server that sees a unix-socket
	// client), not from a host name or port number alone.
	relayedTCP bool
}

// addressBalancerCaveat is what a probe from one host cannot see behind a
// proxy: a balancer that places clients by their address sends every
// connection from one host to one server.
const addressBalancerCaveat = "From one host a probe cannot rule out a balancer that places clients by their address (nginx `hash $remote_addr`, HAProxy `balance source`), which sends all of this host's connections to one server: run the probe from a second host too (more --contenders cannot show it)"

// proxyHints collects the signs that something sits between client and
// server. They warn and never refuse: a session-mode pooler is safe. When
// the protocol's pid is not the server's (a proxy), it asks whether the
// proxy is pgpool-II, whose load balancing refuses the DSN.
func (p *run) proxyHints(first firstResult) proxyResult {
	var res proxyResult
	var hints []string
	info, s := first.info, first.settings
	pidMoved := p.a.PgConn().PID() != info.BackendPID
	if dialed := p.connectedPort(); dialed != 0 && info.Port != 0 && info.Port != dialed {
		hints = append(hints, fmt.Sprintf("you reached port %d but the backend listens on %d: the connection is forwarded", dialed, info.Port))
	}
	if local := localPort(p.a); !s.ClientOnSocket && s.ClientPort != 0 && local != 0 && local != s.ClientPort {
		hints = append(hints, fmt.Sprintf("the server sees a client on port %d whose local socket is port %d: the connection is relayed (a pooler or proxy, or NAT)", s.ClientPort, local))
	}
	if p.connectedPort() == 0 && !s.ClientOnSocket {
		hints = append(hints, "you connected over a unix socket, but the server sees a TCP client: a relay (a cloud SQL proxy, socat, a pooler) carries the connection over a network")
	}
	if p.connectedPort() != 0 && s.ClientOnSocket {
		hints = append(hints, "you connected over TCP, but the server sees a client on a unix socket: a pooler or proxy on the server's host carries the connection")
	}
	forwarded := len(hints) > 0 || pidMoved
	dialed := p.connectedPort()
	res.relayedTCP = dialed != 0 && (pidMoved || s.ClientOnSocket || (info.Port != 0 && info.Port != dialed))
	cfg := p.opts.ConnConfig
	hints = append(hints, EndpointHints(cfg.Host, cfg.Port)...)
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			hints = append(hints, EndpointHints(fb.Host, fb.Port)...)
		}
	}
	// pgpool-II hands out its own pid, except on a backend connection it
	// kept cached from an earlier client: ask whenever anything is in
	// between.
	if pidMoved || len(hints) > 0 {
		res.pgpool = p.pgpool()
	}
	if pidMoved {
		who := "a proxy or pooler hands out its own pids (PgBouncer and pgpool-II do)"
		if p.pooler == pgpoolName {
			who = "pgpool-II hands out its own pids"
		}
		hints = append([]string{fmt.Sprintf("the protocol says backend pid %d but the server says %d: %s", p.a.PgConn().PID(), info.BackendPID, who)}, hints...)
	}
	if p.pooler == pgpoolName && !pidMoved {
		hints = append(hints, "pgpool-II answers SHOW pool_nodes")
	}
	if len(hints) == 0 {
		res.check = pass(CheckProxy, "no sign of a proxy: protocol pid = backend pid, ports match")
		return res
	}
	safe := " (safe only if it keeps one server session per client, like PgBouncer in session mode)"
	if p.pooler == pgpoolName {
		safe = " (the pgpool-II line says what it does with a session's statements)"
	}
	if forwarded {
		safe += ". " + addressBalancerCaveat
	}
	res.check = warn(CheckProxy, strings.Join(slices.Compact(hints), "; ")+safe)
	return res
}

// pgpool asks the proxy whether it is pgpool-II (SHOW pool_nodes, which
// PostgreSQL rejects) and judges its clustering mode and load balancing.
// In streaming replication mode pgpool-II routes each statement by the
// volatility of its functions and its read_only and write function lists,
// so with a standby in the balance a lock function can run on the standby,
// where it fences nothing. In native replication (and snapshot isolation)
// mode every node is a writable primary and pgpool sends each write to all
// of them. Nil when it is not pgpool-II.
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
	p.pooler = pgpoolName
	var mode, lb string
	_ = p.a.QueryRow(ctx, pgpoolModeSQL, pgx.QueryExecModeSimpleProtocol).Scan(&mode)
	_ = p.a.QueryRow(ctx, pgpoolLBSQL, pgx.QueryExecModeSimpleProtocol).Scan(&lb)
	ptr := func(c Check) *Check { return &c }
	node := func(n map[string]any) string { return fmt.Sprintf("%v:%v", n["hostname"], n["port"]) }
	switch mode {
	case "native_replication", "snapshot_isolation":
		var all, main []string
		for _, n := range nodes {
			if fmt.Sprint(n["status"]) == "down" {
				continue
			}
			all = append(all, node(n))
			if fmt.Sprint(n["role"]) == "main" {
				main = append(main, node(n))
			}
		}
		reads := "load_balance_mode = off: reads go to the main node too"
		if lb != "off" {
			reads = "with load_balance_mode = on a session's reads go to one node, which holds that session's locks too"
		}
		return ptr(warn(CheckPgPool, fmt.Sprintf("pgpool-II in %s mode over %d nodes (%s): each is a writable primary, and pgpool sends every statement that writes or calls a volatile function, the lock functions among them, to every node, the main node (%s) first, and answers with the main node's result: a lease's lock is taken on every node and decided on the main node; %s. Locks are not replicated: a client that reaches a node other than through this pgpool, or a node detached and attached again, does not see them, so every client of a lease must go through this pgpool-II",
			mode, len(all), strings.Join(all, ", "), strings.Join(main, ", "), reads)))
	}
	if mode == "raw" {
		return ptr(pgpoolRaw(nodes))
	}
	if lb == "off" {
		return ptr(info(CheckPgPool, fmt.Sprintf("pgpool-II in %s mode with %d node(s) and load_balance_mode = off: every statement goes to the primary", modeName(mode), len(nodes))))
	}
	var balanced []string
	for _, n := range nodes {
		role, status := fmt.Sprint(n["role"]), fmt.Sprint(n["status"])
		weight, _ := strconv.ParseFloat(fmt.Sprint(n["lb_weight"]), 64)
		if role != "primary" && role != "main" && status != "down" && weight > 0 {
			balanced = append(balanced, fmt.Sprintf("%s (%s, weight %v)", node(n), role, weight))
		}
	}
	if len(balanced) == 0 {
		return ptr(info(CheckPgPool, fmt.Sprintf("pgpool-II in %s mode with %d node(s), none but the primary in its load balancing", modeName(mode), len(nodes))))
	}
	where := "a standby, where locks fence nothing"
	if mode != "streaming_replication" && mode != "" {
		where = "another server, whose locks are its own"
	}
	c := fail(CheckPgPool, Safety, fmt.Sprintf("pgpool-II balances load (in %s mode) to %s: it routes each statement by the volatility of its functions and its write_function_list / read_only_function_list, so a lock or a heartbeat can run on %s, and two clients can hold one key on two servers; give leases a DSN with load_balance_mode = off (or straight to the primary)", modeName(mode), strings.Join(balanced, ", "), where))
	return &c
}

// pgpoolRaw judges pgpool-II in raw mode: it sends every statement of every
// session to the first node that is up and balances nothing, whatever
// load_balance_mode and the weights say (SHOW pool_nodes still lists the
// other nodes as replicas with a weight). They are failover targets: when
// pgpool fails the node over, it ends every session and sends new ones to
// the next node up, a server with locks of its own.
func pgpoolRaw(nodes []map[string]any) Check {
	sorted := slices.Clone(nodes)
	id := func(n map[string]any) int { i, _ := strconv.Atoi(fmt.Sprint(n["node_id"])); return i }
	slices.SortFunc(sorted, func(a, b map[string]any) int { return id(a) - id(b) })
	var first string
	var others []string
	for _, n := range sorted {
		addr := fmt.Sprintf("%v:%v", n["hostname"], n["port"])
		switch {
		case fmt.Sprint(n["status"]) == "down" || fmt.Sprint(n["status"]) == "unused":
			others = append(others, addr+" ("+fmt.Sprint(n["status"])+")")
		case first == "":
			first = addr
		default:
			others = append(others, addr)
		}
	}
	if first == "" {
		return fail(CheckPgPool, Liveness, fmt.Sprintf("pgpool-II in raw mode with every node down (%s)", strings.Join(others, ", ")))
	}
	targets := "and has no other node to fail over to"
	if len(others) > 0 {
		targets = fmt.Sprintf("and balances nothing: the other node(s), %s, are failover targets only (SHOW pool_nodes lists them as replicas with a weight, which raw mode does not use). When pgpool fails %s over, it ends every session, so a leader loses its lease as with any lost server, and sends new sessions to the next node up: a server with locks and data of its own, where a lease's key is as exclusive as before only among clients that all reach it through pgpool-II instances that agree which node is up, and where a lease's term record (leasectl fence init) must exist too", strings.Join(others, ", "), first)
	}
	return info(CheckPgPool, fmt.Sprintf("pgpool-II in raw mode: it sends every statement of every session to the first node up, %s, %s", first, targets))
}

// modeName is pgpool-II's backend_clustering_mode for messages.
func modeName(mode string) string {
	if mode == "" {
		return "an unknown clustering"
	}
	return mode
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
	readWrite := sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsReadWrite)
	if distinctHosts(cfg) > 1 && !readWrite && !sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsPrimary) {
		return warn(CheckPrimary, "primary now, but this multi-host DSN lacks target_session_attrs=primary (or read-write): after an HA failover it can land on a standby, where every replica wins its own lock")
	}
	detail := fmt.Sprintf("primary (not in recovery), PostgreSQL %s, system %d", info.Version, info.SystemID)
	if readWrite && distinctHosts(cfg) > 1 {
		// A hot standby is read-only, so read-write skips it as primary
		// does. They differ only on a primary with
		// default_transaction_read_only = on, which read-write skips too.
		detail += "; target_session_attrs=read-write skips a standby as primary does (a hot standby is read-only), and also a primary with default_transaction_read_only = on"
	}
	return pass(CheckPrimary, detail)
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
		return pass(CheckIdleSessionTimeout, "idle_session_timeout = 0: idle lease sessions are not ended")
	}
	return warn(CheckIdleSessionTimeout, strings.Join(set, "; ")+" (a role or database setting, e.g. ALTER ROLE … SET). leasectl's lease sets these to 0 on its own sessions; any other lease over this DSN must do the same (SET idle_session_timeout = 0, …), or lose its lock")
}

// checkDeadPeer judges how long a dead client's key outlives it, on the
// link the client uses. On a direct connection that is the server's own
// dead-peer detection for this session, as the server sees it, judged
// against the lease (package timing): a leader notices its lost session
// within heartbeat + timeout, and the server must not hand its key to
// someone else before, on either path (nothing in flight at the cut, or a
// reply in flight). Only a client that the server itself sees on a unix
// socket has no network in between: a unix-socket DSN may reach a relay
// that carries the connection over TCP, and then the server's view is the
// relay's TCP link, which a dead client's closed socket ends at once.
//
// relayedTCP: the client's link is TCP to a pooler or proxy. Then the
// server's settings judge only the link from the pooler to the server: a
// client that dies without closing its connection (its host lost, a
// partition) leaves its server session, and the key, to the pooler, which
// keeps it until it notices the client is gone by its own keepalives or
// idle timeout, which the probe cannot read.
func checkDeadPeer(s serverSettings, relayedTCP bool, pooler string, heartbeat, hbTimeout time.Duration) Check {
	if !relayedTCP {
		return serverDeadPeer(s, heartbeat, hbTimeout)
	}
	settings := "PgBouncer: tcp_keepalive, tcp_keepidle, tcp_keepintvl, tcp_keepcnt, tcp_user_timeout; HAProxy: timeout client; nginx: proxy_timeout"
	if pooler == pgpoolName {
		settings = "pgpool-II: client_idle_limit, 0 by default: never"
	}
	serverSide := "it reaches the server by its unix socket"
	if !s.ClientOnSocket {
		serverSide = fmt.Sprintf("the server would drop a vanished pooler's session after ≈%s to %s (%s)", s.TCP.Earliest(), humanDuration(s.TCP.Latest()), s.TCP)
	}
	return warn(CheckDeadPeer, fmt.Sprintf("this connection is TCP to a pooler or proxy, which holds the server session: a client that dies without closing it (host lost, partition) leaves its key held until the pooler notices, by its own keepalives or idle timeout (%s), which the probe cannot read (≈2h11m with the OS defaults); %s", settings, serverSide))
}

// serverDeadPeer judges the server's dead-peer detection for this session,
// as the server sees it.
func serverDeadPeer(s serverSettings, heartbeat, hbTimeout time.Duration) Check {
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

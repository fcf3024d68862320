package cmd

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// A group run (leasectl run --procfile), simulated with plain sessions as
// its footprint on the server is specified: a lease session and a stop
// fence session of one application_name; the lease session holds the
// presence lock of every role it serves in shared mode and the key of
// every role it leads, the fence session the fence of each role it leads.
// Its stand-bys poll with pg_try_advisory_lock instead of queueing, and it
// answers requests to step down (locks.ResignRequest) on its lease session:
// a plain one by releasing that role, a drain by releasing every role and
// taking none any more.

// groupOptions say how a simulated group behaves.
type groupOptions struct {
	// Silent: it never answers requests to step down (a hung replica).
	Silent bool
	// Passive: it never takes a role it does not lead (it only stands by).
	Passive bool
}

// simGroup is one simulated group replica. While it runs, its goroutine
// owns both of its connections.
type simGroup struct {
	app           string
	pid, fencePID int32
	serves        []int64

	mu       sync.Mutex
	leads    map[int64]bool
	gaveUp   map[int64]bool
	requests []locks.ResignRequest
	draining bool
}

// startGroup starts a simulated group replica named app that serves the
// roles of serves and leads those of leads (a subset) from the start.
func startGroup(t *testing.T, app string, serves, leads []int64, o groupOptions) *simGroup {
	t.Helper()
	ctx := context.Background()
	lease := pgtest.Conn(t, needLab(t).DirectDSN(), app)
	fence := pgtest.Conn(t, needLab(t).DirectDSN(), app)
	g := &simGroup{app: app, pid: pgtest.PID(t, lease), fencePID: pgtest.PID(t, fence), serves: serves,
		leads: map[int64]bool{}, gaveUp: map[int64]bool{}}
	for _, k := range serves {
		p1, p2 := locks.BigintKey(k).Presence().Int4s()
		pgtest.Exec(t, lease, "SELECT pg_advisory_lock_shared($1, $2)", p1, p2)
		if !o.Silent {
			if err := locks.Listen(ctx, lease, locks.ResignChannel(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range leads {
		hold(t, lease, k)
		f1, f2 := locks.BigintKey(k).Fence().Int4s()
		pgtest.Exec(t, fence, "SELECT pg_advisory_lock($1, $2)", f1, f2)
		g.leads[k] = true
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.run(runCtx, lease, fence, o)
	}()
	// Registered after the connections: it runs before they are closed,
	// and releases every lock at once (a closed connection's backend may
	// still hold them when the next test starts).
	t.Cleanup(func() {
		cancel()
		<-stopped
		for _, c := range []*pgx.Conn{lease, fence} {
			if !c.IsClosed() {
				_, _ = c.Exec(ctx, "SELECT pg_advisory_unlock_all()")
			}
		}
	})
	return g
}

// run answers requests and, unless passive or draining, takes the roles
// it serves that have no holder, until ctx ends.
func (g *simGroup) run(stop context.Context, lease, fence *pgx.Conn, o groupOptions) {
	// Statements are never cancelled midway (that closes the connection,
	// whose backend may then hold its locks into the next test): stop is
	// only looked at between them.
	ctx := context.Background()
	for stop.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		n, err := lease.WaitForNotification(wctx)
		cancel()
		if lease.IsClosed() {
			return
		}
		if err == nil {
			g.answer(ctx, lease, fence, n.Channel, n.Payload)
			continue
		}
		g.mu.Lock()
		idle := o.Passive || g.draining
		g.mu.Unlock()
		if idle {
			continue
		}
		for _, k := range g.serves {
			g.mu.Lock()
			skip := g.leads[k] || g.gaveUp[k]
			g.mu.Unlock()
			if skip {
				continue
			}
			var ok bool
			if err := lease.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
				continue
			}
			// A real group waits for the old leader's stop fence before
			// the role's program starts, beside its other roles; here the
			// fence is only tried, so that one held fence blocks nothing.
			f1, f2 := locks.BigintKey(k).Fence().Int4s()
			_, _ = fence.Exec(ctx, "SELECT pg_try_advisory_lock($1, $2)", f1, f2)
			g.mu.Lock()
			g.leads[k] = true
			g.mu.Unlock()
		}
	}
}

// answer acknowledges a request on the resign channel of one of its roles
// that names its lease session, and steps down as it asks.
func (g *simGroup) answer(ctx context.Context, lease, fence *pgx.Conn, channel, payload string) {
	req, err := locks.ParseResignRequest(payload)
	if err != nil || req.PID != uint32(g.pid) {
		return
	}
	var key int64
	for _, k := range g.serves {
		if locks.ResignChannel(k) == channel {
			key = k
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests = append(g.requests, req) // before the answer, which ends the command
	if err := locks.Notify(ctx, lease, locks.ResignedChannel(key), locks.ResignAck{PID: uint32(g.pid), ID: req.ID, StopTimeoutMS: 2000}); err != nil {
		return
	}
	release := []int64{key}
	if req.Drain {
		g.draining, release = true, g.serves
	}
	for _, k := range release {
		if !g.leads[k] {
			continue
		}
		f1, f2 := locks.BigintKey(k).Fence().Int4s()
		_, _ = fence.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", f1, f2) // its program has stopped
		_, _ = lease.Exec(ctx, "SELECT pg_advisory_unlock($1)", k)
		delete(g.leads, k)
		g.gaveUp[k] = true
	}
}

// leading reports whether g leads key.
func (g *simGroup) leading(key int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leads[key]
}

// received returns the requests to step down that g has answered.
func (g *simGroup) received() []locks.ResignRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.requests)
}

// waitLeading waits until g leads every key of keys.
func (g *simGroup) waitLeading(t *testing.T, keys ...int64) {
	t.Helper()
	for deadline := time.Now().Add(hang); ; time.Sleep(10 * time.Millisecond) {
		if !slices.ContainsFunc(keys, func(k int64) bool { return !g.leading(k) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not lead %v", g.app, keys)
		}
	}
}

// decodeJSON decodes a document printed with -o json into v.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// queue opens a session named app that queues for key in pg_advisory_lock
// (a single-role run's stand-by) and returns its pid. When the test ends
// its wait is cancelled (pg_cancel_backend) before anything else is
// released, so that it never takes the key on its way out.
func queue(t *testing.T, app string, key int64) int32 {
	t.Helper()
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), app)
	pid := pgtest.PID(t, conn)
	done := pgtest.Wait(t, conn, key)
	t.Cleanup(func() {
		observer := pgtest.Conn(t, needLab(t).DirectDSN(), "observer")
		for {
			select {
			case <-done:
				_, _ = locks.Unlock(context.Background(), conn, key)
				return
			case <-time.After(20 * time.Millisecond):
				pgtest.Exec(t, observer, "SELECT pg_cancel_backend($1)", pid)
			}
		}
	})
	return pid
}

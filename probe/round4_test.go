package probe_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/probe"
	"github.com/leasectl/leasectl/test/labtest"
)

// TestDeadPeerBehindAPoolerIsTheClientsLink: PgBouncer reaches the primary
// by its unix socket while its clients use TCP. The server sees a unix
// client, but the client's own link is TCP to PgBouncer: a client whose
// packets stop (its host lost, a partition) leaves its session, and its
// key, with PgBouncer. The ground truth first: a client holds a key
// through a relay that then stops passing anything on without closing
// (what PgBouncer sees of a vanished host), and the key is still held 3 s
// later. The probe must not say the dead client is noticed at once.
func TestDeadPeerBehindAPoolerIsTheClientsLink(t *testing.T) {
	ctx := context.Background()
	dsn := testLab.PoolerDSN("sessionsock")
	cfg := cfgFor(t, dsn)
	relay := newFreezingRelay(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	rcfg := cfg.Copy()
	rcfg.Host, rcfg.Port = "127.0.0.1", relay.port()
	rcfg.Fallbacks = nil
	client, err := dbconn.Connect(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	const key = 4242035
	var pid int32
	var onSocket bool
	if err := client.QueryRow(ctx, "SELECT pg_backend_pid(), inet_client_addr() IS NULL FROM (SELECT pg_advisory_lock($1)) s", int64(key)).Scan(&pid, &onSocket); err != nil {
		t.Fatal(err)
	}
	if !onSocket {
		t.Fatal("the server sees PgBouncer on TCP: this lab's pooler does not reach it by its socket, and the test proves nothing")
	}
	relay.freeze()
	_ = client.PgConn().Conn().Close() // the client is gone; nothing reaches PgBouncer
	time.Sleep(3 * time.Second)
	admin := connect(t, testLab.DirectDSN())
	var held bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND pid = $2 AND granted)", key, pid).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the key of a vanished client behind PgBouncer was released within 3 s: the ground truth changed")
	}
	relay.close()
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}

	rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn)})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(probe.CheckDeadPeer)
	if c.Status != probe.Warn || strings.Contains(c.Detail, "noticed at once") || !strings.Contains(c.Detail, "TCP to a pooler") || !strings.Contains(c.Detail, "tcp_keepidle") {
		t.Errorf("want the dead-peer line to judge the client's TCP link to PgBouncer:%s", dump(rep))
	}
	if rep.Verdict != probe.Stable {
		t.Errorf("session mode is safe:%s", dump(rep))
	}
	if px, _ := rep.Check(probe.CheckProxy); !strings.Contains(px.Detail, "the server sees a client on a unix socket") {
		t.Errorf("the proxy line does not say the server sees a unix client:%s", dump(rep))
	}
	// Straight to the server's socket, there is no network at all.
	rep, err = probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, testLab.SocketDSN())})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := rep.Check(probe.CheckDeadPeer); c.Status != probe.Pass || !strings.Contains(c.Detail, "noticed at once") {
		t.Errorf("the server's own socket:%s", dump(rep))
	}
	assertNothingLeft(t)
}

// TestReadWriteIsAsGoodAsPrimary: on a hot standby target_session_attrs
// read-write and primary choose alike (a hot standby is read-only). A
// standby-first multi-host DSN with read-write reaches the primary, and
// the primary check passes it: no warning of its own that --strict would
// refuse.
func TestReadWriteIsAsGoodAsPrimary(t *testing.T) {
	for _, attrs := range []string{"read-write", "primary"} {
		dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=%s&passfile=%s",
			testLab.User, testLab.Standby.Port, testLab.Primary.Port, attrs, testLab.PassFile)
		for i := range 10 {
			rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn)})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := rep.Check(probe.CheckPrimary)
			if c.Status != probe.Pass || rep.Server == nil || rep.Server.InRecovery {
				t.Fatalf("%s, run %d: want the primary, reached without a warning:%s", attrs, i+1, dump(rep))
			}
			if rep.Verdict != probe.Stable {
				t.Fatalf("%s, run %d: %s:%s", attrs, i+1, rep.Verdict, dump(rep))
			}
		}
	}
	// any still warns: it can land on a standby after a failover.
	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&passfile=%s",
		testLab.User, testLab.Primary.Port, testLab.Standby.Port, testLab.PassFile)
	rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn)})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := rep.Check(probe.CheckPrimary); c.Status != probe.Warn || !strings.Contains(c.Detail, "target_session_attrs=primary (or read-write)") {
		t.Errorf("a multi-host DSN without target_session_attrs:%s", dump(rep))
	}
	assertNothingLeft(t)
}

// freezingRelay forwards TCP connections to a target until freeze: then it
// passes nothing on in either direction and closes nothing, which is what
// the target sees of a client whose host vanished.
type freezingRelay struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
}

func newFreezingRelay(t *testing.T, target string) *freezingRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &freezingRelay{ln: ln}
	t.Cleanup(r.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go r.pipe(up, c)
			go r.pipe(c, up)
		}
	}()
	return r
}

func (r *freezingRelay) port() uint16 { return uint16(r.ln.Addr().(*net.TCPAddr).Port) }

// pipe copies from src to dst until freeze; frozen, it drops what arrives
// and never closes dst.
func (r *freezingRelay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		r.mu.Lock()
		frozen := r.frozen
		r.mu.Unlock()
		if n > 0 && !frozen {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Before freeze a closed side closes the other, as a relay
			// does; after it, nothing is passed on.
			if !frozen {
				dst.Close()
			}
			return
		}
	}
}

func (r *freezingRelay) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frozen = true
}

func (r *freezingRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// TestNginxRoundRobinOverTwoPrimariesIsRefused: nginx's stream proxy over
// the primary and an unrelated second primary, with two worker processes,
// round robin kept per worker (no zone: it said STABLE 11 times in 60) and
// shared (zone), while other clients connect through it. 100 probes through
// each must be refused, naming the other server.
//
// The churn makes nginx's placement of the probe's connections close to
// random, and the probe's claim is a bound, not a certainty: each probe is
// fooled (all ten contenders on A's server) with a chance of at most 2^-10.
// So the test allows at most maxFooled of the 200 probes to pass: with the
// bound, four or more fooled probes in 200 has a chance below 1 in 15,000.
// The earlier probe (two contenders) was fooled 4 times in 60 here, and
// 8 in 60 before: fewer than four in 200 at that rate, about once in a
// thousand runs.
func TestNginxRoundRobinOverTwoPrimariesIsRefused(t *testing.T) {
	const probes, maxFooled = 100, 3
	fooled := 0
	for _, name := range []string{"nginx-rr", "nginx-zone"} {
		t.Run(name, func(t *testing.T) {
			// As a user writes it: no sslmode, so pgx's default prefer
			// opens a TLS attempt first, which the server refuses, and
			// then a second connection: both advance nginx's positions.
			dsn := strings.Replace(doors.NginxDSN(name), "sslmode=disable&", "", 1)
			if strings.Contains(dsn, "sslmode") {
				t.Fatalf("the DSN still sets sslmode: %s", dsn)
			}
			// Other clients connect through it all the while, as other
			// services' connections do, and move each worker's position.
			stop := churn(t, doors.Nginx(name).Port)
			defer stop()
			refused := 0
			for i := range probes {
				// The churn forks a backend per connection: on a busy
				// machine a login can take longer than the default 5 s.
				rep, err := probe.Run(context.Background(), probe.Options{ConnConfig: cfgFor(t, dsn), Timeout: 20 * time.Second})
				if err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
				if rep.Verdict == probe.Refused && rep.Refusal == probe.Safety && strings.Contains(strings.Join(rep.Reasons(), "; "), "another server") {
					refused++
				} else {
					t.Logf("run %d: %s (%s), want REFUSED naming another server:%s", i+1, rep.Verdict, rep.Refusal, dump(rep))
				}
			}
			t.Logf("%d of %d probes through nginx %s over two unrelated primaries were refused", refused, probes, name)
			fooled += probes - refused
		})
	}
	if fooled > maxFooled {
		t.Errorf("%d of %d probes through nginx over two unrelated primaries were not refused, want at most %d (the bound allows one in 1,024)", fooled, 2*probes, maxFooled)
	}
	assertNothingLeftOn(t, testLab.DirectDSN())
	assertNothingLeftOn(t, doors.TwinDSN())
}

// TestAnAddressBalancerIsNamedAsUnseen: nginx `hash $remote_addr` over two
// unrelated primaries sends every connection from one address to one
// server, so a probe from one host cannot see the other: it says STABLE,
// and its proxy line says what it cannot rule out and what to run. The
// ground truth: from a second address (127.0.0.x) a client reaches the
// other server, and both hold the key at once.
func TestAnAddressBalancerIsNamedAsUnseen(t *testing.T) {
	ctx := context.Background()
	dsn := doors.NginxDSN("nginx-hash")
	for i := range 10 {
		rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, dsn)})
		if err != nil {
			t.Fatal(err)
		}
		px, _ := rep.Check(probe.CheckProxy)
		if rep.Verdict != probe.Stable || !strings.Contains(px.Detail, "cannot rule out a balancer that places clients by their address") || !strings.Contains(px.Detail, "from a second host") {
			t.Fatalf("run %d: want STABLE (one host cannot see it) with the proxy line naming what it cannot rule out:%s", i+1, dump(rep))
		}
	}
	const key = 4242036
	a := connect(t, dsn)
	var aSystem int64
	var got bool
	if err := a.QueryRow(ctx, "SELECT system_identifier, pg_try_advisory_lock($1) FROM pg_control_system()", int64(key)).Scan(&aSystem, &got); err != nil || !got {
		t.Fatalf("A: %v, %v", got, err)
	}
	for last := 2; last < 40; last++ {
		cfg := cfgFor(t, dsn)
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(last))}
		cfg.DialFunc = (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).DialContext
		b, err := dbconn.Connect(ctx, cfg)
		if err != nil {
			t.Fatalf("from %s: %v", local.IP, err)
		}
		var bSystem int64
		err = b.QueryRow(ctx, "SELECT system_identifier, pg_try_advisory_lock($1) FROM pg_control_system()", int64(key)).Scan(&bSystem, &got)
		b.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bSystem != aSystem {
			if !got {
				t.Fatalf("from %s on another server, the key was refused", local.IP)
			}
			t.Logf("from %s a client reached the other server and took the key A holds", local.IP)
			return
		}
		if got {
			t.Fatalf("from %s on A's server the key was granted", local.IP)
		}
	}
	t.Fatal("no address of 127.0.0.2 to 127.0.0.39 reached the other server: the ground truth changed")
}

// TestPgPoolRawModeIsAccepted: pgpool-II in raw mode over the primary and an
// unrelated second primary sends every statement to the first node up and
// balances nothing, though SHOW pool_nodes lists the second as a replica
// with a weight: a safe door (it was refused 20 of 20). The pgpool line
// says so, and what a failover to the second node does to a lease. With
// connection_cache = off the same.
func TestPgPoolRawModeIsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings map[string]string
	}{{"defaults", nil}, {"connection_cache off", map[string]string{"connection_cache": "off"}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, d, err := labtest.Start(ctx, lab.Options{Poolers: []lab.PoolerSpec{}}, labtest.Spec{PgPool: &labtest.PgPoolSpec{Mode: labtest.Raw, Settings: tc.settings}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Stop(context.Background()) })
			// The ground truth: 30 sessions of 4 statements each through
			// pgpool all reach the primary.
			primary := testSystem(t, l.DirectDSN())
			for i := range 30 {
				c := connect(t, d.PgPoolDSN())
				for range 4 {
					var sys int64
					if err := c.QueryRow(ctx, "SELECT system_identifier FROM pg_control_system()").Scan(&sys); err != nil {
						t.Fatal(err)
					}
					if sys != primary {
						t.Fatalf("session %d: a statement reached the twin in raw mode", i+1)
					}
				}
				c.Close(ctx)
			}
			for i := range 10 {
				rep, err := probe.Run(ctx, probe.Options{ConnConfig: cfgFor(t, d.PgPoolDSN())})
				if err != nil {
					t.Fatal(err)
				}
				c, _ := rep.Check(probe.CheckPgPool)
				if rep.Verdict != probe.Stable || c.Status != probe.Info || !strings.Contains(c.Detail, "raw mode") || !strings.Contains(c.Detail, "failover targets") || strings.Contains(c.Detail, "balances load") {
					t.Fatalf("run %d: want STABLE with the pgpool line naming raw mode:%s", i+1, dump(rep))
				}
			}
		})
	}
}

// testSystem is the system identifier of the server of dsn.
func testSystem(t *testing.T, dsn string) int64 {
	t.Helper()
	var sys int64
	if err := connect(t, dsn).QueryRow(context.Background(), "SELECT system_identifier FROM pg_control_system()").Scan(&sys); err != nil {
		t.Fatal(err)
	}
	return sys
}

// churn opens and closes TCP connections to 127.0.0.1:port at random
// intervals of 1 to 8 ms until stopped: other clients of a balancer, each of
// which it places (and, in round robin, moves the position of the worker
// that accepted it).
func churn(t *testing.T, port int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration((1000 + rand.IntN(7000))) * time.Microsecond):
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

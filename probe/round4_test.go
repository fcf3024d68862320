package probe_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/probe"
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

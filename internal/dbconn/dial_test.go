package dbconn_test

import (
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
)

// testLab starts when the first test asks for it; the other tests of the
// package need no server. Its hot standby is what target_session_attrs
// refuses (standby_test.go).
var testLab = pgtest.NewLazy(lab.Options{Standby: true})

func TestMain(m *testing.M) { os.Exit(pgtest.RunMainLazy(m, testLab)) }

// dialLog wraps a config's dialer and records every dial: the address, and
// whether it connected.
type dialLog struct {
	mu    sync.Mutex
	dials []string
}

func (d *dialLog) wrap(cfg *pgx.ConnConfig) {
	cfg.Tracer = d
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		d.mu.Lock()
		defer d.mu.Unlock()
		outcome := "ok"
		if err != nil {
			outcome = "refused"
		}
		d.dials = append(d.dials, network+" "+addr+" "+outcome)
		return c, err
	}
}

// TraceConnectStart records where pgx begins to prepare the connection
// (its type registry), which it does before it dials.
func (d *dialLog) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials = append(d.dials, "pgx prepares")
	return ctx
}

func (d *dialLog) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

func (d *dialLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (d *dialLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (d *dialLog) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.dials)
}

// TestConnectDialsEachAttemptOnce: Connect dials a one-address DSN before
// pgx prepares the connection, so that the server forks its backend
// meanwhile, and hands pgx that connection: never a connection more. A DSN
// with several hosts is dialed as pgx asks, in its order, and one whose
// first host is down still reaches the second.
func TestConnectDialsEachAttemptOnce(t *testing.T) {
	l := testLab.Get(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close()
	_, deadPort, _ := net.SplitHostPort(deadAddr)
	live := l.DSN(l.Primary.Port, l.User, "postgres")

	for _, tc := range []struct {
		name, dsn string
		want      []string
	}{
		{"socket", l.SocketDSN(), []string{"unix " + l.Primary.SocketDir + "/.s.PGSQL." + itoa(l.Primary.Port) + " ok", "pgx prepares"}},
		{"TCP", live, []string{"tcp 127.0.0.1:" + itoa(l.Primary.Port) + " ok", "pgx prepares"}},
		// sslmode=prefer, libpq's default: pgx tries TLS, which the lab's
		// server refuses, then the same address without it.
		{"TLS preferred", strings.Replace(live, "sslmode=disable", "sslmode=prefer", 1),
			[]string{"tcp 127.0.0.1:" + itoa(l.Primary.Port) + " ok", "pgx prepares", "tcp 127.0.0.1:" + itoa(l.Primary.Port) + " ok"}},
		{"first host down", strings.Replace(live, "127.0.0.1:", "127.0.0.1:"+deadPort+",127.0.0.1:", 1),
			[]string{"pgx prepares", "tcp 127.0.0.1:" + deadPort + " refused", "tcp 127.0.0.1:" + itoa(l.Primary.Port) + " ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := dbconn.Parse(tc.dsn, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var log dialLog
			log.wrap(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := dbconn.Connect(ctx, cfg)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer conn.Close(context.Background())
			var port int
			if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil || port != l.Primary.Port {
				t.Fatalf("connected to port %d (%v), want the primary's %d", port, err, l.Primary.Port)
			}
			if got := log.list(); !slices.Equal(got, tc.want) {
				t.Errorf("dials %q, want %q", got, tc.want)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestAnOpenConnectionsConfigConnectsAgain: a config taken from an open
// connection (conn.Config(), as a command does to ask a pooler again)
// opens a new connection, while the open one still sends no cancel
// request.
func TestAnOpenConnectionsConfigConnectsAgain(t *testing.T) {
	l := testLab.Get(t)
	cfg, err := dbconn.Parse(l.SocketDSN(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	again, err := dbconn.Connect(ctx, conn.Config())
	if err != nil {
		t.Fatalf("connecting with the open connection's config: %v", err)
	}
	defer again.Close(context.Background())
	if a, b := conn.PgConn().PID(), again.PgConn().PID(); a == b {
		t.Fatalf("one backend (%d) for both connections", a)
	}
	if err := conn.PgConn().CancelRequest(ctx); err == nil || !strings.Contains(err.Error(), "sends no cancel requests") {
		t.Errorf("cancel request: %v, want it refused", err)
	}
}

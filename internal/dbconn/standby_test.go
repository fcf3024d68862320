package dbconn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/errkind"
)

// relay listens on a loopback port of its own and passes each connection
// on to target: a second address for the same server.
func relay(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { io.Copy(s, c); s.Close() }()
				io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestConnectSaysWhyTargetSessionAttrsRefusedEveryServer: a DSN whose
// target_session_attrs wants the primary, pointed at a standby alone (or
// listing only standbys), fails with why: the server is a standby, in
// recovery, naming each. With sslmode=prefer, libpq's default, pgx first
// tries TLS, which the lab's servers decline, then plain text, which
// reaches the standby: the TLS attempt's "server refused TLS connection"
// is not why the connect failed, and must not stand for it.
func TestConnectSaysWhyTargetSessionAttrsRefusedEveryServer(t *testing.T) {
	l := testLab.Get(t)
	pw, err := l.Password()
	if err != nil {
		t.Fatal(err)
	}
	sbPort := itoa(l.Standby.Port)
	sb := "127.0.0.1:" + sbPort
	sb2 := relay(t, sb)
	_, sb2Port, _ := net.SplitHostPort(sb2)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := closed.Addr().String()
	closed.Close()
	primary := "127.0.0.1:" + itoa(l.Primary.Port)
	const advice = "(point the DSN at the primary, or list the primary among its hosts)"

	for _, tc := range []struct {
		name, hosts, query string
		says               []string
		notTLS             bool
		target             error // what errors.Is finds
	}{
		{"read-write", sb, "target_session_attrs=read-write",
			[]string{"connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=read-write refuses it " + advice}, true, pgconn.ErrReadOnlyConnection},
		{"primary", sb, "target_session_attrs=primary",
			[]string{"connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=primary refuses it " + advice}, true, pgconn.ErrStandbyConnection},
		{"primary, TLS off", sb, "target_session_attrs=primary&sslmode=disable",
			[]string{"connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=primary refuses it " + advice}, true, pgconn.ErrStandbyConnection},
		{"the standby twice", sb + "," + sb, "target_session_attrs=primary",
			[]string{"connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=primary refuses it " + advice}, true, pgconn.ErrStandbyConnection},
		{"two standbys", sb + "," + sb2, "target_session_attrs=read-write",
			[]string{"connect to " + sb + "," + sb2 + ": target_session_attrs=read-write refused every server: " +
				sb + " is a standby (in recovery), " + sb2 + " is a standby (in recovery) " + advice}, true, pgconn.ErrReadOnlyConnection},
		// standby-a.test and standby-b.test resolve to 127.0.0.1 (below).
		{"two standbys by name", "standby-a.test:" + sbPort + ",standby-b.test:" + sb2Port, "target_session_attrs=primary",
			[]string{"target_session_attrs=primary refused every server: standby-a.test:" + sbPort + " (127.0.0.1) is a standby (in recovery), standby-b.test:" + sb2Port + " (127.0.0.1) is a standby (in recovery) " + advice},
			true, pgconn.ErrStandbyConnection},
		// The primary is down: that is the reason, and the standby is
		// named as what was there instead.
		{"primary down", dead + "," + sb, "target_session_attrs=primary",
			[]string{"connect to " + dead + "," + sb + ": " + dead + ": connect: connection refused; " + sb + " is a standby (in recovery), which target_session_attrs=primary refuses (is the server running?"},
			true, pgconn.ErrStandbyConnection},
		{"standby wanted, a primary met", primary, "target_session_attrs=standby",
			[]string{"the server is a primary (not in recovery), and target_session_attrs=standby refuses it (leasectl needs the primary: set target_session_attrs=primary in the DSN, or leave it out)"},
			true, pgconn.ErrPrimaryConnection},
		{"read-write wanted, a read-only primary met", primary, "target_session_attrs=read-write&options=-c%20default_transaction_read_only%3Don",
			[]string{"the server is read-only though not in recovery (default_transaction_read_only is on), and target_session_attrs=read-write refuses it (turn default_transaction_read_only off"},
			true, pgconn.ErrReadOnlyConnection},
		// sslmode=require: TLS is all there was, and what went wrong.
		{"TLS required", sb, "target_session_attrs=primary&sslmode=require",
			[]string{"connect to " + sb + ": server refused TLS connection"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := "postgres://" + url.PathEscape(l.User) + ":" + url.PathEscape(pw) + "@" + tc.hosts + "/postgres?" + tc.query
			cfg, err := dbconn.Parse(dsn, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			lookup := cfg.LookupFunc
			cfg.LookupFunc = func(ctx context.Context, host string) ([]string, error) {
				if strings.HasSuffix(host, ".test") {
					return []string{"127.0.0.1"}, nil
				}
				return lookup(ctx, host)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := dbconn.Connect(ctx, cfg)
			if err == nil {
				conn.Close(context.Background())
				t.Fatal("connected with " + tc.query)
			}
			msg := err.Error()
			t.Log(msg)
			var ce *dbconn.ConnectError
			if !errors.As(err, &ce) || !errors.Is(err, errkind.Unavailable) {
				t.Errorf("%T, want a *dbconn.ConnectError of kind Unavailable", err)
			}
			for _, want := range tc.says {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
			if tc.notTLS && strings.Contains(msg, "TLS") {
				t.Errorf("the error blames the TLS attempt: %s", msg)
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Errorf("errors.Is(err, %v) = false", tc.target)
			}
			if strings.Contains(msg, pw) {
				t.Errorf("the error shows the password: %s", msg)
			}
		})
	}
}

// TestConnectReachesThePrimaryPastAStandby: the standby that
// target_session_attrs turns away costs nothing more than before; the
// primary listed after it is where the connection goes.
func TestConnectReachesThePrimaryPastAStandby(t *testing.T) {
	l := testLab.Get(t)
	for _, q := range []string{"target_session_attrs=primary", "target_session_attrs=read-write", "target_session_attrs=prefer-standby"} {
		dsn := strings.Replace(l.DSN(l.Standby.Port, l.User, "postgres"), "127.0.0.1:"+itoa(l.Standby.Port),
			"127.0.0.1:"+itoa(l.Standby.Port)+",127.0.0.1:"+itoa(l.Primary.Port), 1) + "&" + q
		if q == "target_session_attrs=prefer-standby" {
			// the standby is preferred: list the primary first
			dsn = strings.Replace(l.DSN(l.Primary.Port, l.User, "postgres"), "127.0.0.1:"+itoa(l.Primary.Port),
				"127.0.0.1:"+itoa(l.Primary.Port)+",127.0.0.1:"+itoa(l.Standby.Port), 1) + "&" + q
		}
		cfg, err := dbconn.Parse(dsn, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := dbconn.Connect(ctx, cfg)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", q, err)
		}
		var port int
		err = conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port)
		conn.Close(context.Background())
		cancel()
		want := l.Primary.Port
		if q == "target_session_attrs=prefer-standby" {
			want = l.Standby.Port
		}
		if err != nil || port != want {
			t.Errorf("%s: connected to port %d (%v), want %d", q, port, err, want)
		}
	}
}

package dbconn

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestConnectSaysWhetherTheLoginOrTheWayFailed: a peer that accepts the
// connection and never answers (a pooler waiting for its server) times out
// in the login, and the error says so; where nothing listens, the host and
// port are in question.
func TestConnectSaysWhetherTheLoginOrTheWayFailed(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		addr     string
		accepted bool
		says     string
	}{
		{silent.Addr().String(), true, "it accepted the connection but did not complete the login in time"},
		{closedAddr, false, "is the server running?"},
	} {
		cfg, err := Parse("postgres://app@"+tc.addr+"/app?sslmode=disable", 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err = Connect(ctx, cfg)
		cancel()
		var ce *ConnectError
		if !errors.As(err, &ce) || ce.Accepted != tc.accepted || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: accepted %v, %v; want accepted %v and %q", tc.addr, ce != nil && ce.Accepted, err, tc.accepted, tc.says)
		}
	}
}

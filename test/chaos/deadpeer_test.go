//go:build linux

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/test/pgtest"
)

// holdSession is the client of TestDeadPeerTime, run inside the network
// namespace: it connects to dsn, sets the session's tcp_keepalives_idle,
// _interval, _count and tcp_user_timeout (settings, in that order, the
// first three in seconds, the last in milliseconds), LISTENs on the channel
// "deadpeer_" + its backend pid, prints that pid, and then answers each
// line on stdin with a round trip to the server and "ok", until stdin ends.
func holdSession(dsn string, settings []string) error {
	if len(settings) != 4 {
		return fmt.Errorf("%s: want idle,interval,count,user_timeout_ms, got %q", keepalivesEnv, settings)
	}
	cfg, err := dbconn.Parse(dsn, 10*time.Second)
	if err != nil {
		return err
	}
	ctx := context.Background()
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var pid uint32
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT set_config('tcp_keepalives_idle', $1, false),
       set_config('tcp_keepalives_interval', $2, false),
       set_config('tcp_keepalives_count', $3, false),
       set_config('tcp_user_timeout', $4, false)) s`, settings[0], settings[1], settings[2], settings[3]).Scan(&pid)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("LISTEN deadpeer_%d", pid)); err != nil {
		return err
	}
	fmt.Println(pid)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		fmt.Println("ok")
	}
	return nil
}

// deadPeerCase is one session's server-side keepalive settings, and what
// is in flight when the network is cut.
type deadPeerCase struct {
	what string
	tcp  timing.TCP
	// inFlight: right after the cut the server sends the session a
	// notification, which never gets acknowledged (a reply lost in the
	// partition). Otherwise nothing is unacknowledged at the cut.
	inFlight bool
}

// TestDeadPeerTime cuts idle sessions from the network namespace, each with
// its own keepalive settings, and measures when the server drops them, on
// both paths of timing.TCP: with nothing in flight at the cut, and with a
// reply in flight. The server must not drop a session sooner than the model
// says, or the probe would call server settings safe that end a partitioned
// leader's session before the leader notices. (Later is safe, and a loaded
// machine only adds time, so only the early side is asserted.) The cases
// marked "leasectl run" are the session of `leasectl run
// --heartbeat-interval 1s --heartbeat-timeout 1s --grace 1s`.
//
// Both paths are made deterministic: before a silent cut the test waits
// longer than Linux's longest delayed ACK (200 ms), so that nothing is
// unacknowledged either way; for an in-flight cut the server sends after
// the cut. Each session's clock starts at its last packet: the end of its
// last round trip for the silent path, the notification for the other.
func TestDeadPeerTime(t *testing.T) {
	s := time.Second
	cases := []deadPeerCase{
		{"probes only", timing.TCP{Idle: 3 * s, Interval: s, Count: 5}, false},
		{"tcp_user_timeout past the probes (the count is ignored)", timing.TCP{Idle: 3 * s, Interval: s, Count: 20, UserTimeout: 10 * s}, false},
		{"tcp_user_timeout before the first probe", timing.TCP{Idle: 6 * s, Interval: s, Count: 10, UserTimeout: 3 * s}, false},
		{"tcp_user_timeout before the first probe", timing.TCP{Idle: 6 * s, Interval: s, Count: 10, UserTimeout: 3 * s}, true},
		{"keepalives 30s/10s, tcp_user_timeout 5s", timing.TCP{Idle: 30 * s, Interval: 10 * s, Count: 3, UserTimeout: 5 * s}, true},
	}
	// lease/session.go via timing.Lease.ServerTCP: idle ⌈interval + timeout⌉
	// = 2 s, every 1 s, count 4, tcp_user_timeout = 1 + 2×1 + (1 + 2) = 6 s.
	run := timing.Lease{HeartbeatInterval: s, HeartbeatTimeout: s, StopTimeout: timing.CommandStop(s)}
	runTCP := run.ServerTCP(run.DefaultServerTimeout())
	cases = append(cases,
		deadPeerCase{"leasectl run, heartbeat 1s/1s, grace 1s", runTCP, false},
		deadPeerCase{"leasectl run, heartbeat 1s/1s, grace 1s", runTCP, true})

	ns, err := NewNetns()
	if err != nil {
		t.Fatal(err)
	}
	var clients []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if err := ns.Close(); err != nil {
			t.Errorf("remove the network namespace: %v", err)
		}
	})
	listenOnVeth(t, ns)
	nsDSN := ns.DSN(testLab.DirectDSN())

	type session struct {
		deadPeerCase
		pid   int32
		in    io.Writer
		out   *bufio.Scanner
		start time.Time // the last packet the server received
		gone  time.Duration
	}
	var sessions []*session
	for _, c := range cases {
		cmd := ns.Command(os.Args[0])
		cmd.Env = append(os.Environ(), holdEnv+"="+nsDSN, keepalivesEnv+"="+strings.Join([]string{
			strconv.Itoa(int(c.tcp.Idle.Seconds())), strconv.Itoa(int(c.tcp.Interval.Seconds())), strconv.Itoa(c.tcp.Count), strconv.FormatInt(c.tcp.UserTimeout.Milliseconds(), 10)}, ","))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cmd)
		s := &session{deadPeerCase: c, in: in, out: bufio.NewScanner(out)}
		if !s.out.Scan() {
			t.Fatalf("%s: the client in the namespace did not report its backend", c.what)
		}
		pid, err := strconv.ParseInt(s.out.Text(), 10, 32)
		if err != nil {
			t.Fatalf("%s: %q: %v", c.what, s.out.Text(), err)
		}
		s.pid = int32(pid)
		sessions = append(sessions, s)
	}
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	// A round trip on every session just before the cut, then a pause
	// longer than any delayed ACK: nothing is unacknowledged at the cut.
	for _, s := range sessions {
		fmt.Fprintln(s.in, "ping")
		if !s.out.Scan() || s.out.Text() != "ok" {
			t.Fatalf("%s: no answer to the last round trip", s.what)
		}
		s.start = time.Now()
	}
	time.Sleep(500 * time.Millisecond)
	cut := time.Now()
	if err := ns.Cut(); err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.inFlight {
			s.start = time.Now()
			pgtest.Exec(t, admin, fmt.Sprintf("NOTIFY deadpeer_%d", s.pid))
		}
	}
	deadline := cut.Add(15*time.Second + hang)
	for left := len(sessions); left > 0; {
		if time.Now().After(deadline) {
			var alive []string
			for _, s := range sessions {
				if s.gone == 0 {
					alive = append(alive, fmt.Sprintf("%s (%s, in flight: %v)", s.what, s.tcp, s.inFlight))
				}
			}
			t.Fatalf("%d session(s) still alive %s after the cut: %s", left, time.Since(cut).Round(time.Second), strings.Join(alive, "; "))
		}
		time.Sleep(50 * time.Millisecond)
		for _, s := range sessions {
			if s.gone == 0 && !pgtest.Alive(t, admin, s.pid) {
				s.gone = time.Since(s.start)
				left--
			}
		}
	}
	for _, s := range sessions {
		want, path := s.tcp.Silent(), "nothing in flight"
		if s.inFlight {
			want, path = s.tcp.InFlight(), "a reply in flight"
		}
		t.Logf("%-56s %s, %s: dropped after %s, model %s (earliest of both paths %s)",
			s.what, s.tcp, path, fmtDur(s.gone), want, s.tcp.Earliest())
		if s.gone < want-100*time.Millisecond {
			t.Errorf("%s, %s: the server dropped the session %s after its last packet, before the model's %s", s.what, path, fmtDur(s.gone), want)
		}
	}
}

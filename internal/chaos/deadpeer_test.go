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

	"github.com/leasectl/leasectl/dbconn"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/probe"
)

// holdSession is the client of TestDeadPeerTime, run inside the network
// namespace: it connects to dsn, sets the session's tcp_keepalives_idle,
// _interval, _count and tcp_user_timeout (settings, in that order, the
// first three in seconds, the last in milliseconds), prints its backend
// pid, and then answers each line on stdin with a round trip to the server
// and "ok", until stdin ends.
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

// deadPeerCase is one set of server-side keepalive settings of a session.
type deadPeerCase struct {
	what       string
	idle       time.Duration
	interval   time.Duration
	count      int
	userTimout time.Duration
}

// TestDeadPeerTime cuts idle sessions from the network namespace, each
// with its own keepalive settings, and measures when the server drops them:
// it must not be before probe.DeadPeerTime says, or the probe would call
// server settings safe that end a partitioned leader's session before the
// leader notices. (Later is safe, and a loaded machine only adds time, so
// only the early side is asserted.) The last case is the session of
// `leasectl run --heartbeat-interval 1s --heartbeat-timeout 1s --grace 1s`.
func TestDeadPeerTime(t *testing.T) {
	cases := []deadPeerCase{
		{"probes only", 3 * time.Second, time.Second, 5, 0},
		{"tcp_user_timeout past the probes (the count is ignored)", 3 * time.Second, time.Second, 20, 10 * time.Second},
		{"tcp_user_timeout before the first probe", 6 * time.Second, time.Second, 10, 3 * time.Second},
		// lease/session.go: idle ⌈interval + timeout⌉ = 2 s, every 1 s, count
		// ⌈server timeout⌉ − idle = 4, tcp_user_timeout = 1 + 2×1 + (1 + 2) = 6 s.
		{"leasectl run, heartbeat 1s/1s, grace 1s", 2 * time.Second, time.Second, 4, 6 * time.Second},
	}
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
	listenOnVeth(t)
	nsDSN := strings.Replace(testLab.DirectDSN(), "@127.0.0.1:", "@"+HostAddr+":", 1)

	type session struct {
		deadPeerCase
		pid  int32
		in   io.Writer
		out  *bufio.Scanner
		gone time.Duration
	}
	var sessions []*session
	for _, c := range cases {
		cmd := ns.Command(os.Args[0])
		cmd.Env = append(os.Environ(), holdEnv+"="+nsDSN, keepalivesEnv+"="+strings.Join([]string{
			strconv.Itoa(int(c.idle.Seconds())), strconv.Itoa(int(c.interval.Seconds())), strconv.Itoa(c.count), strconv.FormatInt(c.userTimout.Milliseconds(), 10)}, ","))
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
	// A round trip on every session just before the cut: the server's
	// clock for a silent client starts at the last packet it received.
	for _, s := range sessions {
		fmt.Fprintln(s.in, "ping")
		if !s.out.Scan() || s.out.Text() != "ok" {
			t.Fatalf("%s: no answer to the last round trip", s.what)
		}
	}
	cut := time.Now()
	if err := ns.Cut(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	deadline := cut.Add(15*time.Second + hang)
	for left := len(sessions); left > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d session(s) still alive %s after the cut", left, time.Since(cut).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
		for _, s := range sessions {
			if s.gone == 0 && !pgtest.Alive(t, admin, s.pid) {
				s.gone = time.Since(cut)
				left--
			}
		}
	}
	for _, s := range sessions {
		want := probe.DeadPeerTime(s.idle, s.interval, s.count, s.userTimout)
		t.Logf("%-56s idle %s, interval %s, count %d, tcp_user_timeout %s: dropped after %s, probe.DeadPeerTime %s",
			s.what, s.idle, s.interval, s.count, s.userTimout, fmtDur(s.gone), want)
		if s.gone < want-500*time.Millisecond {
			t.Errorf("%s: the server dropped the session %s after the cut, before probe.DeadPeerTime's %s", s.what, fmtDur(s.gone), want)
		}
	}
}

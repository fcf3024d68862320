//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/leasectl/leasectl/lease/leaseapi"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// leasectl serve under faults. Two replicas, each a serve beside an
// application that obeys it: before each unit of work it checks that the
// unit ends before valid_until (asking serve again once it does not),
// holds a flock witness while it works (a second holder means two
// applications working at once), and writes in a fenced transaction
// through PgBouncer in transaction mode. Then the faults: the leading
// serve SIGKILLed (and started again on its socket), frozen (SIGSTOP) past
// its term's deadline, a server restart, and the end of every leasectl
// session by name. What must hold: no write of a term commits once a later
// term has begun, and the witness sees two applications at once only while
// a serve is frozen past the deadline.

const (
	serveRole = "chaos-serve"
	serveKey  = int64(9300201)
	// serveUnit is what one unit of work takes at most: the application
	// starts one only when it ends before valid_until.
	serveUnit = 100 * time.Millisecond
)

// serveChaosFlags: valid_until reaches 1 s past a proving round trip; a
// killed or frozen leader's term reaches its deadline 3 s after its last
// renewal (heartbeat interval + 3 × heartbeat timeout + serve's stop time,
// which is heartbeat interval + 2 × heartbeat timeout).
var serveChaosFlags = []string{"--heartbeat-interval", "500ms", "--heartbeat-timeout", "500ms", "--retry-interval", "100ms", "-o", "json"}

// serveReplica is one serve and the application beside it.
type serveReplica struct {
	name   string
	socket string
	cmd    *exec.Cmd
	log    *leasetest.Buffer
	exited chan struct{}
}

type serveFleet struct {
	t        *testing.T
	leasectl string
	keys     string
	lock     string
	dir      string

	mu       sync.Mutex
	replicas []*serveReplica
	overlaps []time.Time
	frozen   [][2]time.Time // windows in which a serve was frozen, plus the deadline after
	units    map[string]int
	refused  int
}

func (f *serveFleet) start(r *serveReplica) {
	f.t.Helper()
	cmd := exec.Command(f.leasectl, append([]string{"serve", "--role", serveRole, "--listen", "unix:" + r.socket}, serveChaosFlags...)...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+withDSNParam(testLab.DirectDSN(), "application_name", "leasectl%20serve%20"+r.name), "LEASECTL_KEYS="+f.keys)
	r.log = &leasetest.Buffer{}
	cmd.Stderr = r.log
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	r.cmd, r.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(r.exited)
	r.log.WaitFor(f.t, "serving the API", 1, hang)
}

// app is the obeying application of r, until ctx ends.
func (f *serveFleet) app(ctx context.Context, r *serveReplica, db *pgxpool.Pool) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.socket)
	}}}
	ask := func(query string) (leaseapi.RoleState, error) {
		var st leaseapi.RoleState
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://serve/v1/roles/"+serveRole+query, nil)
		resp, err := client.Do(req)
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return st, fmt.Errorf("%s", resp.Status)
		}
		return st, json.NewDecoder(resp.Body).Decode(&st)
	}
	var st leaseapi.RoleState
	for ctx.Err() == nil {
		if !st.Leader || !time.Now().Add(serveUnit).Before(*st.ValidUntil) {
			var err error
			if st, err = ask(""); err != nil {
				st = leaseapi.RoleState{}
				time.Sleep(50 * time.Millisecond) // serve is gone or frozen
				continue
			}
			if !st.Leader || !time.Now().Add(serveUnit).Before(*st.ValidUntil) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		f.unit(ctx, r, db, &st)
	}
}

// unit is one unit of work under the flock witness: a fenced write, then
// the rest of the unit's time.
func (f *serveFleet) unit(ctx context.Context, r *serveReplica, db *pgxpool.Pool, st *leaseapi.RoleState) {
	lock, err := os.OpenFile(f.lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		f.t.Error(err)
		return
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.mu.Lock()
		f.overlaps = append(f.overlaps, time.Now())
		f.mu.Unlock()
		f.t.Logf("witness: %s found another application working (epoch %d)", r.name, st.Epoch)
		time.Sleep(serveUnit)
		return
	}
	done := time.Now().Add(serveUnit / 2)
	wctx, cancel := context.WithDeadline(ctx, done)
	err = pgx.BeginFunc(wctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, "SELECT leasectl.fence($1)", *st.FenceToken); err != nil {
			return err
		}
		_, err := tx.Exec(wctx, "INSERT INTO serve_writes (epoch, app) VALUES ($1, $2)", st.Epoch, r.name)
		return err
	})
	cancel()
	f.mu.Lock()
	var pe *pgconn.PgError
	switch {
	case err == nil:
		f.units[r.name]++
	case errors.As(err, &pe) && pe.Code == "LF001":
		f.refused++
		*st = leaseapi.RoleState{} // a newer term has begun: ask again
	}
	f.mu.Unlock()
	time.Sleep(time.Until(done))
	_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
}

// leader returns the serve that leads, waiting for one.
func (f *serveFleet) leader(after int64) (*serveReplica, int64) {
	f.t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		for _, r := range f.replicas {
			st, err := askOnce(r.socket)
			if err == nil && st.Leader && st.Epoch > after {
				return r, st.Epoch
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("no serve leads with an epoch above %d", after)
	return nil, 0
}

// askOnce asks the serve on socket for the role's state.
func askOnce(socket string) (leaseapi.RoleState, error) {
	var st leaseapi.RoleState
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return st, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "GET /v1/roles/%s HTTP/1.0\r\nHost: serve\r\n\r\n", serveRole); err != nil {
		return st, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// written waits until the application of a term with epoch above after
// has written, and returns that epoch.
func (f *serveFleet) written(admin *pgx.Conn, after int64, what string) int64 {
	f.t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		var epoch int64
		err := admin.QueryRow(context.Background(), "SELECT coalesce(max(epoch), 0) FROM serve_writes").Scan(&epoch)
		if err == nil && epoch > after {
			return epoch
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("%s: no application wrote in a term after epoch %d", what, after)
	return 0
}

func TestServeFaults(t *testing.T) {
	h := newHarness(t)
	rounds := 1
	if *full {
		rounds = 5
	}
	dir, err := os.MkdirTemp("", "serve-chaos")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &serveFleet{t: t, leasectl: h.leasectl, keys: filepath.Join(dir, "keys.yaml"), lock: filepath.Join(dir, "witness.lock"), dir: dir, units: map[string]int{}}
	if err := os.WriteFile(f.keys, fmt.Appendf(nil, "roles:\n  %s: %d\n", serveRole, serveKey), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
	pgtest.Exec(t, admin, "DROP TABLE IF EXISTS serve_writes")
	pgtest.Exec(t, admin, "CREATE TABLE serve_writes (epoch bigint, app text, at timestamptz DEFAULT clock_timestamp())")
	cfg, err := pgxpool.ParseConfig(testLab.PoolerDSN("transaction"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = 4

	ctx, cancel := context.WithCancel(context.Background())
	var apps sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		r := &serveReplica{name: name, socket: filepath.Join(dir, name+".sock")}
		f.start(r)
		f.replicas = append(f.replicas, r)
		db, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		apps.Add(1)
		go func() {
			defer apps.Done()
			defer db.Close()
			f.app(ctx, r, db)
		}()
	}
	defer func() {
		cancel()
		apps.Wait()
		for _, r := range f.replicas {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}()

	epoch := f.written(admin, 0, "the first leader")
	faults, refusedLate := 0, 0
	for i := range rounds {
		// SIGKILL of the leading serve; it starts again on its socket.
		r, _ := f.leader(0)
		_ = r.cmd.Process.Kill()
		<-r.exited
		f.start(r)
		epoch = f.written(admin, epoch, fmt.Sprintf("SIGKILL %d", i+1))
		faults++

		// SIGSTOP of the leading serve past its term's deadline.
		r, _ = f.leader(0)
		stale, err := askOnce(r.socket)
		if err != nil || !stale.Leader {
			t.Fatalf("the leader's state before the freeze: %+v %v", stale, err)
		}
		t0 := time.Now()
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
		epoch = f.written(admin, epoch, fmt.Sprintf("SIGSTOP %d", i+1))
		// An application that ignored valid_until (or was frozen in
		// its unit) writes late with the frozen serve's token.
		if err := lateWrite(testLab.PoolerDSN("transaction"), *stale.FenceToken, stale.Epoch); err == nil {
			t.Errorf("SIGSTOP %d: a write with the frozen leader's token (epoch %d) committed after epoch %d began", i+1, stale.Epoch, epoch)
		} else if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "LF001" {
			t.Errorf("SIGSTOP %d: the late write failed, but not with LF001: %v", i+1, err)
		} else {
			refusedLate++
		}
		time.Sleep(time.Second)
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		f.mu.Lock()
		f.frozen = append(f.frozen, [2]time.Time{t0, time.Now().Add(time.Second)})
		f.mu.Unlock()
		faults++

		// A server restart.
		if err := testLab.RestartPrimary(context.Background(), "fast"); err != nil {
			t.Fatal(err)
		}
		admin = pgtest.Conn(t, testLab.DirectDSN(), "chaos-admin")
		epoch = f.written(admin, epoch, fmt.Sprintf("restart %d", i+1))
		faults++

		// Every leasectl session ended by name.
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'leasectl serve %'`)
		epoch = f.written(admin, epoch, fmt.Sprintf("terminate-all %d", i+1))
		faults++
	}
	cancel()
	apps.Wait()

	var late int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM serve_writes w
		WHERE EXISTS (SELECT 1 FROM leasectl.term_history h WHERE h.key = $1 AND h.epoch > w.epoch AND h.began <= w.at)`, serveKey).Scan(&late); err != nil {
		t.Fatal(err)
	}
	var writes int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM serve_writes").Scan(&writes); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var outside []string
	for _, at := range f.overlaps {
		in := false
		for _, w := range f.frozen {
			in = in || (!at.Before(w[0]) && !at.After(w[1]))
		}
		if !in {
			outside = append(outside, at.Format(time.RFC3339Nano))
		}
	}
	t.Logf("%d faults; %d fenced writes by the applications (%v), %d of theirs refused by the fence, %d late; %d late writes with a frozen serve's token, all refused; the witness saw two applications at once %d times (%d outside a frozen serve's window); last epoch %d",
		faults, writes, f.units, f.refused, late, refusedLate, len(f.overlaps), len(outside), epoch)
	if late > 0 {
		t.Errorf("%d writes committed after a later term began", late)
	}
	if len(outside) > 0 {
		t.Errorf("two applications worked at once, with no serve frozen, at %s", strings.Join(outside, ", "))
	}
}

// lateWrite is a fenced write with token, on a connection of its own.
func lateWrite(dsn, token string, epoch int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT leasectl.fence($1)", token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO serve_writes (epoch, app) VALUES ($1, 'late')", epoch)
		return err
	})
}

//go:build unix

// Command serve measures how fast `leasectl serve` tells the application
// of a change of leader, on a lab of its own, beside the time a `leasectl
// run` program starts:
//
//   - serve: two `leasectl serve` replicas of one role, default settings;
//     at the stand-by, a blocking query (GET /v1/roles/ROLE?epoch=0) and a
//     watcher (GET /v1/watch) wait. The leader's application resigns (POST
//     /v1/roles/ROLE/resign); the stand-by takes the role. Each is timed
//     from the new term's begin (its began in the term record, the
//     server's clock_timestamp() on the same host) until the answer, or the
//     event, reaches this program; target median ≤ 10 ms;
//   - run: two `leasectl run` replicas of another role, each running a few
//     lines of sh that report their start over a FIFO; a request to step
//     down (as `leasectl failover` sends it) moves the role, and the time is
//     from the new term's begin until the next program's first line
//     arrives.
//
// Run it with: go run ./test/bench/serve [-rounds 20]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/lease/leaseapi"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/leasetest"
)

const (
	serveKey = 9500001
	runKey   = 9500002
	// hold is longer than the resigned replica's hold (leaseapi.ResignHold):
	// by then it stands by again, and the next round can move the role back.
	hold = leaseapi.ResignHold + 500*time.Millisecond
)

func main() {
	rounds := flag.Int("rounds", 20, "changes of leader, for serve and for run each")
	flag.Parse()
	if err := bench(*rounds); err != nil {
		fmt.Fprintln(os.Stderr, "serve bench:", err)
		os.Exit(1)
	}
}

func bench(rounds int) error {
	ctx := context.Background()
	l, dir, leasectl, err := benchutil.StartLab(ctx, lab.Options{Poolers: []lab.PoolerSpec{}}, "a lab")
	if err != nil {
		return err
	}
	defer l.Stop(context.Background())
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "roles:\n  bench-serve: %d\n  bench-run: %d\n", serveKey, runKey), 0o600); err != nil {
		return err
	}
	env := []string{"LEASECTL_DSN=" + l.DirectDSN(), "LEASECTL_KEYS=" + keysFile}
	cfg, err := dbconn.Parse(l.DirectDSN(), 5*time.Second)
	if err != nil {
		return err
	}
	conn, err := dbconn.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)

	fmt.Fprintf(os.Stderr, "serve: %d resigns between two replicas …\n", rounds)
	query, watch, err := serveRounds(ctx, conn, leasectl, dir, env, rounds)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "run: %d requests to step down between two replicas …\n", rounds)
	program, err := runRounds(ctx, conn, leasectl, dir, env, rounds)
	if err != nil {
		return err
	}
	q, w, p := benchutil.Summarize(query), benchutil.Summarize(watch), benchutil.Summarize(program)
	fmt.Printf("| term began → (median [p99], %d changes) | time | / run's program start |\n|---|---|---|\n", rounds)
	fmt.Printf("| serve: the stand-by's blocking query answers | %s [%s] | %s |\n", benchutil.Ms(q.Median), benchutil.Ms(q.P99), benchutil.Ratio(q.Median, p.Median))
	fmt.Printf("| serve: the stand-by's watcher gets the event | %s [%s] | %s |\n", benchutil.Ms(w.Median), benchutil.Ms(w.P99), benchutil.Ratio(w.Median, p.Median))
	fmt.Printf("| run: the next replica's program starts | %s [%s] | 1.00 |\n", benchutil.Ms(p.Median), benchutil.Ms(p.P99))
	return nil
}

// began is the begin of the role's term epoch, on the server's clock.
func began(ctx context.Context, conn *pgx.Conn, key, epoch int64) (time.Time, error) {
	var t time.Time
	err := conn.QueryRow(ctx, "SELECT began FROM leasectl.term_history WHERE key = $1 AND epoch = $2", key, epoch).Scan(&t)
	return t, err
}

// served is one leasectl serve and its API client.
type served struct {
	cmd    *exec.Cmd
	socket string
	http   *http.Client
	// leads gets the arrival of each watch event that says this replica
	// leads.
	leads chan arrival
}

type arrival struct {
	at time.Time
	st leaseapi.RoleState
}

func startServe(leasectl, dir, name string, env []string) (*served, error) {
	s := &served{socket: filepath.Join(dir, name+".sock"), leads: make(chan arrival, 64)}
	s.cmd = exec.Command(leasectl, "serve", "--role", "bench-serve", "--listen", "unix:"+s.socket)
	s.cmd.Env = append(os.Environ(), env...)
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stderr = logFile
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.http = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.socket)
	}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := s.get("/v1/roles/bench-serve"); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s does not answer: %w", name, err)
		}
	}
	resp, err := s.http.Get("http://serve/v1/watch")
	if err != nil {
		return nil, err
	}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			at := time.Now()
			var st leaseapi.RoleState
			if json.Unmarshal([]byte(data), &st) == nil && st.Leader {
				s.leads <- arrival{at, st}
			}
		}
	}()
	return s, nil
}

func (s *served) get(path string) (leaseapi.RoleState, error) {
	var st leaseapi.RoleState
	resp, err := s.http.Get("http://serve" + path)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, errors.New(resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (s *served) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func serveRounds(ctx context.Context, conn *pgx.Conn, leasectl, dir string, env []string, rounds int) (query, watch []time.Duration, err error) {
	a, err := startServe(leasectl, dir, "serve-a", env)
	if err != nil {
		return nil, nil, err
	}
	defer a.stop()
	b, err := startServe(leasectl, dir, "serve-b", env)
	if err != nil {
		return nil, nil, err
	}
	defer b.stop()
	leader, standby := a, b
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := b.get("/v1/roles/bench-serve"); st.Leader {
			leader, standby = b, a
			break
		}
		if st, _ := a.get("/v1/roles/bench-serve"); st.Leader {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, errors.New("no serve leads")
		}
	}
	time.Sleep(hold)
	for range rounds {
		for len(standby.leads) > 0 {
			<-standby.leads
		}
		answer := make(chan arrival, 1)
		go func() {
			st, err := standby.get("/v1/roles/bench-serve?epoch=0&wait=60s")
			at := time.Now()
			if err != nil {
				st = leaseapi.RoleState{}
			}
			answer <- arrival{at, st}
		}()
		time.Sleep(50 * time.Millisecond) // the query waits
		if _, err := leader.http.Post("http://serve/v1/roles/bench-serve/resign", "", nil); err != nil {
			return nil, nil, err
		}
		got := <-answer
		if !got.st.Leader {
			return nil, nil, fmt.Errorf("the stand-by's blocking query answered %+v", got.st)
		}
		var ev arrival
		select {
		case ev = <-standby.leads:
		case <-time.After(30 * time.Second):
			return nil, nil, errors.New("no watch event")
		}
		t, err := began(ctx, conn, serveKey, got.st.Epoch)
		if err != nil {
			return nil, nil, err
		}
		query, watch = append(query, got.at.Sub(t)), append(watch, ev.at.Sub(t))
		leader, standby = standby, leader
		time.Sleep(hold)
	}
	return query, watch, nil
}

func runRounds(ctx context.Context, conn *pgx.Conn, leasectl, dir string, env []string, rounds int) ([]time.Duration, error) {
	fifo, err := benchutil.ListenFIFO(filepath.Join(dir, "events"))
	if err != nil {
		return nil, err
	}
	var reps []*benchutil.Replica
	defer func() {
		for _, r := range reps {
			_ = r.Cmd.Process.Kill()
			<-r.Exited
		}
	}()
	for range 2 {
		r, err := benchutil.StartReplica(leasectl, "bench-run", fifo, env...)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	next := func() (leasetest.Event, error) {
		for {
			select {
			case ev := <-fifo.Events:
				if ev.Kind == leasetest.Start {
					return ev, nil
				}
			case <-time.After(30 * time.Second):
				return leasetest.Event{}, errors.New("no program started")
			}
		}
	}
	if _, err := next(); err != nil {
		return nil, err
	}
	var out []time.Duration
	for range rounds {
		// The old leader stands by again (after its hold) before the
		// next request.
		for deadline := time.Now().Add(30 * time.Second); ; {
			if reps[0].StandingBy(100*time.Millisecond, 0) == nil || reps[1].StandingBy(100*time.Millisecond, 0) == nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, errors.New("no run replica stands by")
			}
		}
		time.Sleep(200 * time.Millisecond) // its lock request reaches the server
		target, err := locks.FindTarget(ctx, conn, locks.BigintKey(runKey), map[int64]string{runKey: "bench-run"})
		if err != nil {
			return nil, err
		}
		if _, err := target.Failover(ctx, conn, locks.FailoverOptions{}); err != nil {
			return nil, err
		}
		ev, err := next()
		if err != nil {
			return nil, err
		}
		var epoch int64
		if err := conn.QueryRow(ctx, "SELECT max(epoch) FROM leasectl.term_history WHERE key = $1", runKey).Scan(&epoch); err != nil {
			return nil, err
		}
		t, err := began(ctx, conn, runKey, epoch)
		if err != nil {
			return nil, err
		}
		out = append(out, ev.At.Sub(t))
		time.Sleep(hold)
	}
	return out, nil
}

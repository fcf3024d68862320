//go:build unix

// Command worker is the program the randomized fault schedule runs under
// each role's lease (`leasectl run --fence`): every ~50 ms it writes one
// row in a fenced transaction (SELECT leasectl.fence(token), then an
// INSERT naming role, epoch, writer and a writer-side sequence) through
// the DSN in SCHEDULE_DSN, and it holds the role's flock witness while it
// runs. What it sees goes, one JSON line per event, to a file of its own
// in SCHEDULE_DIR/events, timestamped with this host's clock: the start
// (after the flock was taken, or found held, and by whom), liveness, a
// refused write (SQLSTATE LF001), and the stop (taken before the flock is
// released). After SIGTERM it takes ~200 ms to stop, as a real worker
// finishing its batch would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// event is one line of the worker's event file (the test's fleet reads
// them; keep the two in step).
type event struct {
	Ev      string    `json:"ev"` // start, alive, refused, fail (a write failed otherwise), ok (writes again), term, stop
	T       time.Time `json:"t"`
	Role    string    `json:"role,omitempty"`
	Replica string    `json:"replica,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Epoch   string    `json:"epoch,omitempty"`
	Locked  bool      `json:"locked,omitempty"`
	HeldBy  string    `json:"held_by,omitempty"` // the writer that held the flock at start
	Detail  string    `json:"detail,omitempty"`
}

type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) add(e event) {
	if e.T.IsZero() {
		e.T = time.Now()
	}
	b, _ := json.Marshal(e)
	r.mu.Lock()
	defer r.mu.Unlock()
	// One write per line with O_APPEND: a SIGKILL leaves whole lines.
	_, _ = r.f.Write(append(b, '\n'))
}

func main() {
	role, replica := os.Getenv("LEASECTL_ROLE"), os.Getenv("SCHEDULE_REPLICA")
	token, epoch := os.Getenv("LEASECTL_FENCE_TOKEN"), os.Getenv("LEASECTL_EPOCH")
	dir, dsn := os.Getenv("SCHEDULE_DIR"), os.Getenv("SCHEDULE_DSN")
	if role == "" || dir == "" || dsn == "" || token == "" {
		fmt.Fprintln(os.Stderr, "worker: LEASECTL_ROLE, LEASECTL_FENCE_TOKEN, SCHEDULE_DIR and SCHEDULE_DSN must be set (run it under leasectl run --fence)")
		os.Exit(2)
	}
	pid := os.Getpid()
	writer := fmt.Sprintf("%s/%d", replica, pid)
	f, err := os.OpenFile(filepath.Join(dir, "events", fmt.Sprintf("%s.%s.%d.jsonl", role, replica, pid)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	rec := &recorder{f: f}

	// Signals first: a SIGTERM that comes while the worker sets up must
	// still get its orderly stop.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	lock, err := os.OpenFile(filepath.Join(dir, role+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		rec.add(event{Ev: "fail", Detail: err.Error()})
		os.Exit(1)
	}
	locked := tryLock(lock, writer)
	heldBy := ""
	if !locked {
		b, _ := os.ReadFile(lock.Name())
		heldBy = string(b)
	}
	rec.add(event{Ev: "start", Role: role, Replica: replica, PID: pid, Epoch: epoch, Locked: locked, HeldBy: heldBy})

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		writeLoop(rec, dsn, token, role, epoch, writer, lock, locked, stop)
	}()
	<-sigs
	rec.add(event{Ev: "term"})
	close(stop)
	// A worker finishing its batch: ~200 ms, whatever its last write does
	// (a write stuck in a partition does not hold the stop up).
	time.Sleep(200 * time.Millisecond)
	select {
	case <-done:
	default:
	}
	// Taken before the flock is released (at exit): no other worker's
	// start can carry an earlier time than this stop, unless they ran at
	// once.
	rec.add(event{Ev: "stop"})
	os.Exit(0)
}

// tryLock takes the witness's flock without waiting and, when it got it,
// writes writer into the file for a later worker that finds it held.
func tryLock(lock *os.File, writer string) bool {
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	_ = lock.Truncate(0)
	_, _ = lock.WriteAt([]byte(writer), 0)
	return true
}

func writeLoop(rec *recorder, dsn, token, role, epoch, writer string, lock *os.File, locked bool, stop <-chan struct{}) {
	ep, _ := strconv.ParseInt(epoch, 10, 64)
	var conn *pgx.Conn
	var seq int64
	// lastErr: a failure is recorded when it differs from the one before,
	// not on every 50 ms retry.
	lastErr := ""
	failed := func(err error) {
		if msg := err.Error(); msg != lastErr {
			rec.add(event{Ev: "fail", Detail: msg})
			lastErr = msg
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if !locked {
			// Keep trying: a later worker must find this one's flock.
			locked = tryLock(lock, writer)
		}
		rec.add(event{Ev: "alive"})
		if conn == nil || conn.IsClosed() {
			// No query is ever cancelled through a context: PgBouncer 1.18
			// can die of concurrent cancel requests. connect_timeout in the
			// DSN bounds the connect.
			c, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				failed(err)
				continue
			}
			conn = c
		}
		seq++
		err := write(conn, token, role, ep, writer, seq)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			if lastErr != "" {
				rec.add(event{Ev: "ok"})
				lastErr = ""
			}
		case errors.As(err, &pgErr) && pgErr.Code == "LF001":
			rec.add(event{Ev: "refused", Detail: pgErr.Message})
		default:
			failed(err)
			_ = conn.Close(context.Background())
			conn = nil
		}
	}
}

// write is the fenced transaction: the fence first, then the row.
func write(conn *pgx.Conn, token, role string, epoch int64, writer string, seq int64) error {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT leasectl.fence($1)", token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schedule_writes (role, epoch, writer, seq) VALUES ($1, $2, $3, $4)", role, epoch, writer, seq); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

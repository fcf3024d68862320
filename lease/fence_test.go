package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/pgtest"
)

// leader is one lease of a fencing test, and the session of its work.
type leader struct {
	sess   chan lease.Session
	cancel context.CancelFunc
	run    *runResult
}

func startLeader(t *testing.T, key int64, dsn string) *leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &leader{sess: make(chan lease.Session, 4), cancel: cancel}
	cfg := lease.Config{Role: "fence-test", Key: key, DSN: dsn, Fencing: true, RetryInterval: 100 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: time.Second, StopTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	l.run = start(ctx, cfg, func(ctx context.Context) error {
		s, _ := lease.SessionFrom(ctx)
		l.sess <- *s
		<-ctx.Done()
		return nil
	})
	t.Cleanup(func() { l.cancel(); l.run.wait(t) })
	return l
}

func (l *leader) session(t *testing.T) lease.Session {
	t.Helper()
	select {
	case s := <-l.sess:
		return s
	case <-time.After(time.Minute):
		t.Fatal("the lease did not lead within a minute")
		return lease.Session{}
	}
}

// testLog writes a lease's log lines to the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// writesTable makes a table for a test's fenced writes.
func writesTable(t *testing.T, name string) *pgx.Conn {
	t.Helper()
	admin := pgtest.Conn(t, testLab.DirectDSN(), "")
	pgtest.Exec(t, admin, "DROP TABLE IF EXISTS "+name)
	pgtest.Exec(t, admin, "CREATE TABLE "+name+" (epoch bigint, writer int, at timestamptz DEFAULT clock_timestamp())")
	return admin
}

var isolations = []string{"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}

// TestFenceRefusesAStaleToken: a transaction that checks the token of a
// term after a newer one began is refused (SQLSTATE LF001, a
// *lease.StaleTermError naming the role and both epochs), under every
// isolation level, even when its snapshot was taken before the new term
// began (REPEATABLE READ and SERIALIZABLE take it at the first statement).
func TestFenceRefusesAStaleToken(t *testing.T) {
	for i, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			key := int64(9100200 + i)
			a := startLeader(t, key, testLab.DirectDSN())
			old := a.session(t)
			b := startLeader(t, key, testLab.DirectDSN())
			prog := pgtest.Conn(t, testLab.DirectDSN(), "fence-program")
			ctx := context.Background()
			tx, err := prog.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(strings.ToLower(iso))})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the snapshot, for the stricter levels
				t.Fatal(err)
			}
			a.cancel()
			next := b.session(t)
			_, err = lease.Fence(ctx, tx, old.FenceToken())
			var stale *lease.StaleTermError
			if !errors.As(err, &stale) || !strings.Contains(err.Error(), "fence-test") || !strings.Contains(err.Error(), fmt.Sprint(old.Epoch)) {
				t.Fatalf("Fence(term %d) after term %d began = %v, want a StaleTermError naming the role and the epoch", old.Epoch, next.Epoch, err)
			}
			// The new term's token passes, in a transaction of its own.
			tx2, err := prog.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(strings.ToLower(iso))})
			if err != nil {
				tx.Rollback(ctx)
				tx2, err = prog.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(strings.ToLower(iso))})
				if err != nil {
					t.Fatal(err)
				}
			}
			defer tx2.Rollback(ctx)
			if e, err := lease.Fence(ctx, tx2, next.FenceToken()); err != nil || e != next.Epoch {
				t.Errorf("Fence(term %d) = %d, %v; want its epoch", next.Epoch, e, err)
			}
		})
	}
}

// TestANewTermWaitsForFencedTransactions: a transaction that passed the
// fence holds the next term back until it commits (the new term begins
// after the commit), under every isolation level; one still open after
// the new leader's wait has its session ended and does not commit.
func TestANewTermWaitsForFencedTransactions(t *testing.T) {
	for i, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			key := int64(9100210 + i)
			table := fmt.Sprintf("fence_wait_%d", i)
			admin := writesTable(t, table)
			a := startLeader(t, key, testLab.DirectDSN())
			old := a.session(t)
			b := startLeader(t, key, testLab.DirectDSN())
			ctx := context.Background()
			opts := pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(strings.ToLower(iso))}

			// Commits 500 ms after the old leader stopped: the new term
			// begins after that.
			prog := pgtest.Conn(t, testLab.DirectDSN(), "fence-program")
			tx, err := prog.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lease.Fence(ctx, tx, old.FenceToken()); err != nil {
				t.Fatal(err)
			}
			a.cancel()
			time.Sleep(500 * time.Millisecond) // the transaction's work
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (epoch, writer) VALUES ($1, 1)", old.Epoch); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("the fenced transaction of term %d did not commit: %v", old.Epoch, err)
			}
			next := b.session(t)
			var committed, began time.Time
			if err := admin.QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) FROM "+table+" WHERE writer = 1").Scan(&committed); err != nil {
				t.Fatal(err)
			}
			if err := admin.QueryRow(ctx, "SELECT began FROM leasectl.term WHERE key = $1", key).Scan(&began); err != nil {
				t.Fatal(err)
			}
			if !began.After(committed) {
				t.Errorf("term %d began at %s, before the fenced transaction of term %d committed at %s", next.Epoch, began, old.Epoch, committed)
			}

			// Open past the new leader's wait: its session is ended.
			c := startLeader(t, key, testLab.DirectDSN())
			prog2 := pgtest.Conn(t, testLab.DirectDSN(), "fence-program")
			tx2, err := prog2.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lease.Fence(ctx, tx2, next.FenceToken()); err != nil {
				t.Fatal(err)
			}
			if _, err := tx2.Exec(ctx, "INSERT INTO "+table+" (epoch, writer) VALUES ($1, 2)", next.Epoch); err != nil {
				t.Fatal(err)
			}
			b.cancel()
			third := c.session(t)
			if err := tx2.Commit(ctx); err == nil {
				t.Errorf("a fenced transaction of term %d, open when term %d began, committed", next.Epoch, third.Epoch)
			}
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE writer = 2").Scan(&n); err != nil || n != 0 {
				t.Errorf("%d rows (%v) of the ended transaction, want 0", n, err)
			}
		})
	}
}

// TestNoWriteOfATermCommitsAfterOneOfTheNext: many writers on both sides of
// takeovers, each writing in its own fenced transactions with the token of
// the term it knows (some through PgBouncer in transaction mode), never
// commit a write of term e after one of term e+1.
func TestNoWriteOfATermCommitsAfterOneOfTheNext(t *testing.T) {
	const key, writers, handovers = 9100220, 8, 3
	admin := writesTable(t, "fence_order")
	ctx, stop := context.WithCancel(context.Background())
	var token atomic.Value // the newest term's token
	var leaders []*leader
	l := startLeader(t, key, testLab.DirectDSN())
	token.Store(l.session(t).FenceToken())
	var refused, written atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		dsn := testLab.DirectDSN()
		if w%2 == 1 {
			dsn = testLab.PoolerDSN("transaction")
		}
		conn := pgtest.Conn(t, dsn, "fence-writer")
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := token.Load().(string)
			for ctx.Err() == nil {
				tx, err := conn.Begin(ctx)
				if err != nil {
					return
				}
				e, err := lease.Fence(ctx, tx, mine)
				if err == nil {
					_, err = tx.Exec(ctx, "INSERT INTO fence_order (epoch, writer) VALUES ($1, $2)", e, w)
				}
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
				switch {
				case err == nil:
					written.Add(1)
				case errors.As(err, new(*lease.StaleTermError)):
					refused.Add(1)
					mine = token.Load().(string) // learn the new term
				}
			}
		}()
	}
	for range handovers {
		time.Sleep(300 * time.Millisecond)
		next := startLeader(t, key, testLab.DirectDSN())
		leaders = append(leaders, l)
		l.cancel()
		token.Store(next.session(t).FenceToken())
		l = next
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	wg.Wait()
	var late int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM fence_order a JOIN fence_order b ON b.epoch = a.epoch + 1
  WHERE pg_xact_commit_timestamp(a.xmin) > pg_xact_commit_timestamp(b.xmin)`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	var epochs int
	if err := admin.QueryRow(context.Background(), "SELECT count(DISTINCT epoch) FROM fence_order").Scan(&epochs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes committed over %d terms, %d refused as stale", written.Load(), epochs, refused.Load())
	if late > 0 {
		t.Errorf("%d pairs of writes: one of term e committed after one of term e+1", late)
	}
	if epochs < handovers || refused.Load() == 0 {
		t.Errorf("writes in %d terms, %d refused: the test did not cross a takeover with writers on both sides", epochs, refused.Load())
	}
}

// TestATokenNamesItsTermNotOnlyItsEpoch: after an asynchronous failover that
// lost the last term's record, the epoch is handed out again to another
// term; a token of the lost term carries the same epoch but another id, and
// is refused.
func TestATokenNamesItsTermNotOnlyItsEpoch(t *testing.T) {
	const key = 9100230
	l := startLeader(t, key, testLab.DirectDSN())
	s := l.session(t)
	lost := lease.Session{Role: s.Role, Key: s.Key, Epoch: s.Epoch, TermID: "0123456789abcdef"}
	ctx := context.Background()
	prog := pgtest.Conn(t, testLab.DirectDSN(), "fence-program")
	tx, err := prog.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := lease.Fence(ctx, tx, lost.FenceToken()); !errors.As(err, new(*lease.StaleTermError)) {
		t.Errorf("Fence of a lost term with the current epoch %d = %v, want a StaleTermError", s.Epoch, err)
	}
}

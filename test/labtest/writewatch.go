package labtest

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasectl/leasectl/internal/lab"
)

// WriteWatch records when each HA node first accepts a write, to within
// its polling interval, without waiting for Patroni's own view of the
// cluster: the reference point from which the fault suite and the HA
// benchmark measure how soon a lease leads again on a new primary.
type WriteWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	first  map[int]time.Time // node port → first accepted write
}

// WatchWrites connects to every HA node of l and asks each for a
// transaction id, which a standby refuses, every interval until Stop. A
// connection that fails is opened again at the next poll.
func WatchWrites(l *lab.Lab, interval time.Duration) *WriteWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &WriteWatch{cancel: cancel, done: make(chan struct{}), first: map[int]time.Time{}}
	var wg sync.WaitGroup
	if l.HA != nil {
		for _, n := range l.HA.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.poll(ctx, l, n.Port, interval)
			}()
		}
	}
	go func() { wg.Wait(); close(w.done) }()
	return w
}

func (w *WriteWatch) poll(ctx context.Context, l *lab.Lab, port int, interval time.Duration) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			conn, _ = pgx.Connect(cctx, l.DSN(port, l.User, "postgres"))
			cancel()
		}
		if conn != nil && !conn.IsClosed() {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			var xid string
			err := conn.QueryRow(qctx, "SELECT pg_current_xact_id()::text").Scan(&xid)
			cancel()
			if err == nil {
				w.mu.Lock()
				if _, ok := w.first[port]; !ok {
					w.first[port] = time.Now()
				}
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// WritableAt is when the node listening on port first accepted a write
// since the watch began.
func (w *WriteWatch) WritableAt(port int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.first[port]
	return at, ok
}

// Stop ends the watch and closes its connections.
func (w *WriteWatch) Stop() {
	w.cancel()
	<-w.done
}

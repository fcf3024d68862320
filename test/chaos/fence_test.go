//go:build linux

package chaos

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// The fencing scenarios: leader A's leasectl is frozen past its term's
// deadline while its program runs on (the one case no lease covers), and
// its program writes through PgBouncer in transaction mode in fenced
// transactions. Two programs run at once by design, so the witnesses take
// no lock; what must hold is that no write of A's term commits once B's
// term has begun.

// fenceFlags are the replicas' flags: short heartbeats, so that B takes
// over at A's deadline (8 s after its last renewal), and --fence.
var fenceFlags = append([]string{"--fence"}, shortFlags...)

// writesTable empties chaos_writes, where the witnesses write.
func writesTable(t *testing.T, admin *pgx.Conn) {
	t.Helper()
	pgtest.Exec(t, admin, "DROP TABLE IF EXISTS chaos_writes")
	pgtest.Exec(t, admin, "CREATE TABLE chaos_writes (epoch bigint, pid int, at timestamptz DEFAULT clock_timestamp())")
}

// frozenLeaderWrites: A's leasectl and program are frozen and its sessions
// ended (as the server does for a partitioned client); B takes over; then A's
// program alone resumes and keeps writing. Every write of A's term must be
// refused.
func frozenLeaderWrites(t *testing.T, f *fleet, res *result, rounds int) {
	h, dsn := f.h, testLab.DirectDSN()
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	writesTable(t, admin)
	f.noLock = true
	f.witnessFlags = []string{"-write", testLab.PoolerDSN("transaction")}
	from := h.mark()
	for range 3 {
		f.start(direct, dsn, nil)
	}
	lead := h.await(t, from, hang, "a first leader", isStart)
	f.settled(f.of(lead))
	var refusals []int
	for i := range rounds {
		a := f.of(lead)
		l, fence := holderPIDs(t, admin)
		freezeReplica(t, a)
		if err := syscall.Kill(lead.PID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		from := h.mark()
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($1, $2)`, l, fence)
		res.faults++
		next := h.await(t, from, hang, fmt.Sprintf("B's takeover from the frozen leader (round %d)", i+1), isStart)
		began := termBegan(t, admin, next.Epoch)
		mark := h.mark()
		_ = syscall.Kill(lead.PID, syscall.SIGCONT) // A's program alone resumes
		// and writes, every 100 ms. Its first write may fail otherwise: one
		// it had begun when it was frozen was ended with its session (B's
		// term ends the sessions of fenced transactions left open), and it
		// connects again. So from its first refusal, 2 s of writes.
		isRefusal := func(ev leasetest.Event) bool { return ev.Kind == leasetest.Refused && ev.PID == lead.PID }
		h.await(t, mark, hang, fmt.Sprintf("a refused write of the frozen leader's program (round %d)", i+1), isRefusal)
		time.Sleep(2 * time.Second)
		refused := h.count(mark, isRefusal)
		refusals = append(refusals, refused)
		var late int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM chaos_writes WHERE epoch = $1::bigint AND at >= $2", lead.Epoch, began).Scan(&late); err != nil {
			t.Fatal(err)
		}
		if late > 0 {
			t.Errorf("round %d: %d writes of the frozen leader's term %s committed after term %s began", i+1, late, lead.Epoch, next.Epoch)
		}
		if refused == 0 {
			t.Errorf("round %d: the frozen leader's program wrote nothing that was refused: the scenario proves nothing", i+1)
		}
		thaw(a) // its leasectl stops its program
		h.await(t, mark, hang, "the frozen leader's program stopped", isTermOf(lead.PID))
		lead = next
		f.settled(f.of(lead))
	}
	res.notes = append(res.notes, fmt.Sprintf("the frozen leader's program, resumed after the next term began, had its writes refused (%v per 2 s) and none of its term committed after that", refusals))
}

// termBegan is when the term of epoch began, on the server's clock.
func termBegan(t *testing.T, admin *pgx.Conn, epoch string) time.Time {
	t.Helper()
	var began time.Time
	if err := admin.QueryRow(context.Background(), "SELECT began FROM leasectl.term_history WHERE key = $1 AND epoch = $2::bigint", roleKey, epoch).Scan(&began); err != nil {
		t.Fatal(err)
	}
	return began
}

// longFencedTransaction: A's program opens a fenced transaction that works
// 12 s before it writes; meanwhile A's leasectl is frozen and its sessions
// ended, and B takes over at A's deadline and writes at once. B's term
// begins only once A's transaction is over: it ends A's session, and A's
// write does not commit.
func longFencedTransaction(t *testing.T, f *fleet, res *result, rounds int) {
	h, dsn := f.h, testLab.DirectDSN()
	admin := pgtest.Conn(t, dsn, "chaos-admin")
	writesTable(t, admin)
	f.noLock = true
	var lead leasetest.Event
	for i := range rounds {
		// Only the first leader's program holds its first transaction.
		from := h.mark()
		f.witnessFlags = []string{"-write", testLab.PoolerDSN("transaction"), "-write-hold", "12s"}
		f.start(direct, dsn, nil)
		lead = h.await(t, from, hang, "a leader that holds its first transaction", isStart)
		a := f.of(lead)
		f.settled(a)
		f.witnessFlags = []string{"-write", testLab.PoolerDSN("transaction")}
		f.start(direct, dsn, nil)
		f.settled(a)
		l, fence := holderPIDs(t, admin)
		freezeReplica(t, a)
		from = h.mark()
		pgtest.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ($1, $2)`, l, fence)
		res.faults++
		next := h.await(t, from, hang, fmt.Sprintf("B's takeover (round %d)", i+1), isStart)
		began := termBegan(t, admin, next.Epoch)
		time.Sleep(time.Second) // B writes
		var late, bWrites int
		if err := admin.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE epoch = $1::bigint AND at >= $3), count(*) FILTER (WHERE epoch = $2::bigint) FROM chaos_writes", lead.Epoch, next.Epoch, began).Scan(&late, &bWrites); err != nil {
			t.Fatal(err)
		}
		if late > 0 || bWrites == 0 {
			t.Errorf("round %d: %d writes of term %s committed after term %s began (which wrote %d)", i+1, late, lead.Epoch, next.Epoch, bWrites)
		}
		failed := h.await(t, from, hang, "the old term's long transaction failing", func(ev leasetest.Event) bool {
			return ev.PID == lead.PID && (ev.Kind == leasetest.WriteFail || ev.Kind == leasetest.Refused)
		})
		res.notes = append(res.notes, fmt.Sprintf("round %d: the old program's transaction ended with: %s", i+1, failed.Detail))
		thaw(a)
		h.await(t, from, hang, "the old leader's program stopped", isTermOf(lead.PID))
		f.stopAll()
	}
	res.notes = append(res.notes, "the old term's 12 s transaction was still open when the next term began at its deadline: the new leader ended its session after the heartbeat timeout, and it did not commit")
}

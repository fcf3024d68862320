package term

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/locks"
)

// What the record says of the leases that `leasectl who` shows, beside
// what their advisory locks say (locks.Lease.Health): whether each
// holder leads a term it renews, and the one rule of `who --check` that
// adds to the locks' verdict.

// Record is the current terms of some keys, as one reading found them.
type Record struct {
	// Terms are the current terms (live or ended) of the keys that have
	// had one.
	Terms map[int64]Term
	// Now is the server's clock at the reading.
	Now time.Time
}

// ReadRecord reads the current term of each of keys. It returns nil and
// no error when the database of q has no term record that this role may
// use (Check: Missing or NoPrivilege): leases there run without terms, and
// nothing is judged by them.
func ReadRecord(ctx context.Context, q Querier, keys []int64) (*Record, error) {
	ok, err := usable(ctx, q)
	if err != nil || !ok {
		return nil, err
	}
	terms, now, err := Latest(ctx, q, keys)
	switch {
	case errors.Is(err, ErrNoSchema): // dropped since the check
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &Record{Terms: terms, Now: now}, nil
}

// usable reports whether the term record exists and this role may read it.
// A role that may not look into the schema at all (permission denied,
// 42501) may not use it either.
func usable(ctx context.Context, q Querier) (bool, error) {
	st, err := Check(ctx, q)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return false, nil
	case err != nil:
		return false, err
	}
	return st == Ready || st == ReadOnly, nil
}

// Place is where a lease's holder stands in the record.
type Place struct {
	// Standing is Assess's verdict on the key's holder.
	Standing Standing
	// Term is the key's current term, live or ended; HasTerm is false when
	// the key never had one. A holder that is StandingLive or StandingStale
	// holds it; for one that is StandingWaiting it is the previous term,
	// which it waits for when it is live.
	Term    Term
	HasTerm bool
	// Holder is the key's holder; zero when the key is free.
	Holder locks.Session
	// Now is the server's clock at the reading of the record.
	Now time.Time
}

// Place says where l's holder stands in the record. ok is false when the
// record says nothing of l: a key in the two-int4 form, which no lease
// holds; a key held in shared mode or by a prepared transaction, which is
// no lease's hold (locks.Lease.Health judges those); a key that was not
// asked for and never had a term, an advisory lock of something other
// than a lease (who --all); and a key whose holder is not a lease of
// leasectl (StandingOther), which leads by holding it.
func (r *Record) Place(l locks.Lease) (Place, bool) {
	if r == nil || l.Key.Form != locks.Bigint {
		return Place{}, false
	}
	t, has := r.Terms[l.Key.ID]
	h, held := l.Holder()
	switch {
	case !has && !l.Requested:
		return Place{}, false
	case len(l.Holders) > 1 || h.Shared || (held && (h.Prepared != nil || h.PID == 0)):
		return Place{}, false
	}
	p := Place{Term: t, HasTerm: has, Holder: h, Now: r.Now}
	p.Standing = Assess(t, has, h, held, r.Now)
	if p.Standing == StandingOther {
		return Place{}, false
	}
	return p, true
}

// Owns reports whether the holder holds the key's current term (a live
// one, renewed or not).
func (p Place) Owns() bool { return p.Standing == StandingLive || p.Standing == StandingStale }

// Open reports whether the key's current term has not ended, although it
// is not the holder's own: nobody holds the key, or a holder that waits
// does, while the previous leader is stopping its work (or is gone and has
// not recorded the end).
func (p Place) Open() bool { return !p.Owns() && p.HasTerm && p.Term.Live() }

// Problem says, in one line that names the lease, why a holder does not
// lead by the record (StandingStale, StandingOverdue); "" for any other
// place.
func (p Place) Problem(name string) string {
	switch p.Standing {
	case StandingStale:
		return fmt.Sprintf("%s's holder pid %d has not renewed its term %d for %s, longer than a live holder ever lets it go (heartbeat interval + timeout + stop time, %s): it is frozen or hung (a waiting leasectl stand-by ends its sessions)",
			name, p.Holder.PID, p.Term.Epoch, roundAge(p.Now.Sub(p.Term.Renewed)), p.Term.Timing.Stopped())
	case StandingOverdue:
		idle, _ := p.Holder.Idle(p.Now)
		return fmt.Sprintf("%s's holder pid %d, a lease of leasectl, has held the key idle for %s without beginning a term, longer than its bound (heartbeat interval + timeout + stop time, %s): a frozen stand-by that the server granted the key, or a hung one (a waiting leasectl stand-by ends its session)",
			name, p.Holder.PID, roundAge(idle), p.Holder.LeaseBound)
	}
	return ""
}

// Note says, in one line that names the lease, what a table's reader
// should know of its place: Problem for a holder that does not lead by the
// record; for a lease that holds the key and has yet to begin its term,
// what it waits for; and for a free key whose term has not ended, that
// its last leader may still be stopping its work. "" otherwise.
func (p Place) Note(name string) string {
	if p.Standing == StandingWaiting {
		return fmt.Sprintf("%s's holder pid %d has not begun its term yet: %s", name, p.Holder.PID, waits(p, nil, true))
	}
	if p.Standing == StandingFree && p.Open() {
		t := p.Term
		if !p.Now.Before(t.Deadline()) {
			return fmt.Sprintf("nobody holds %s, and its term %d of %s has not ended: its holder never recorded the end, and its deadline %s has passed; the next leader ends it", name, t.Epoch, describe(t.Holder), clock(t.Deadline()))
		}
		return fmt.Sprintf("nobody holds %s, but its term %d of %s has not ended: its holder lost its session and is stopping its work (or is gone); the next leader waits for the end, at most until the deadline %s (in %s)",
			name, t.Epoch, describe(t.Holder), clock(t.Deadline()), roundAge(t.Deadline().Sub(p.Now)))
	}
	return p.Problem(name)
}

// waits says what a holder that has not begun a term waits for, from its
// place p and, when a session waits for the key's stop fence, the fence's
// holder. When no term is open, long says what such a holder may be;
// otherwise that it has yet to begin one.
func waits(p Place, fence *locks.Session, long bool) string {
	var clauses []string
	if fence != nil {
		clauses = append(clauses, fmt.Sprintf("the previous leader's work to stop (pid %d holds its stop fence)", fence.PID))
	}
	t := p.Term
	open := p.HasTerm && t.Live()
	switch {
	case open && !p.Now.Before(t.Deadline()):
		if len(clauses) > 0 {
			return "it waits for " + clauses[0] + fmt.Sprintf("; term %d of %s has passed its deadline %s without recording its end, so the holder begins its own once it notices", t.Epoch, describe(t.Holder), clock(t.Deadline()))
		}
		return fmt.Sprintf("term %d of %s has passed its deadline %s without recording its end, so the holder begins its own once it notices (if it is a lease of leasectl)", t.Epoch, describe(t.Holder), clock(t.Deadline()))
	case open:
		clauses = append(clauses, fmt.Sprintf("term %d of %s to end (deadline %s, in %s)", t.Epoch, describe(t.Holder), clock(t.Deadline()), roundAge(t.Deadline().Sub(p.Now))))
	}
	if len(clauses) == 0 && !long {
		return "no term is open for it to wait for, and it has yet to begin its own"
	}
	if len(clauses) == 0 {
		return "no term is open for it to wait for: it is about to begin its own, or it is a frozen stand-by that the server granted the key (overdue once idle for longer than its bound, " + p.Holder.LeaseBound.String() + ")"
	}
	return "it waits for " + strings.Join(clauses, " and for ")
}

// describe names a term's holder: "vm1 pid 555 (backend 6330)".
func describe(h Holder) string {
	host := h.Host
	if host == "" {
		host = "an unnamed host"
	}
	return fmt.Sprintf("%s pid %d (backend %d)", host, h.OSPID, h.BackendPID)
}

// clock is a time of the server's clock as a message shows it.
func clock(t time.Time) string { return t.Format(time.TimeOnly) }

// roundAge rounds d for a message: to the second from 10s, else to the
// tenth of a second.
func roundAge(d time.Duration) string {
	if d >= 10*time.Second || d <= -10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// Health is one lease's verdict with the term record: the advisory locks'
// verdict (locks.Lease.Health) first; a lease that is healthy by its
// locks is healthy only if, where the record says something of it, its
// holder leads a term that it renews (StandingLive). It is what `who
// --check` gates on.
type Health struct {
	// Locks is the verdict of the advisory locks alone.
	Locks locks.Health
	// Place is where the holder stands in the record; Placed is false when
	// the record was not read (no record) or says nothing of the lease
	// (Record.Place).
	Place  Place
	Placed bool
}

// Health judges l at now (the clock of its reading) with staleAfter for
// idle holders and, when r is not nil, by the record.
func (r *Record) Health(l locks.Lease, now time.Time, staleAfter time.Duration) Health {
	h := Health{Locks: l.Health(now, staleAfter)}
	h.Place, h.Placed = r.Place(l)
	return h
}

// OK reports whether the lease has exactly one live leader: healthy by its
// locks and, where the record says something of it, a holder that leads a
// term it renews or a lease that has yet to begin its term and is not
// overdue (a new leader is not an alert).
func (h Health) OK() bool {
	if h.Locks != locks.Healthy {
		return false
	}
	return !h.Placed || h.Place.Standing == StandingLive || h.Place.Standing == StandingWaiting
}

// String names the health as `who -o json` does: the names of
// locks.Health, and term_stale (the holder's term is overdue) or no_term
// (the holder, a lease, has held the key without a term for longer than
// its bound) for a lease healthy by its locks.
func (h Health) String() string {
	if h.Locks == locks.Healthy && h.Placed {
		switch h.Place.Standing {
		case StandingStale:
			return "term_stale"
		case StandingOverdue:
			return "no_term"
		}
	}
	return h.Locks.String()
}

// Problem says why a lease that is healthy by its locks is not healthy by
// the record; "" otherwise.
func (h Health) Problem(name string) string {
	if h.Locks != locks.Healthy || !h.Placed {
		return ""
	}
	return h.Place.Problem(name)
}

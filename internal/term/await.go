package term

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/locks"
)

// A failover with the term record: the stand-by that takes the key over
// starts its work only once it has begun a term of its own, after the
// previous leader's work has stopped (its stop fence) and its term has
// ended (or passed its deadline). `leasectl failover` reads the term
// before it acts (ReadBefore) and, once a stand-by holds the key, waits
// for that stand-by's term (Before.Await).

// ErrNoTerm means that the new holder of a key began no term within the
// wait; a *NoTermError says what it waited for.
var ErrNoTerm = errkind.New(errkind.CheckFailed, "no new term began")

// Before is a key's term record as a failover found it before it acted:
// the term then current, which the new leader's must follow.
type Before struct {
	Key int64
	// Term is the key's current term (live or ended); HasTerm is false when
	// the key never had one.
	Term    Term
	HasTerm bool
}

// ReadBefore reads key's current term before a failover. It returns nil
// and no error when the database of q has no term record that this role
// may use, and for a key in the two-int4 form, which no lease holds: a
// failover there is over once a stand-by holds the key.
func ReadBefore(ctx context.Context, q Querier, key locks.Key) (*Before, error) {
	if key.Form != locks.Bigint {
		return nil, nil
	}
	ok, err := usable(ctx, q)
	if err != nil || !ok {
		return nil, err
	}
	t, _, has, err := Current(ctx, q, key.ID)
	switch {
	case errors.Is(err, ErrNoSchema): // dropped since the check
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &Before{Key: key.ID, Term: t, HasTerm: has}, nil
}

// newer reports whether t is a term that began after b's.
func (b *Before) newer(t Term) bool {
	return !b.HasTerm || (t.ID != b.Term.ID && t.Epoch > b.Term.Epoch)
}

// Began is the new term that [Before.Await] waited for.
type Began struct {
	// Other says that the key's new holder is not a lease of leasectl
	// (StandingOther): it leads by holding the key and begins no term, so
	// Term is zero and After is not measured.
	Other bool
	Term  Term
	// Holder is the session that holds the key and leads the term, as the
	// reading that found the term saw it.
	Holder locks.Session
	// After is how long after AwaitOptions.Since the term began, on the
	// server's clock; zero when Since is zero.
	After time.Duration
}

// Wait is what the holder of a key waits for before it begins its term,
// as one reading found it.
type Wait struct {
	// Place is the holder's place in the record; Held is false when nobody
	// holds the key.
	Place
	Held bool
	// Fence is the holder of the key's stop fence while a session waits
	// for the fence (the new leader does): the previous leader's work is
	// still stopping. Nil otherwise.
	Fence *locks.Session
}

// String says, in one line, what the key's holder waits for.
func (w Wait) String() string { return w.say(false) }

// Explain is String for the end of a wait: where no term is open for the
// holder to wait for, it says what a holder that begins none may be.
func (w Wait) Explain() string { return w.say(true) }

func (w Wait) say(long bool) string {
	switch {
	case !w.Held && w.Open():
		return fmt.Sprintf("nobody holds the key, and term %d of %s has not ended", w.Term.Epoch, describe(w.Term.Holder))
	case !w.Held:
		return "nobody holds the key"
	case w.Owns():
		return fmt.Sprintf("pid %d holds the key in term %d, the term from before the failover", w.Holder.PID, w.Term.Epoch)
	}
	return fmt.Sprintf("pid %d holds the key but has not begun a term: %s", w.Holder.PID, waits(w.Place, w.Fence, long))
}

// phase is what makes a new line of progress when it changes: who holds
// the key, what it waits for and whether the deadline has passed, but not
// the time left.
func (w Wait) phase() string {
	fence := int32(0)
	if w.Fence != nil {
		fence = w.Fence.PID
	}
	return fmt.Sprint(w.Held, w.Holder.PID, w.Standing, w.HasTerm, w.Term.ID, w.Term.Live(), !w.Now.Before(w.Term.Deadline()), fence)
}

// NoTermError says that no new term began within the wait, and what the
// key's holder was waiting for at its end.
type NoTermError struct {
	Within time.Duration
	Last   Wait
}

func (e *NoTermError) Error() string {
	return fmt.Sprintf("%v within %s: %s", ErrNoTerm, e.Within, e.Last.Explain())
}

// Is makes a *NoTermError match ErrNoTerm and its kind.
func (e *NoTermError) Is(target error) bool {
	return target == ErrNoTerm || target == errkind.CheckFailed
}

// AwaitOptions configure [Before.Await].
type AwaitOptions struct {
	// Holder is the session that took the key over: a term that it, or the
	// key's holder at the reading, began is the new leader's.
	Holder locks.Session
	// Since is the server's clock at the request to step down or at the
	// signal, from which Began.After is measured.
	Since time.Time
	// From is when the wait began (the client's clock) and Within how long
	// it lasts: until From + Within.
	From   time.Time
	Within time.Duration
	// Poll is the pause between readings when no notification wakes the
	// wait first; default 250ms.
	Poll time.Duration
	// ReadTimeout bounds each statement; default 5s.
	ReadTimeout time.Duration
	// OnWait, when set, is called with what the key's holder waits for
	// once two readings in a row have found it waiting for the same (a new
	// leader that begins its term a moment after it took the key waits for
	// nothing worth a word), and again whenever that changes.
	OnWait func(Wait)
}

// Await waits until a term newer than b's begins, led by the holder of the
// key, and returns it; or, when the key's holder is not a lease of
// leasectl (StandingOther), returns at once with Began.Other: it leads by
// holding the key, as it did before there was a term record. It LISTENs on Channel(b.Key) on conn, so that the
// moment a term begins or ends wakes it, and reads again every o.Poll
// whatever came (the stop fence and the key's holder are not notified, and
// a notification dies with a connection). When none began by the end of
// the wait the error is a *NoTermError, which says what the holder waited
// for. Each statement has its own timeout, so giving up never cancels a
// query.
func (b *Before) Await(ctx context.Context, conn *pgx.Conn, o AwaitOptions) (Began, error) {
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Second
	}
	if o.From.IsZero() {
		o.From = time.Now()
	}
	until := o.From.Add(o.Within)
	channel := Channel(b.Key)
	lctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
	err := locks.Listen(lctx, conn, channel)
	cancel()
	if err != nil {
		return Began{}, fmt.Errorf("wait for the new term: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ReadTimeout)
		defer cancel()
		_, _ = conn.Exec(uctx, "UNLISTEN "+pgx.Identifier{channel}.Sanitize())
	}()
	key := locks.BigintKey(b.Key)
	filter := locks.Filter{Keys: []locks.Key{key, key.Fence()}}
	lastPhase, told := "", ""
	for {
		w, t, has, err := b.read(ctx, conn, filter, o.ReadTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return Began{}, ctx.Err()
			}
			return Began{}, fmt.Errorf("wait for the new term of key %d: %w", b.Key, err)
		}
		if w.Standing == StandingOther {
			return Began{Other: true, Holder: w.Holder}, nil
		}
		if has && b.newer(t) && (leads(t, w.Holder, w.Held) || leads(t, o.Holder, true)) {
			began := Began{Term: t, Holder: w.Holder}
			if !leads(t, w.Holder, w.Held) {
				began.Holder = o.Holder
			}
			if !o.Since.IsZero() {
				began.After = max(t.Began.Sub(o.Since), 0)
			}
			return began, nil
		}
		if p := w.phase(); p != lastPhase {
			lastPhase = p
		} else if p != told {
			told = p
			if o.OnWait != nil {
				o.OnWait(w)
			}
		}
		left := time.Until(until)
		if left <= 0 {
			return Began{}, &NoTermError{Within: o.Within, Last: w}
		}
		// Any notification on the connection wakes the wait; the next
		// reading says what changed.
		wctx, cancel := context.WithTimeout(ctx, min(o.Poll, left))
		_, err = conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return Began{}, ctx.Err()
		case conn.IsClosed():
			return Began{}, fmt.Errorf("wait for the new term of key %d: the connection closed: %w", b.Key, err)
		case err != nil && !timedOut:
			return Began{}, fmt.Errorf("wait for the new term of key %d: %w", b.Key, err)
		}
	}
}

// read reads the key's holder, its stop fence and its current term.
func (b *Before) read(ctx context.Context, conn *pgx.Conn, f locks.Filter, timeout time.Duration) (Wait, Term, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	snap, err := locks.Read(rctx, conn, f)
	if err != nil {
		return Wait{}, Term{}, false, err
	}
	t, now, has, err := Current(rctx, conn, b.Key)
	if err != nil {
		return Wait{}, Term{}, false, err
	}
	key := locks.BigintKey(b.Key)
	h, held := snap.Find(key).Holder()
	w := Wait{Place: Place{Term: t, HasTerm: has, Holder: h, Now: now}, Held: held}
	w.Standing = Assess(t, has, h, held, now)
	if fl := snap.Find(key.Fence()); held && len(fl.Waiters) > 0 {
		if fh, ok := fl.Holder(); ok {
			w.Fence = &fh
		}
	}
	return w, t, has, nil
}

// leads reports whether term t is held by session s (when held): its
// backend pid and, where both are known, its start.
func leads(t Term, s locks.Session, held bool) bool {
	return held && s.PID != 0 && t.Holder.BackendPID == uint32(s.PID) &&
		(s.BackendStart.IsZero() || t.Holder.BackendStart.IsZero() || t.Holder.BackendStart.Equal(s.BackendStart))
}

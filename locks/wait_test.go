package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
)

// TestWaitLockTimesOutThenTakesOverWhenTheHolderGoes shows the stand-by
// the lease is built on: a waiter whose lock_timeout expires gets false and
// keeps a usable session; a waiter in the queue gets the key as soon as the
// holder's session ends, without polling.
func TestWaitLockTimesOutThenTakesOverWhenTheHolderGoes(t *testing.T) {
	ctx := context.Background()
	holder, waiter := connect(t, testLab.DirectDSN()), connect(t, testLab.DirectDSN())
	const key = -777001
	if ok, err := locks.TryLock(ctx, holder, key); err != nil || !ok {
		t.Fatalf("holder TryLock = %v, %v", ok, err)
	}
	ok, err := locks.WaitLock(ctx, waiter, locks.BigintKey(key), 50*time.Millisecond)
	if err != nil || ok {
		t.Fatalf("WaitLock on a held key = %v, %v; want false after lock_timeout", ok, err)
	}
	if err := waiter.Ping(ctx); err != nil {
		t.Fatalf("the waiter's session should survive a lock_timeout: %v", err)
	}

	got := make(chan error, 1)
	go func() {
		ok, err := locks.WaitLock(ctx, waiter, locks.BigintKey(key), time.Minute)
		if err == nil && !ok {
			err = errors.New("WaitLock returned false")
		}
		got <- err
	}()
	holder.Close(ctx) // the holder's session ends: the server hands the key to the waiter
	if err := <-got; err != nil {
		t.Fatalf("waiter after the holder left: %v", err)
	}
	if n, err := locks.Unlock(ctx, waiter, key); err != nil || n != 1 {
		t.Fatalf("waiter Unlock = %d, %v; want 1 hold released", n, err)
	}
}

// TestWaitLockHonoursContext: cancelling the context ends the wait with an
// error instead of waiting for lock_timeout.
func TestWaitLockHonoursContext(t *testing.T) {
	holder, waiter := connect(t, testLab.DirectDSN()), connect(t, testLab.DirectDSN())
	const key = -777002
	if ok, err := locks.TryLock(context.Background(), holder, key); err != nil || !ok {
		t.Fatalf("holder TryLock = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := locks.WaitLock(ctx, waiter, locks.BigintKey(key), time.Hour)
		got <- err
	}()
	time.AfterFunc(100*time.Millisecond, cancel) // most likely while the waiter is queued; a wait that ignored ctx would hang for an hour
	if err := <-got; err == nil {
		t.Fatal("WaitLock returned nil after its context was cancelled")
	}
}

package leasetest

import (
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// report connects to l as a witness does, writes n events, and returns the
// encoder and connection (for a witness that stays).
func report(t *testing.T, l *Listener, n int) (*json.Encoder, net.Conn) {
	t.Helper()
	c, err := net.Dial("unix", l.Path)
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(c)
	for range n {
		if err := enc.Encode(Event{Kind: Start, PID: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return enc, c
}

// TestSyncReadsEveryReportWrittenBefore: witnesses that report and exit at
// once, and one that stays connected; right after they wrote, Sync must
// count every event, and the consumer must have them once it has received
// that many.
func TestSyncReadsEveryReportWrittenBefore(t *testing.T) {
	l, err := Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	received := 0
	go func() {
		for range l.Events {
			mu.Lock()
			received++
			mu.Unlock()
		}
	}()
	live, c := report(t, l, 0)
	defer c.Close()
	written := int64(0)
	for round := range 100 {
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				_, c := report(t, l, 3)
				c.Close()
			})
		}
		wg.Wait()
		if err := live.Encode(Event{Kind: Term, PID: 2}); err != nil {
			t.Fatal(err)
		}
		written += 10*3 + 1
		n, err := l.Sync(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n != written {
			t.Fatalf("round %d: Sync counts %d events sent, want the %d written before it", round+1, n, written)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		got := received
		mu.Unlock()
		if int64(got) == written {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer received %d of %d events", got, written)
		}
	}
}

// TestSyncFailsWhenEventsAreNotConsumed: with nobody receiving Events, the
// reports cannot all be delivered, and Sync says so after its limit.
func TestSyncFailsWhenEventsAreNotConsumed(t *testing.T) {
	l, err := Listen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() {
			for range l.Events {
			}
		}()
		l.Close()
	}()
	_, c := report(t, l, cap(l.Events)+10)
	c.Close()
	if _, err := l.Sync(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "not read in time") {
		t.Fatalf("Sync = %v, want a failure: the events cannot be delivered", err)
	}
}

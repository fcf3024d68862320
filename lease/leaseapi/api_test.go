package leaseapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// These tests drive a role's term directly (API.term, what Work runs with
// the lease's session) and the API over HTTP; the lease itself is tested
// against a real server by leasectl serve's tests (cmd/serve_test.go).

func newTestAPI(t *testing.T, ttl time.Duration) (*API, *httptest.Server) {
	t.Helper()
	a := New(Options{Roles: []string{"poller", "sweeper"}, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond, AppTTL: ttl})
	srv := httptest.NewServer(a.Handler(nil))
	t.Cleanup(srv.Close)
	return a, srv
}

func get(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// startTerm runs a term of role poller with epoch until the returned
// cancel; done yields what it returned.
func startTerm(a *API, epoch int64) (cancel context.CancelFunc, done chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- a.term(ctx, a.roles["poller"], epoch, "token-7") }()
	return cancel, done
}

func TestBlockingArgs(t *testing.T) {
	for _, tc := range []struct {
		epoch, wait string
		e           int64
		d           time.Duration
		msg         string
	}{
		{"3", "30s", 3, 30 * time.Second, ""},
		{"0", "", 0, DefaultWait, ""},
		{"1", "1h", 1, MaxWait, ""},
		{"", "30s", 0, 0, "wait needs epoch=E"},
		{"x", "", 0, 0, `invalid epoch "x"`},
		{"-2", "", 0, 0, `invalid epoch "-2"`},
		{"1", "0s", 0, 0, `invalid wait "0s"`},
		{"1", "soon", 0, 0, `invalid wait "soon"`},
	} {
		e, d, msg := blockingArgs(tc.epoch, tc.wait)
		if tc.msg != "" {
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("epoch=%q wait=%q: %q, want %q", tc.epoch, tc.wait, msg, tc.msg)
			}
			continue
		}
		if msg != "" || e != tc.e || d != tc.d {
			t.Errorf("epoch=%q wait=%q: %d %s %q, want %d %s", tc.epoch, tc.wait, e, d, msg, tc.e, tc.d)
		}
	}
}

// TestTermKeepsItsPromise: a blocking query wakes when the term begins
// and ends; once ended, the term's work returns only after the valid_until
// it handed out, and at once for a resign of that epoch.
func TestTermKeepsItsPromise(t *testing.T) {
	a, srv := newTestAPI(t, 0)
	answer := make(chan RoleState, 1)
	go func() {
		var st RoleState
		get(t, srv.URL+"/v1/roles/poller?epoch=0&wait=10s", &st)
		answer <- st
	}()
	cancel, done := startTerm(a, 7)
	st := <-answer
	if !st.Leader || st.Epoch != 7 || *st.FenceToken != "token-7" || st.ValidUntil == nil {
		t.Fatalf("%+v", st)
	}
	a.OnHeartbeat(time.Now())
	var again RoleState
	get(t, srv.URL+"/v1/roles/poller", &again)
	promised := *again.ValidUntil
	go func() {
		var st RoleState
		get(t, srv.URL+"/v1/roles/poller?epoch=7&wait=10s", &st)
		answer <- st
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if st := <-answer; st.Leader || st.Epoch != 0 || st.ValidUntil != nil {
		t.Errorf("after the end: %+v", st)
	}
	<-done
	if now := time.Now(); now.Before(promised) {
		t.Errorf("the term's work returned at %s, before the valid_until %s it handed out", now, promised)
	}

	// A resign of the ended term's epoch ends the wait.
	cancel, done = startTerm(a, 8)
	a.OnHeartbeat(time.Now().Add(time.Hour)) // a promise far ahead
	// The term begins in startTerm's goroutine: the promise is handed out
	// only once an answer says it leads.
	for get(t, srv.URL+"/v1/roles/poller", &again); !again.Leader || again.Epoch != 8; get(t, srv.URL+"/v1/roles/poller", &again) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	for {
		var after RoleState
		if get(t, srv.URL+"/v1/roles/poller", &after); !after.Leader {
			break
		}
	}
	resp, err := http.Post(srv.URL+"/v1/roles/poller/resign?epoch=8", "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resign after the end: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the resign did not end the wait")
	}
}

// TestAppTTL: a term whose application does not check in ends, and
// valid_until never passes the check-in deadline.
func TestAppTTL(t *testing.T) {
	a, srv := newTestAPI(t, 300*time.Millisecond)
	a.OnHeartbeat(time.Now().Add(time.Hour))
	_, done := startTerm(a, 3)
	var st RoleState
	for !st.Leader {
		resp, err := http.Post(srv.URL+"/v1/roles/poller/alive", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
	}
	if limit := time.Now().Add(300 * time.Millisecond); st.ValidUntil.After(limit) {
		t.Errorf("valid_until %s beyond the check-in deadline %s", st.ValidUntil, limit)
	}
	select {
	case err := <-done:
		if err != ErrAppSilent {
			t.Errorf("the term ended with %v, want ErrAppSilent", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the silent application kept the role")
	}
}

// TestWatch: the stream starts with every role, then has one event per
// change.
func TestWatch(t *testing.T) {
	a, srv := newTestAPI(t, 0)
	resp, err := http.Get(srv.URL + "/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() RoleState {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var st RoleState
				if err := json.Unmarshal([]byte(data), &st); err != nil {
					t.Fatal(err)
				}
				return st
			}
		}
		t.Fatal("the stream ended")
		return RoleState{}
	}
	if first, second := next(), next(); first.Role != "poller" || second.Role != "sweeper" || first.Leader || second.Leader {
		t.Errorf("first events: %+v %+v", first, second)
	}
	cancel, done := startTerm(a, 5)
	if st := next(); st.Role != "poller" || !st.Leader || st.Epoch != 5 {
		t.Errorf("change: %+v", st)
	}
	cancel()
	if st := next(); st.Role != "poller" || st.Leader {
		t.Errorf("end: %+v", st)
	}
	<-done
}

package cmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease/leaseapi"
	"github.com/leasectl/leasectl/test/leasetest"
)

// serveFlags make the tests' serves notice and hand over in seconds: a
// killed leader's term reaches its deadline after 2 × 0.5 s + 4 × 0.5 s.
var serveFlags = []string{"--heartbeat-interval", "500ms", "--heartbeat-timeout", "500ms", "--retry-interval", "100ms"}

// served is one running leasectl serve and a client of its API.
type served struct {
	*replica
	socket string
	http   *http.Client
}

// startServe starts leasectl serve on a unix socket of the test's own,
// with the fixture's keys and the lab's database.
func (f *runFixture) startServe(args ...string) *served {
	f.t.Helper()
	dir, err := os.MkdirTemp("", "serve") // short: a socket path has at most 107 bytes
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "api.sock")
	all := append(append([]string{"serve", "--listen", "unix:" + socket}, serveFlags...), args...)
	r := f.startLeasectl(needLab(f.t).DirectDSN(), all...)
	s := &served{replica: r, socket: socket, http: unixClient(socket)}
	r.log.WaitFor(f.t, "serving the API", 1, hang)
	return s
}

// unixClient is an HTTP client that reaches the API on socket, whatever
// the URL's host.
func unixClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
}

// do makes a request and decodes a JSON answer into out; it returns the
// status.
func (s *served) do(t *testing.T, method, path string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://serve"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, s.log)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, body, err)
		}
	}
	return resp.StatusCode
}

func (s *served) role(t *testing.T, name string) leaseapi.RoleState {
	t.Helper()
	var st leaseapi.RoleState
	if code := s.do(t, "GET", "/v1/roles/"+name, &st); code != http.StatusOK {
		t.Fatalf("GET /v1/roles/%s: %d", name, code)
	}
	return st
}

// await asks a blocking query until the role's state is one cond accepts.
func (s *served) await(t *testing.T, name string, cond func(leaseapi.RoleState) bool) leaseapi.RoleState {
	t.Helper()
	deadline := time.Now().Add(hang)
	st := s.role(t, name)
	for !cond(st) {
		if time.Now().After(deadline) {
			t.Fatalf("role %s stays %+v\n%s", name, st, s.log)
		}
		st = leaseapi.RoleState{}
		if code := s.do(t, "GET", fmt.Sprintf("/v1/roles/%s?epoch=%d&wait=10s", name, s.role(t, name).Epoch), &st); code != http.StatusOK {
			t.Fatalf("blocking query: %d", code)
		}
	}
	return st
}

func leading(st leaseapi.RoleState) bool    { return st.Leader }
func notLeading(st leaseapi.RoleState) bool { return !st.Leader }

// checkLeader checks the fields of a leading role's state.
func checkLeader(t *testing.T, st leaseapi.RoleState) {
	t.Helper()
	switch {
	case !st.Leader || st.Epoch < 1:
		t.Errorf("%+v: want leader with an epoch", st)
	case st.FenceToken == nil || *st.FenceToken == "":
		t.Errorf("%+v: no fence_token", st)
	case st.TermBegan == nil || st.ValidUntil == nil:
		t.Errorf("%+v: no term_began or valid_until", st)
	case !st.ValidUntil.After(time.Now()):
		t.Errorf("valid_until %s is not ahead of now", st.ValidUntil)
	case st.ValidUntil.Location() != time.UTC || st.TermBegan.Location() != time.UTC:
		t.Errorf("times not in UTC: %s %s", st.TermBegan, st.ValidUntil)
	}
}

// sseEvents reads the watch stream of s into a channel of role states.
func (s *served) watch(t *testing.T) <-chan leaseapi.RoleState {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://serve/v1/watch", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("watch: Content-Type %q", ct)
	}
	out := make(chan leaseapi.RoleState, 100)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var st leaseapi.RoleState
				if json.Unmarshal([]byte(data), &st) == nil {
					out <- st
				}
			}
		}
		close(out)
	}()
	return out
}

// next returns the next watch event that cond accepts.
func nextEvent(t *testing.T, events <-chan leaseapi.RoleState, cond func(leaseapi.RoleState) bool) leaseapi.RoleState {
	t.Helper()
	timeout := time.After(hang)
	for {
		select {
		case st, ok := <-events:
			if !ok {
				t.Fatal("the watch stream ended")
			}
			if cond(st) {
				return st
			}
		case <-timeout:
			t.Fatal("no such watch event")
		}
	}
}

// pickLeader waits until one of a and b leads role, and returns it first.
func pickLeader(t *testing.T, role string, a, b *served) (*served, *served, leaseapi.RoleState) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		if st := a.role(t, role); st.Leader {
			return a, b, st
		}
		if st := b.role(t, role); st.Leader {
			return b, a, st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no serve leads %s:\n%s\n%s", role, a.log, b.log)
	return nil, nil, leaseapi.RoleState{}
}

// TestServeKillMovesTheRole: two serves of one role. The leader's state
// has every field; the socket has mode 0600. A blocking query and a watcher
// at the stand-by are answered when the leader is SIGKILLed: the stand-by
// leads, with a higher epoch.
func TestServeKillMovesTheRole(t *testing.T) {
	f := newRunFixture(t, "poller", 9400001)
	a, b := f.startServe("--role", "poller"), f.startServe("--role", "poller")
	fi, err := os.Stat(a.socket)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket %s: %v %v, want a socket of mode 0600", a.socket, fi.Mode(), err)
	}
	leader, standby, st := pickLeader(t, "poller", a, b)
	checkLeader(t, st)
	var all []leaseapi.RoleState
	if code := leader.do(t, "GET", "/v1/roles", &all); code != 200 || len(all) != 1 || all[0].Role != "poller" {
		t.Errorf("GET /v1/roles: %d %+v", code, all)
	}
	if other := standby.role(t, "poller"); other.Leader || other.Epoch != 0 || other.FenceToken != nil || other.ValidUntil != nil {
		t.Errorf("stand-by: %+v, want leader false, epoch 0 and nulls", other)
	}
	events := standby.watch(t)
	if first := nextEvent(t, events, func(leaseapi.RoleState) bool { return true }); first.Leader {
		t.Errorf("first watch event %+v, want the stand-by's state", first)
	}
	answer := make(chan leaseapi.RoleState, 1)
	go func() {
		var got leaseapi.RoleState
		standby.do(t, "GET", "/v1/roles/poller?epoch=0&wait=60s", &got)
		answer <- got
	}()
	time.Sleep(200 * time.Millisecond) // the query waits
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-answer:
		checkLeader(t, got)
		if got.Epoch <= st.Epoch {
			t.Errorf("new epoch %d, want above %d", got.Epoch, st.Epoch)
		}
		ev := nextEvent(t, events, leading)
		if ev.Epoch != got.Epoch {
			t.Errorf("watch event %+v, blocking query %+v", ev, got)
		}
	case <-time.After(hang):
		t.Fatalf("the blocking query never answered\n%s", standby.log)
	}
}

// TestServeResignMovesTheRole: the leader's application resigns; the
// other serve leads, and the resigned one stands by again.
func TestServeResignMovesTheRole(t *testing.T) {
	f := newRunFixture(t, "poller", 9400002)
	a, b := f.startServe("--role", "poller"), f.startServe("--role", "poller")
	leader, standby, st := pickLeader(t, "poller", a, b)
	var after leaseapi.RoleState
	if code := leader.do(t, "POST", "/v1/roles/poller/resign", &after); code != 200 || after.Leader {
		t.Fatalf("resign: %d %+v, want 200 and leader false", code, after)
	}
	got := standby.await(t, "poller", leading)
	checkLeader(t, got)
	if got.Epoch <= st.Epoch {
		t.Errorf("epoch %d after resign, want above %d", got.Epoch, st.Epoch)
	}
	if again := leader.role(t, "poller"); again.Leader {
		t.Errorf("the resigned serve leads again: %+v", again)
	}
	var e struct{ Error string }
	if code := leader.do(t, "POST", "/v1/roles/poller/resign", &e); code != http.StatusConflict || !strings.Contains(e.Error, "not led by this replica") {
		t.Errorf("resign while standing by: %d %q", code, e.Error)
	}
	if code := standby.stop(t); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0\n%s", code, standby.log)
	}
}

// TestServeAppTTL: with --app-ttl, a role whose application checks in
// keeps it; once it stops, the role steps down.
func TestServeAppTTL(t *testing.T) {
	f := newRunFixture(t, "poller", 9400003)
	s := f.startServe("--role", "poller", "--app-ttl", "1500ms")
	st := s.await(t, "poller", leading)
	for range 6 {
		var alive leaseapi.RoleState
		if code := s.do(t, "POST", "/v1/roles/poller/alive", &alive); code != 200 || alive.Epoch != st.Epoch {
			t.Fatalf("check-in: %d %+v, want epoch %d still (the app checks in)", code, alive, st.Epoch)
		}
		if alive.ValidUntil.After(time.Now().Add(1600 * time.Millisecond)) {
			t.Errorf("valid_until %s lies beyond the app's check-in deadline", alive.ValidUntil)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var gone leaseapi.RoleState
	s.do(t, "GET", fmt.Sprintf("/v1/roles/poller?epoch=%d&wait=60s", st.Epoch), &gone)
	if gone.Leader || gone.Epoch != 0 {
		t.Errorf("after the app went silent: %+v, want not leading", gone)
	}
	s.log.WaitFor(t, "has not checked in within its TTL", 1, hang)
}

// TestServeBadRequests: the API's answers to bad queries are JSON errors.
func TestServeBadRequests(t *testing.T) {
	f := newRunFixture(t, "poller", 9400004)
	s := f.startServe("--role", "poller")
	for _, tc := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/v1/roles/poller?epoch=1&wait=soon", 400, `invalid wait "soon"`},
		{"GET", "/v1/roles/poller?epoch=-1", 400, `invalid epoch "-1"`},
		{"GET", "/v1/roles/poller?wait=1s", 400, "wait needs epoch=E"},
		{"GET", "/v1/roles/sweeper", 404, `unknown role "sweeper": this serve holds poller`},
		{"POST", "/v1/roles/sweeper/alive", 404, `unknown role "sweeper"`},
		{"POST", "/v1/roles/poller/resign?epoch=x", 400, `invalid epoch "x"`},
		{"GET", "/v1/nothing", 404, "no such endpoint"},
	} {
		var e struct{ Error string }
		if code := s.do(t, tc.method, tc.path, &e); code != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s: %d %q, want %d and %q", tc.method, tc.path, code, e.Error, tc.code, tc.want)
		}
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		if code := s.do(t, "GET", path, nil); code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
	}
}

// TestServeInputErrors: bad input ends serve with exit 2 and a message,
// before anything connects; so does an address in use. A stale socket
// file is replaced.
func TestServeInputErrors(t *testing.T) {
	f := newRunFixture(t, "poller", 9400005)
	dir, err := os.MkdirTemp("", "serve")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	busy := filepath.Join(dir, "busy.sock")
	l, err := net.Listen("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	procfile := filepath.Join(dir, "Procfile")
	if err := os.WriteFile(procfile, []byte("sweeper: ./sweep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LEASECTL_DSN": "postgres://u@127.0.0.1:1/db?connect_timeout=1", "LEASECTL_KEYS": f.keys}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no role", []string{"serve"}, "give the roles to hold"},
		{"unknown role", []string{"serve", "--role", "sweeper"}, `unknown role "sweeper"`},
		{"procfile role", []string{"serve", "--procfile", procfile}, `"sweeper"`},
		{"both", []string{"serve", "--role", "poller", "--procfile", procfile}, "either --procfile FILE or --role"},
		{"twice", []string{"serve", "--role", "poller", "--role", "poller"}, "given twice"},
		{"ttl", []string{"serve", "--role", "poller", "--app-ttl", "-1s"}, "invalid --app-ttl"},
		{"socket in use", []string{"serve", "--role", "poller", "--listen", "unix:" + busy}, "unix:" + busy + " is in use"},
		{"not a socket", []string{"serve", "--role", "poller", "--listen", "unix:" + plain}, "is not a socket"},
		{"bad address", []string{"serve", "--role", "poller", "--listen", "localhost"}, "want unix:PATH or HOST:PORT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, env, tc.args...)
			if res.Code != ExitUsage || !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", res.Code, res.Stderr, tc.want)
			}
		})
	}

	// A socket file left by a process that is gone is replaced.
	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	sl.(*net.UnixListener).SetUnlinkOnClose(false)
	sl.Close()
	s := f.startLeasectl(needLab(t).DirectDSN(), append([]string{"serve", "--role", "poller", "--listen", "unix:" + stale}, serveFlags...)...)
	s.log.WaitFor(t, "serving the API", 1, hang)
	if code := s.stop(t); code != 0 {
		t.Errorf("SIGTERM: exit %d\n%s", code, s.log)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the socket %s is left after serve exited", stale)
	}
}

func jsonDecode(resp *http.Response, out any) error { return json.NewDecoder(resp.Body).Decode(out) }

// TestServeProcfileFewSessions: serve --procfile holds every role of a
// Procfile (its commands are not run) over at most three server sessions,
// as run --procfile does.
func TestServeProcfileFewSessions(t *testing.T) {
	roles := []string{"poller", "scheduler", "reconciler", "sweeper", "mailer"}
	f := newGroupFixture(t, 9400020, roles...)
	s := f.startLeasectl(needLab(t).DirectDSN()+"&application_name=serve-few", append([]string{"serve", "--procfile", f.procfile, "--listen", "127.0.0.1:0"}, serveFlags...)...)
	s.log.WaitFor(t, "serving the API", 1, hang)
	m := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.log.String())
	if m == nil {
		t.Fatalf("no listen= in the log:\n%s", s.log)
	}
	for deadline := time.Now().Add(hang); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + m[1] + "/v1/roles")
		if err != nil {
			t.Fatal(err)
		}
		var all []leaseapi.RoleState
		err = jsonDecode(resp, &all)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		led := 0
		for i, st := range all {
			if st.Role != roles[i] {
				t.Fatalf("GET /v1/roles lists %+v, want the Procfile's order %v", all, roles)
			}
			if st.Leader {
				led++
			}
		}
		if led == len(roles) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d roles led:\n%s", led, len(roles), s.log)
		}
	}
	if n := sessionsOf(t, "serve-few") + sessionsOf(t, "serve-few fence"); n < 2 || n > 3 {
		t.Errorf("%d server sessions for %d roles, want the lease and fence sessions, at most 3", n, len(roles))
	}
	if n := f.count(leasetest.Start, 0); n != 0 {
		t.Errorf("%d of the Procfile's programs started; serve runs none", n)
	}
}

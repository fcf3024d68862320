package cmd

// Hostile input: every command against the inputs that mistakes, scripts and
// attackers produce. Each case asserts what the user sees: the documented
// exit code, a message that says what is wrong and what to do, the DSN's
// password nowhere, no stack trace, and no hang (every invocation runs under
// a bound that fails the test when hit; it is a bound, not a timing claim).

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/memtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

const (
	// hostilePW is the password of every DSN of these tests, and
	// hostileTail the part of it after an unquoted space or an unescaped
	// "&": neither may ever be shown.
	hostilePW   = "Hostile-Pw-7Qz"
	hostileTail = "Tail-Pw-9Kx"
	// hostileBound is how long one invocation may take before the test
	// calls it a hang.
	hostileBound = 60 * time.Second

	hostilePollerKey    = 1840800001
	hostileSchedulerKey = 1840800002
)

// stackTrace matches what a Go panic or an unwrapped internal error prints.
var stackTrace = regexp.MustCompile(`(?i)panic|goroutine \d+|\.go:\d+`)

// expect is what a user must see from one invocation.
type expect struct {
	code int
	// says are substrings of stdout+stderr: what went wrong and what to do.
	says []string
	// json are values of the document on stdout (-o json), by their path
	// (jsonValue's).
	json map[string]any
	// usage: the hint to the command's help is shown (for usage errors
	// only); the usage text itself never is.
	usage bool
}

// check asserts everything the user sees against e; secrets are passwords
// besides hostilePW that must not show.
func (e expect) check(t *testing.T, args []string, res cliResult, secrets ...string) {
	t.Helper()
	all := res.Stdout + res.Stderr
	if res.Code != e.code {
		t.Errorf("leasectl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.Code, e.code, res.Stdout, res.Stderr)
	}
	for _, s := range e.says {
		if !strings.Contains(all, s) {
			t.Errorf("leasectl %s: output does not say %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), s, res.Stdout, res.Stderr)
		}
	}
	for path, want := range e.json {
		wantJSONValue(t, res.Stdout, path, want)
	}
	if got := strings.Contains(res.Stderr, "--help' for usage.\n"); got != e.usage {
		t.Errorf("leasectl %s: hint to the help shown %v, want %v\nstderr:\n%s", strings.Join(args, " "), got, e.usage, res.Stderr)
	}
	if strings.Contains(res.Stderr, "Usage:") {
		t.Errorf("leasectl %s: the usage text on stderr, not one line and a hint:\n%s", strings.Join(args, " "), res.Stderr)
	}
	noSecretOrTrace(t, all, secrets...)
}

// noSecretOrTrace fails when out shows a password or a stack trace.
func noSecretOrTrace(t *testing.T, out string, secrets ...string) {
	t.Helper()
	for _, pw := range append([]string{hostilePW, hostileTail}, secrets...) {
		if strings.Contains(out, pw) {
			t.Errorf("a password appears in the output:\n%s", out)
		}
	}
	if m := stackTrace.FindString(out); m != "" {
		t.Errorf("a stack trace or panic (%q) in the output:\n%s", m, out)
	}
}

// runBounded runs leasectl in-process like runCLI, but fails the test when
// it has not returned within hostileBound: a hang, not a slow machine.
func runBounded(t *testing.T, env map[string]string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostileBound)
	defer cancel()
	done := make(chan cliResult, 1)
	go func() { done <- runCLIWith(t, ctx, env, false, "", args...) }()
	select {
	case res := <-done:
		if ctx.Err() != nil {
			t.Fatalf("leasectl %s ran into the %s bound: it hangs\nstderr:\n%s", strings.Join(args, " "), hostileBound, res.Stderr)
		}
		return res
	case <-time.After(hostileBound + 10*time.Second):
		t.Fatalf("leasectl %s did not return within %s, even with its context cancelled", strings.Join(args, " "), hostileBound)
		return cliResult{}
	}
}

// withPassword puts hostilePW into a password-free URL DSN of the lab for
// user.
func withPassword(dsn, user string) string {
	return strings.Replace(dsn, "://"+user+"@", "://"+user+":"+hostilePW+"@", 1)
}

// hostileKeys writes a keys file with two roles of keys no other test uses.
func hostileKeys(t *testing.T) string {
	t.Helper()
	return writeFile(t, "keys.yaml", fmt.Sprintf("roles:\n  poller: %d\n  scheduler: %d\n", hostilePollerKey, hostileSchedulerKey))
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dsnCommands are the commands that connect to the database, as invoked.
// run is not among them: it retries by design (see runKeepsTrying).
var dsnCommands = [][]string{
	{"probe"},
	{"who"},
	{"who", "--all", "-o", "json"},
	{"failover", "poller", "--yes"},
	{"verify"},
}

// peer starts a TCP listener on loopback whose connections are handed to
// serve, and returns its address; it is no PostgreSQL server, which is the
// point.
func peer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// nopriv creates a login role with no privileges and returns its name and a
// DSN (with hostilePW in it) for database db of the lab.
func nopriv(t *testing.T, db string) (string, string) {
	t.Helper()
	const role = "hostile_nopriv"
	pgtest.Login(t, needLab(t), role, hostilePW)
	return role, withPassword(needLab(t).DSN(needLab(t).Primary.Port, role, db), role)
}

// restrictedDatabase creates database name on which PUBLIC lacks privilege
// (CONNECT or TEMPORARY), so that a role without grants of its own lacks it.
func restrictedDatabase(t *testing.T, name, privilege string) {
	t.Helper()
	pgtest.Database(t, needLab(t), name)
	pgtest.Exec(t, pgtest.Conn(t, needLab(t).DirectDSN(), ""), "REVOKE "+privilege+" ON DATABASE "+pgx.Identifier{name}.Sanitize()+" FROM PUBLIC")
}

// TestHostileDSNs runs every command that connects against malformed DSNs,
// unreachable hosts, wrong credentials and peers that are no PostgreSQL
// server, each DSN carrying a password that must never show.
func TestHostileDSNs(t *testing.T) {
	keysFile := hostileKeys(t)
	role, _ := nopriv(t, "postgres")
	restrictedDatabase(t, "hostile_noconnect", "CONNECT")
	silent := peer(t, func(net.Conn) {}) // accepts, then never a word
	hangup := peer(t, func(c net.Conn) { c.Close() })
	httpPeer := peer(t, func(c net.Conn) {
		buf := make([]byte, 512)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
	})
	malformed := func(detail string) expect {
		return expect{code: ExitUsage, says: []string{"malformed DSN", detail, "the DSN came from"}}
	}
	unreachable := func(says ...string) expect { return expect{code: ExitUnavailable, says: says} }
	cases := []struct {
		name string
		dsn  string
		want expect
		// logged is what leasectl run logs while it retries; "" for a DSN
		// that run refuses at once, like every command.
		logged string
	}{
		{"bad port", "postgres://app:" + hostilePW + "@127.0.0.1:notaport/app", malformed("invalid port"), ""},
		{"port out of range", "postgres://app:" + hostilePW + "@127.0.0.1:99999/app", malformed("invalid port"), ""},
		{"unterminated quote", "host='127.0.0.1 user=app password=" + hostilePW, malformed("unterminated quoted string"), ""},
		{"bad URL escape", "postgres://app:" + hostilePW + "%zz@127.0.0.1/app", malformed("invalid percent-encoded token"), ""},
		{"unknown sslmode", "postgres://app:" + hostilePW + "@127.0.0.1/app?sslmode=sometimes", malformed("sslmode is invalid"), ""},
		{"unknown target_session_attrs", "postgres://app:" + hostilePW + "@127.0.0.1/app?target_session_attrs=leader", malformed("unknown target_session_attrs value"), ""},
		{"hosts and ports do not pair", "host=h1,h2,h3 port=1,2 password=" + hostilePW, malformed("could not match 2 port numbers to 3 hosts"), ""},
		{"unterminated IPv6 host", "postgres://app:" + hostilePW + "@[::1/app", malformed(`matching "]"`), ""},
		{"garbage", "::garbage:: password=" + hostilePW, malformed(`a word without "="`), ""},
		{"NUL byte", "host=127.0.0.1\x00 password=" + hostilePW, malformed("NUL byte"), ""},
		{"password with an unquoted space", "host=127.0.0.1 password=" + hostilePW + " " + hostileTail + " port=5432", malformed("must be quoted: password='two words'"), ""},
		{"password with an unescaped &", "postgres://app@127.0.0.1/app?password=" + hostilePW + "&" + hostileTail, malformed(`escape "&" as %26`), ""},

		{"empty host list", "postgres://app:" + hostilePW + "@,/app?port=1", unreachable("connect to ", ".s.PGSQL.1", "no server socket at that path"), "no server socket"},
		{"closed port", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app?sslmode=disable", hostilePW, closedPort(t)),
			unreachable("connection refused", "is the server running? check the host and port in the DSN"), "connection refused"},
		// A name with an empty label: Go's resolver and glibc's both answer
		// "no such host" without sending a query, so nothing leaves the
		// machine, and the error is the one a name that does not exist gets.
		{"unresolvable host", "postgres://app:" + hostilePW + "@no..such.host.invalid:5432/app", unreachable("connect to no..such.host.invalid:5432", "cannot resolve no..such.host.invalid: no such host", "the host name does not resolve: check the DSN"), "no..such.host.invalid"},
		{"wrong password", withPassword(needLab(t).DirectDSN(), needLab(t).User),
			unreachable("password authentication failed", "check the user and password in the DSN, PGPASSWORD or the pgpass file"), "password authentication failed"},
		{"wrong password through PgBouncer", withPassword(needLab(t).PoolerDSN("session"), needLab(t).User),
			unreachable("authentication failed", "check the user and password in the DSN, PGPASSWORD or the pgpass file"), "authentication failed"},
		{"no CONNECT on the database", withPassword(needLab(t).DSN(needLab(t).Primary.Port, role, "hostile_noconnect"), role),
			unreachable(`permission denied for database "hostile_noconnect"`, `GRANT CONNECT ON DATABASE "hostile_noconnect" TO "hostile_nopriv"`), "permission denied for database"},
		{"silent server (TLS first)", "postgres://app:" + hostilePW + "@" + silent + "/app",
			unreachable("connect to "+silent+": timed out", "it accepted the connection but did not complete the login in time", "raise --timeout"), "timed out"},
		{"silent server", "postgres://app:" + hostilePW + "@" + silent + "/app?sslmode=disable",
			unreachable("connect to "+silent+": timed out", "it accepted the connection but did not complete the login in time"), "timed out"},
		{"hangs up at once", "postgres://app:" + hostilePW + "@" + hangup + "/app?sslmode=disable",
			unreachable("connect to "+hangup, "the connection was closed during the handshake"), "the connection was closed during the handshake"},
		{"not PostgreSQL", "postgres://app:" + hostilePW + "@" + httpPeer + "/app?sslmode=disable",
			unreachable("connect to "+httpPeer, "does not speak the PostgreSQL protocol"), "does not speak the PostgreSQL protocol"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The probe says more of a silent server: it accepted the
			// connection and never completed the login.
			want := func(command string) expect {
				if command == "probe" && strings.HasPrefix(tc.name, "silent server") {
					return unreachable("connect to " + silent + ": it accepted the connection but did not complete the login within 1s")
				}
				return tc.want
			}
			for _, command := range dsnCommands {
				args := append([]string{"--timeout", "1s", "--dsn", tc.dsn, "--keys", keysFile}, command...)
				want(command[0]).check(t, args, runBounded(t, nil, args...))
			}
			// The DSN from the environment and as probe's argument.
			args := []string{"--timeout", "1s", "--keys", keysFile, "who"}
			tc.want.check(t, args, runBounded(t, map[string]string{"DATABASE_URL": tc.dsn}, args...))
			args = []string{"--timeout", "1s", "--keys", keysFile, "probe", tc.dsn}
			want("probe").check(t, args, runBounded(t, nil, args...))

			run := []string{"--timeout", "1s", "--dsn", tc.dsn, "--keys", keysFile, "run", "--role", "poller", "--retry-interval", "50ms", "--", "true"}
			if tc.logged == "" {
				tc.want.check(t, run, runBounded(t, nil, run...))
				return
			}
			retrying := "cannot connect; retrying"
			if tc.name == "wrong password" || tc.name == "no CONNECT on the database" {
				// The server refused the login: run backs off.
				retrying = "the server refused the login; backing off"
			}
			runKeepsTrying(t, run, retrying, tc.logged)
		})
	}

	t.Run("pooler DSN of verify", func(t *testing.T) {
		// Malformed: exit 2 before anything is checked. Unreachable: the
		// pooler_rejection check fails (exit 1) and says why.
		args := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysFile, "verify", "--pooler-dsn", "postgres://app:" + hostilePW + "@127.0.0.1:notaport/app"}
		expect{code: ExitUsage, says: []string{"--pooler-dsn: malformed DSN: invalid port"}}.check(t, args, runBounded(t, nil, args...))
		args = []string{"--timeout", "1s", "--dsn", needLab(t).DirectDSN(), "--keys", keysFile, "verify", "--pooler-dsn", "postgres://app:" + hostilePW + "@" + silent + "/app"}
		expect{code: ExitCheckFailed, says: []string{"pooler_rejection", "could not probe it: connect to " + silent + ": it accepted the connection but did not complete the login within 1s"}}.check(t, args, runBounded(t, nil, args...))
	})
}

// runKeepsTrying starts `leasectl run` (args start with the global flags),
// waits until it has logged a failed attempt naming the cause twice, stops
// it the way SIGTERM does (its context ends), and checks that it stopped
// cleanly: exit 0 while standing by (docs/guide/run.md), no password, no trace, and
// the program never ran. It returns what leasectl printed.
func runKeepsTrying(t *testing.T, args []string, logged ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &leasetest.Buffer{}, &leasetest.Buffer{}
	app := &App{IO: &IOStreams{In: strings.NewReader(""), Out: stdout, ErrOut: stderr}, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, app, args) }()
	for _, s := range logged {
		stderr.WaitFor(t, s, 2, hostileBound)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("leasectl run stopped while standing by: exit %d, want 0\nstderr:\n%s", code, stderr)
		}
	case <-time.After(hostileBound):
		t.Fatalf("leasectl run did not stop within %s of its context ending\nstderr:\n%s", hostileBound, stderr)
	}
	if strings.Contains(stderr.String(), "program started") || stdout.String() != "" {
		t.Errorf("the program ran:\n%s", stderr)
	}
	noSecretOrTrace(t, stdout.String()+stderr.String())
	return stdout.String() + stderr.String()
}

// TestHostileNoAnswerAfterConnect: the server (here PgBouncer with a pool of
// one, its only server connection busy in a transaction) accepts the
// connection and then never answers a statement. Every command gives up
// within --timeout: exit 3 saying so; probe refuses the DSN (exit 1), as it
// documents for a contender that gets no server connection.
func TestHostileNoAnswerAfterConnect(t *testing.T) {
	keysFile := hostileKeys(t)
	busy := pgtest.Conn(t, needLab(t).PoolerDSN("tx1"), "hostile-busy")
	pgtest.Exec(t, busy, "BEGIN")
	pgtest.Exec(t, busy, "SELECT 1")
	t.Cleanup(func() { _, _ = busy.Exec(context.Background(), "ROLLBACK") })
	dsn, pw := dsnWithPassword(t, needLab(t).PoolerDSN("tx1"))
	noAnswer := expect{code: ExitUnavailable, says: []string{"no answer within --timeout 1s", "raise --timeout"}}
	for _, command := range [][]string{{"who"}, {"failover", "poller", "--yes"}, {"verify"}} {
		args := append([]string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile}, command...)
		noAnswer.check(t, args, runBounded(t, nil, args...), pw)
	}
	args := []string{"--timeout", "1s", "--keys", keysFile, "probe", dsn}
	expect{code: ExitCheckFailed, says: []string{"REFUSED", "no answer within 1s"}}.check(t, args, runBounded(t, nil, args...), pw)
	runKeepsTrying(t, []string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile, "run", "--role", "poller", "--retry-interval", "50ms", "--", "true"},
		"read server info: timeout")
}

// TestHostileUnprivilegedRole: a role with no grants at all. Reading works
// and says what is hidden and which GRANT reveals it; acting on another
// role's session is refused with exit 3 and the way to get the right; a
// database where it may not create a temp table refuses the probe (and so
// run never leads) with the GRANT that would allow it.
func TestHostileUnprivilegedRole(t *testing.T) {
	keysFile := hostileKeys(t)
	role, dsn := nopriv(t, "postgres")
	leaderConn, _ := leader(t, needLab(t).DirectDSN(), "hostile-leader", hostilePollerKey) // a superuser's session
	pid := strconv.Itoa(int(pgtest.PID(t, leaderConn)))
	global := []string{"--timeout", "5s", "--dsn", dsn, "--keys", keysFile}
	for _, tc := range []struct {
		args []string
		want expect
	}{
		{[]string{"who", "poller"}, expect{code: ExitOK, says: []string{pid, "hostile-leader", "hidden", "GRANT pg_read_all_stats TO \"" + role + "\""}}},
		{[]string{"who", "--check", "poller"}, expect{code: ExitOK, says: []string{"hidden"}}},
		{[]string{"who", "-o", "json", "poller"}, expect{code: ExitOK, json: map[string]any{"hidden": true, "reveal_grant": `GRANT pg_read_all_stats TO "` + role + `"`}}},
		{[]string{"failover", "poller", "--yes", "--force"}, expect{code: ExitUnavailable, says: []string{"permission denied to terminate pid " + pid, "only a superuser can end a superuser's backend"}}},
		{[]string{"verify", "poller"}, expect{code: ExitOK, says: []string{"one_leader", "pass", "staleness unknown"}}},
		{[]string{"verify", "poller", "--failover", "--yes", "--force"}, expect{code: ExitCheckFailed, says: []string{"clean_failover", "nothing done", "only a superuser can end"}}},
		{[]string{"probe"}, expect{code: ExitOK, says: []string{"STABLE", "GRANT pg_read_all_stats TO this role", "GRANT pg_signal_backend TO this role"}}},
	} {
		args := append(append([]string{}, global...), tc.args...)
		tc.want.check(t, args, runBounded(t, nil, args...))
	}
	if !alive(t, pgtest.PID(t, leaderConn)) {
		t.Errorf("the superuser's backend was terminated by a role without the right")
	}
	// Advisory locks need no privilege: run leads and runs the program.
	args := append(append([]string{}, global...), "run", "--key", "1840800009", "--", "sh", "-c", "echo ran as $LEASECTL_KEY")
	expect{code: ExitOK, says: []string{"ran as 1840800009"}}.check(t, args, runBounded(t, nil, args...))

	// The probe creates nothing: a database where the role may not even
	// create a temp table is probed like any other.
	t.Run("no TEMPORARY on the database", func(t *testing.T) {
		restrictedDatabase(t, "hostile_notemp", "TEMPORARY")
		dsn := withPassword(needLab(t).DSN(needLab(t).Primary.Port, role, "hostile_notemp"), role)
		args := []string{"--keys", keysFile, "probe", dsn}
		expect{code: ExitOK, says: []string{"STABLE"}}.check(t, args, runBounded(t, nil, args...))
	})
}

// TestHostileKeysFiles: keys files just over the size limit, with an alias
// bomb, or with thousands of roles, through every command that reads one.
// The first two are refused (exit 2, the rule and what to do) without
// expanding anything; the third is a result. Memory is measured in-process
// and bounded generously: an expanded bomb would take gigabytes.
func TestHostileKeysFiles(t *testing.T) {
	good := hostileKeys(t)
	bomb, err := os.ReadFile(filepath.Join("..", "internal", "keysfile", "testdata", "lint", "YAML_ALIAS", "billion-laughs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var huge strings.Builder
	huge.WriteString("roles:\n")
	for i := 0; huge.Len() <= keys.MaxFileSize; i++ {
		fmt.Fprintf(&huge, "  r%d: %d\n", i, 1840810000+i)
	}
	var many strings.Builder
	many.WriteString("roles:\n")
	roles := 0
	for line := fmt.Sprintf("  r%d: %d\n", roles, 1840810000+roles); many.Len()+len(line) < keys.MaxFileSize; line = fmt.Sprintf("  r%d: %d\n", roles, 1840810000+roles) {
		many.WriteString(line)
		roles++
	}
	if roles < 10000 {
		t.Fatalf("only %d roles fit", roles)
	}
	last := "r" + strconv.Itoa(roles-1)

	dsn, pw := dsnWithPassword(t, needLab(t).DirectDSN()) // a working DSN; its password must not show either
	commands := func(file string) [][]string {
		return [][]string{
			{"keys", "lint", file},
			{"keys", "diff", file, "--base-file", good},
			{"keys", "diff", good, "--base-file", file},
			{"--keys", file, "who"},
			{"--keys", file, "who", "r1"},
			{"--keys", file, "run", "--role", "r1", "--", "true"},
			{"--keys", file, "failover", "r1", "--yes"},
			{"--keys", file, "verify"},
			{"--keys", file, "probe"},
		}
	}
	for _, tc := range []struct {
		name     string
		body     string
		says     []string
		maxAlloc uint64
	}{
		{"just over the size limit", huge.String(), []string{"larger than 262144 bytes"}, 16 << 20},
		{"billion laughs", string(bomb), []string{"anchors and aliases are not allowed in a keys file"}, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, "keys.yaml", tc.body)
			for _, args := range commands(file) {
				args = append([]string{"--dsn", dsn, "--timeout", "5s"}, args...)
				var res cliResult
				n := memtest.Allocated(func() { res = runBounded(t, nil, args...) })
				want := expect{code: ExitUsage, says: append([]string{"is not a valid keys file"}, tc.says...)}
				want.check(t, args, res, pw)
				t.Logf("%s: %.1f MiB allocated", strings.Join(args[4:], " "), float64(n)/(1<<20))
				if n > tc.maxAlloc {
					t.Errorf("leasectl %s allocated %d MiB for a %d-byte file (bound %d MiB)", strings.Join(args, " "), n>>20, len(tc.body), tc.maxAlloc>>20)
				}
			}
		})
	}

	t.Run(fmt.Sprintf("%d roles under the size limit", roles), func(t *testing.T) {
		file := writeFile(t, "keys.yaml", many.String())
		for _, tc := range []struct {
			args []string
			want expect
		}{
			{[]string{"keys", "lint", file}, expect{code: ExitOK, says: []string{fmt.Sprintf("no problems (%d roles, 0 retired keys)", roles)}}},
			{[]string{"keys", "diff", file, "--base-file", file}, expect{code: ExitOK, says: []string{"no role or key changed"}}},
			{[]string{"keys", "diff", good, "--base-file", file}, expect{code: ExitCheckFailed, says: []string{"ROLE_REMOVED", fmt.Sprintf("%d errors", roles)}}},
			{[]string{"--keys", file, "who"}, expect{code: ExitOK, says: []string{last, "FREE"}}},
			{[]string{"--keys", file, "who", "--check", last}, expect{code: ExitCheckFailed, says: []string{"who --check: " + last + " has no holder"}}},
			{[]string{"--keys", file, "failover", last, "--yes"}, expect{code: ExitCheckFailed, says: []string{"nothing to fail over: nobody holds " + last}}},
			{[]string{"--keys", file, "verify", last}, expect{code: ExitCheckFailed, says: []string{"no replica leads " + last}}},
			{[]string{"--keys", file, "run", "--role", last, "--", "sh", "-c", "echo led $LEASECTL_ROLE"}, expect{code: ExitOK, says: []string{"led " + last}}},
		} {
			args := append([]string{"--dsn", dsn, "--timeout", "30s"}, tc.args...)
			var res cliResult
			n := memtest.Allocated(func() { res = runBounded(t, nil, args...) })
			tc.want.check(t, args, res, pw)
			t.Logf("%s: %.1f MiB allocated", strings.Join(tc.args, " "), float64(n)/(1<<20))
			if n > 256<<20 {
				t.Errorf("leasectl %s allocated %d MiB for %d roles", strings.Join(tc.args, " "), n>>20, roles)
			}
		}
	})
}

// TestHostileFlagsAndCommands: an unknown flag on every command, and an
// unknown subcommand under every command that has subcommands, are usage
// errors: exit 2 with the usage, before anything connects or starts.
func TestHostileFlagsAndCommands(t *testing.T) {
	keysFile := hostileKeys(t)
	dsn := "postgres://app:" + hostilePW + "@127.0.0.1:1/app"
	for _, command := range [][]string{
		{}, {"probe"}, {"who"}, {"failover", "poller"}, {"verify"}, {"run"},
		{"keys"}, {"keys", "lint"}, {"keys", "diff"},
		{"lab"}, {"lab", "up"}, {"lab", "down"}, {"lab", "env"}, {"lab", "status"},
		{"completion"}, {"completion", "bash"}, {"help"},
	} {
		for _, flag := range []string{"--no-such-flag", "-Z"} {
			args := append(append([]string{"--dsn", dsn, "--keys", keysFile}, command...), flag)
			if len(command) > 0 && command[0] == "run" {
				args = append(args, "--role", "poller", "--", "true")
			}
			expect{code: ExitUsage, says: []string{"unknown "}, usage: true}.check(t, args, runBounded(t, nil, args...))
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "leasectl"`},
		{[]string{"keys", "bogus"}, `unknown command "bogus" for "leasectl keys"`},
		{[]string{"lab", "bogus"}, `unknown command "bogus" for "leasectl lab"`},
		{[]string{"lab", "status", "bogus"}, `"leasectl lab status" takes no arguments`},
		{[]string{"completion", "bogus"}, `unknown shell "bogus"`},
		{[]string{"completion"}, `"leasectl completion" needs a shell`},
		{[]string{"completion", "bash", "bogus"}, `"leasectl completion bash" takes no arguments, got "bogus"`},
		{[]string{"help", "bogus"}, `unknown help topic "bogus"`},
		{[]string{"keys", "lint", "a.yaml", "b.yaml"}, "takes at most 1 argument,"},
		{[]string{"probe", "dsn-a", "dsn-b"}, "takes at most 1 argument,"},
		{[]string{"failover", "poller", "scheduler"}, "takes at most 1 argument,"},
		{[]string{"run", "--role", "poller"}, "needs a command to run after --"},
		{[]string{"--timeout", "soon", "who"}, `invalid argument "soon" for "--timeout"`},
		{[]string{"--timeout", "-1s", "who"}, "invalid --timeout -1s: it must be positive"},
		{[]string{"-o", "yaml", "who"}, `invalid -o/--output "yaml": use text, wide or json`},
	} {
		args := append([]string{"--dsn", dsn, "--keys", keysFile}, tc.args...)
		expect{code: ExitUsage, says: []string{tc.says}, usage: true}.check(t, args, runBounded(t, nil, args...))
	}
}

// TestHostileKeysAndRoles: KEY and ROLE arguments out of range, empty, or of
// no role.
func TestHostileKeysAndRoles(t *testing.T) {
	keysFile := hostileKeys(t)
	dsn, pw := dsnWithPassword(t, needLab(t).DirectDSN())
	known := "keys.yaml has poller, scheduler"
	for _, tc := range []struct {
		args []string
		want expect
	}{
		{[]string{"who", "--", "-1"}, expect{code: ExitOK, says: []string{"-1 ", "FREE"}}},
		{[]string{"who", "-1"}, expect{code: ExitUsage, says: []string{"a negative key looks like a flag; put keys after --: leasectl who -- -1"}, usage: true}},
		{[]string{"who", "--", "-9223372036854775808", "9223372036854775807", "-2147483648,2147483647"}, expect{code: ExitOK, says: []string{"-9223372036854775808", "9223372036854775807", "-2147483648,2147483647"}}},
		{[]string{"who", "99999999999999999999"}, expect{code: ExitUsage, says: []string{`invalid KEY: "99999999999999999999" is outside the range of a 64-bit key`}, usage: true}},
		{[]string{"who", "--", "-99999999999999999999"}, expect{code: ExitUsage, says: []string{"is outside the range of a 64-bit key"}, usage: true}},
		{[]string{"who", "1,2,3"}, expect{code: ExitUsage, says: []string{`"1,2,3" is not a two-int4 key`}, usage: true}},
		{[]string{"who", "1,2147483648"}, expect{code: ExitUsage, says: []string{"both in the int4 range"}, usage: true}},
		{[]string{"who", ""}, expect{code: ExitUsage, says: []string{`unknown role ""`, known}}},
		{[]string{"who", "nosuch"}, expect{code: ExitUsage, says: []string{`unknown role "nosuch"`, known}}},
		{[]string{"failover", "--key", "99999999999999999999", "--yes"}, expect{code: ExitUsage, says: []string{`invalid argument "99999999999999999999" for "--key": "99999999999999999999" is outside the range of a 64-bit key`}, usage: true}},
		{[]string{"failover", "--key", "", "--yes"}, expect{code: ExitUsage, says: []string{`invalid argument "" for "--key": "" is not a key`}, usage: true}},
		{[]string{"failover", "99999999999999999999", "--yes"}, expect{code: ExitUsage, says: []string{"is not a role of", "is outside the range of a 64-bit key"}, usage: true}},
		{[]string{"failover", "12", "--yes"}, expect{code: ExitUsage, says: []string{"to fail over a bare key, use --key 12"}, usage: true}},
		{[]string{"failover", "", "--yes"}, expect{code: ExitUsage, says: []string{"name the ROLE to fail over"}, usage: true}},
		{[]string{"failover", "nosuch", "--yes"}, expect{code: ExitUsage, says: []string{`unknown role "nosuch"`, known}}},
		{[]string{"verify", ""}, expect{code: ExitUsage, says: []string{`unknown role ""`, known}}},
		{[]string{"verify", "nosuch"}, expect{code: ExitUsage, says: []string{`unknown role "nosuch"`, known}}},
		{[]string{"run", "--role", "", "--", "true"}, expect{code: ExitUsage, says: []string{"give exactly one of --role ROLE"}, usage: true}},
		{[]string{"run", "--role", "nosuch", "--", "true"}, expect{code: ExitUsage, says: []string{`unknown role "nosuch"`, known, "(or give a bare key with --key N)"}}},
		{[]string{"run", "--role", "poller", "--role", "scheduler", "--", "true"}, expect{code: ExitUsage, says: []string{`invalid argument "scheduler" for "--role": given twice ("poller", then "scheduler")`, "give --procfile"}, usage: true}},
		{[]string{"run", "--key", "7", "--key", "8", "--", "true"}, expect{code: ExitUsage, says: []string{`invalid argument "8" for "--key": given twice (7, then 8)`}, usage: true}},
		{[]string{"run", "--procfile", "a", "--procfile", "b"}, expect{code: ExitUsage, says: []string{`for "--procfile": given twice`}, usage: true}},
		{[]string{"run", "--key", "99999999999999999999", "--", "true"}, expect{code: ExitUsage, says: []string{`invalid argument "99999999999999999999" for "--key"`}, usage: true}},
		{[]string{"probe", "--probe-key", "0"}, expect{code: ExitUsage, says: []string{"invalid --probe-key 0"}, usage: true}},
		{[]string{"probe", "--probe-key", strconv.Itoa(hostilePollerKey)}, expect{code: ExitUsage, says: []string{`is the key of role "poller"`, "pass another --probe-key"}, usage: true}},
	} {
		args := append([]string{"--dsn", dsn, "--keys", keysFile}, tc.args...)
		tc.want.check(t, args, runBounded(t, nil, args...), pw)
	}
}

// TestHostileFilesAndDirs: paths that are not what they should be, for keys
// and lab.
func TestHostileFilesAndDirs(t *testing.T) {
	good := hostileKeys(t)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt")
	if err := os.MkdirAll(corrupt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, "lab.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want expect
	}{
		{[]string{"keys", "lint", dir}, expect{code: ExitUsage, says: []string{"cannot read the file: is a directory"}}},
		{[]string{"keys", "lint", "/dev/zero"}, expect{code: ExitUsage, says: []string{"larger than 262144 bytes"}}},
		{[]string{"keys", "lint", "/dev/null"}, expect{code: ExitUsage, says: []string{"the file is empty"}}},
		{[]string{"keys", "lint", filepath.Join(dir, "missing.yaml")}, expect{code: ExitUsage, says: []string{"not found"}}},
		{[]string{"keys", "diff", good, "--base-file", filepath.Join(dir, "missing.yaml")}, expect{code: ExitUsage, says: []string{"--base-file " + filepath.Join(dir, "missing.yaml") + " not found"}}},
		{[]string{"keys", "diff", good, "--base-file", "/dev/zero"}, expect{code: ExitUsage, says: []string{"larger than 262144 bytes"}}},
		{[]string{"--keys", dir, "who"}, expect{code: ExitUsage, says: []string{"is a directory"}}},
		{[]string{"lab", "status", "--dir", corrupt}, expect{code: ExitUsage, says: []string{"is not a lab's state file", "leasectl lab up"}}},
		{[]string{"lab", "env", "--dir", corrupt}, expect{code: ExitUsage, says: []string{"is not a lab's state file"}}},
		{[]string{"lab", "down", "--dir", corrupt}, expect{code: ExitUsage, says: []string{"is not a lab's state file"}}},
		{[]string{"lab", "status", "--dir", good}, expect{code: ExitUsage, says: []string{"no lab here", "leasectl lab up"}}},
		{[]string{"lab", "down", "--dir", filepath.Join(dir, "none")}, expect{code: ExitOK, says: []string{"no lab in " + filepath.Join(dir, "none") + ": nothing to stop"}}},
		{[]string{"lab", "up", "--dir", filepath.Join(good, "sub")}, expect{code: ExitUsage, says: []string{"cannot use --dir", "not a directory", "pass a directory you can write to"}}},
		{[]string{"lab", "up", "--pooler", "x=transaction:0"}, expect{code: ExitUsage, says: []string{"SIZE must be a positive integer"}, usage: true}},
	} {
		args := append([]string{"--dsn", "postgres://app:" + hostilePW + "@127.0.0.1:1/app"}, tc.args...)
		tc.want.check(t, args, runBounded(t, nil, args...))
	}
}

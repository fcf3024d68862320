package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// Keys of the failover and verify tests, used by no other test.
const (
	foPollerKey    = 1840200001
	foSchedulerKey = 1840200002
	foReconcileKey = 1840200003
)

// foKeys writes a keys file with the failover tests' roles.
func foKeys(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	body := fmt.Sprintf("roles:\n  poller: %d\n  scheduler: %d\n  reconciler: %d\n", foPollerKey, foSchedulerKey, foReconcileKey)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// failover runs `leasectl --dsn DIRECT --keys KEYS failover ARGS...` with no
// terminal.
func failover(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover"}, args...)...)
}

// leader opens a connection named app that holds key until the test ends
// (or failover terminates it) and returns it with its backend pid.
func leader(t *testing.T, dsn, app string, key int64) (*pgx.Conn, int32) {
	t.Helper()
	conn := pgtest.Conn(t, dsn, app)
	hold(t, conn, key)
	return conn, pgtest.PID(t, conn)
}

// standBy opens a connection named app that polls for key every 20 ms.
func standBy(t *testing.T, app string, key int64) (int32, <-chan struct{}) {
	t.Helper()
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), app)
	pid := pgtest.PID(t, conn)
	// Registered first, so it runs after the polling has stopped.
	t.Cleanup(func() { _, _ = locks.Unlock(context.Background(), conn, key) })
	return pid, pgtest.StandBy(t, conn, key, 20*time.Millisecond)
}

// holders are the pids that hold key, as the lab's primary says.
func holders(t *testing.T, key int64) []uint32 {
	t.Helper()
	_, hs, err := locks.KeyHolders(context.Background(), pgtest.Conn(t, needLab(t).DirectDSN(), "observer"), key)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func alive(t *testing.T, pid int32) bool {
	t.Helper()
	return pgtest.Alive(t, pgtest.Conn(t, needLab(t).DirectDSN(), "observer"), pid)
}

func itoa(pid int32) string { return strconv.Itoa(int(pid)) }

func TestFailoverMovesTheLeaseToTheStandBy(t *testing.T) {
	withTermRecord(t) // plain stand-bys, which begin no term and lead by holding the key
	_, oldPID := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	bystander := pgtest.Conn(t, needLab(t).DirectDSN(), "bystander")
	newPID, _ := standBy(t, "poller-b", foPollerKey)

	res := failover(t, "poller", "--yes", "--force")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", strconv.Itoa(foPollerKey), "HELD", itoa(oldPID), needLab(t).User, "poller-a")
	for _, want := range []string{
		"terminated pid " + itoa(oldPID) + ": its backend is gone",
		"pid " + itoa(newPID) + " took over poller within ",
		"application poller-b, client 127.0.0.1:",
		"program may still be stopping",
		"stop fence",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if alive(t, oldPID) {
		t.Errorf("the old holder's backend %d is still there", oldPID)
	}
	if hs := holders(t, foPollerKey); len(hs) != 1 || int32(hs[0]) != newPID {
		t.Errorf("holders after failover: %v, want the stand-by %d", hs, newPID)
	}
	if !alive(t, pgtest.PID(t, bystander)) {
		t.Errorf("a bystander was terminated")
	}

	// Again, by key and with -o json: the stand-by is now the old holder.
	nextPID, _ := standBy(t, "poller-c", foPollerKey)
	js := failover(t, "--key", strconv.Itoa(foPollerKey), "--yes", "--force", "-o", "json")
	if js.Code != 0 {
		t.Fatalf("-o json: exit %d\n%s%s", js.Code, js.Stdout, js.Stderr)
	}
	checkJSONDoc(t, js.Stdout, js.Code, "failover")
	var doc failoverCmdJSON
	if err := json.Unmarshal([]byte(js.Stdout), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, js.Stdout)
	}
	if doc.Role == nil || *doc.Role != "poller" || doc.Key != strconv.Itoa(foPollerKey) || doc.OldHolder.PID == nil || *doc.OldHolder.PID != newPID ||
		!doc.OldGone || !doc.TookOver || doc.NewHolder == nil || *doc.NewHolder.PID != nextPID || doc.NewHolder.ApplicationName != "poller-c" ||
		doc.TakeoverMS == nil || *doc.TakeoverMS <= 0 || doc.TakeoverClock == nil || doc.ViaProxy || doc.Server.Port != needLab(t).Primary.Port ||
		doc.Path != "terminate" || doc.Resign != nil || doc.TerminateMS == nil {
		t.Errorf("JSON: %s", js.Stdout)
	}
	for _, field := range []string{`"path"`, `"resign"`, `"old_holder"`, `"new_holder"`, `"takeover_ms"`, `"takeover_clock"`, `"terminate_ms"`, `"old_gone"`, `"via_proxy"`, `"released_before_signal"`} {
		if !strings.Contains(js.Stdout, field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
}

func TestFailoverWithoutHolder(t *testing.T) {
	res := failover(t, "scheduler", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "nothing to fail over") || !strings.Contains(res.Stderr, "scheduler") {
		t.Errorf("exit %d, stderr %q; want 1 and nothing to fail over", res.Code, res.Stderr)
	}
}

func TestFailoverWithoutYesOnNonTerminalTerminatesNothing(t *testing.T) {
	_, pid := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	standBy(t, "poller-b", foPollerKey)
	res := failover(t, "poller")
	if res.Code != ExitUsage {
		t.Fatalf("exit %d, want 2\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	row(t, res.Stdout, "poller", "HELD", itoa(pid), "poller-a")
	if !strings.Contains(res.Stdout, "Would ask pid "+itoa(pid)) || !strings.Contains(res.Stdout, "to step down") || !strings.Contains(res.Stdout, "Nothing was done") {
		t.Errorf("does not say what it would do:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stderr, "leasectl failover poller --yes") || strings.Contains(res.Stderr, "for usage.") {
		t.Errorf("stderr does not say how to confirm (or prints usage): %q", res.Stderr)
	}
	if hs := holders(t, foPollerKey); len(hs) != 1 || int32(hs[0]) != pid {
		t.Errorf("holders %v, want %d untouched", hs, pid)
	}
}

func TestFailoverAsksOnATerminal(t *testing.T) {
	withTermRecord(t) // plain stand-bys, which begin no term and lead by holding the key
	_, pid := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	standByPID, _ := standBy(t, "poller-b", foPollerKey)
	args := []string{"--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "poller", "--force"}

	for _, no := range []string{"n\n", "\n", "yess\n", ""} {
		res := runCLIWith(t, context.Background(), nil, true, no, args...)
		if res.Code != ExitCheckFailed || !strings.Contains(res.Stdout, "Terminate pid "+itoa(pid)) || !strings.Contains(res.Stdout, "[y/N]") || !strings.Contains(res.Stderr, "nothing was done") {
			t.Errorf("answer %q: exit %d\n%s%s", no, res.Code, res.Stdout, res.Stderr)
		}
		if !alive(t, pid) {
			t.Fatalf("answer %q terminated the holder", no)
		}
	}
	res := runCLIWith(t, context.Background(), nil, true, "y\n", args...)
	if res.Code != 0 || !strings.Contains(res.Stdout, "pid "+itoa(standByPID)+" took over poller") {
		t.Fatalf("answer y: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if alive(t, pid) {
		t.Errorf("answer y: the holder %d is still there", pid)
	}
}

// promptWriter collects stdout and runs onPrompt once, when the
// confirmation question is written: before failover reads the answer.
type promptWriter struct {
	bytes.Buffer
	onPrompt func()
}

func (w *promptWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("[y/N]")) && w.onPrompt != nil {
		w.onPrompt()
		w.onPrompt = nil
	}
	return w.Buffer.Write(p)
}

// TestFailoverTerminatesNothingWhenTheHolderChanged replaces the holder
// while failover waits for the answer: the key now has another holder, and
// the statement that terminates must notice.
func TestFailoverTerminatesNothingWhenTheHolderChanged(t *testing.T) {
	ctx := context.Background()
	first, firstPID := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	second := pgtest.Conn(t, needLab(t).DirectDSN(), "poller-b")
	secondPID := pgtest.PID(t, second)
	out := &promptWriter{onPrompt: func() {
		if _, err := locks.Unlock(ctx, first, foPollerKey); err != nil {
			t.Error(err)
		}
		hold(t, second, foPollerKey)
	}}
	var errOut bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader("y\n"), Out: out, ErrOut: &errOut, InTTY: true, OutTTY: true},
		Getenv: func(string) string { return "" },
	}
	code := Run(ctx, app, []string{"--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "poller", "--force"})
	if code != ExitCheckFailed || !strings.Contains(errOut.String(), "pid "+itoa(firstPID)+" no longer holds") ||
		!strings.Contains(errOut.String(), "nothing was terminated") {
		t.Fatalf("exit %d, stderr %q; want 1 and the holder changed", code, errOut.String())
	}
	if !alive(t, firstPID) || !alive(t, secondPID) {
		t.Errorf("a backend was terminated: first alive %v, second alive %v", alive(t, firstPID), alive(t, secondPID))
	}
	if hs := holders(t, foPollerKey); len(hs) != 1 || int32(hs[0]) != secondPID {
		t.Errorf("holders %v, want the new holder %d", hs, secondPID)
	}
}

// TestFailoverNeedsPermission: a role without pg_signal_backend may not end
// another role's backend; the error names the grant, and the DSN's
// password appears nowhere.
func TestFailoverNeedsPermission(t *testing.T) {
	const password = "fo-op-s3cret-pw"
	pgtest.Login(t, needLab(t), "fo_cmd_operator", password)
	holderDSN := pgtest.Login(t, needLab(t), "fo_cmd_holder", "fo-holder-pw")
	_, pid := leader(t, holderDSN, "poller-a", foPollerKey)
	dsn := fmt.Sprintf("postgres://fo_cmd_operator:%s@127.0.0.1:%d/postgres?sslmode=disable", url.QueryEscape(password), needLab(t).Primary.Port)

	res := runCLI(t, nil, "--dsn", dsn, "--keys", foKeys(t), "failover", "poller", "--yes", "--force")
	if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, `GRANT pg_signal_backend TO "fo_cmd_operator"`) {
		t.Fatalf("exit %d, stderr %q; want 3 with the grant", res.Code, res.Stderr)
	}
	if strings.Contains(res.Stdout+res.Stderr, password) {
		t.Errorf("the password appears in the output")
	}
	// The holder's client and start are hidden from this role, and say so.
	row(t, res.Stdout, "poller", "HELD", itoa(pid), "fo_cmd_holder", "poller-a", "hidden", "hidden")
	if !alive(t, pid) {
		t.Errorf("the holder was terminated despite the error")
	}
}

func TestFailoverGivesUpWithoutStandBy(t *testing.T) {
	_, pid := leader(t, needLab(t).DirectDSN(), "lonely", foPollerKey)
	res := failover(t, "poller", "--yes", "--force", "--wait", "300ms")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "no stand-by took over") {
		t.Fatalf("exit %d, stderr %q; want 1, no stand-by took over", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "terminated pid "+itoa(pid)) || !strings.Contains(res.Stdout, "no stand-by took over poller within 300ms") {
		t.Errorf("output:\n%s", res.Stdout)
	}
	if alive(t, pid) {
		t.Errorf("the holder %d is still there", pid)
	}
	js := failover(t, "poller", "--yes", "--force", "-o", "json")
	if js.Code != ExitCheckFailed || js.Stdout != "" {
		t.Errorf("nothing held: exit %d, stdout %q; want 1 and no document", js.Code, js.Stdout)
	}
	// In JSON the document says so with ok false.
	leader(t, needLab(t).DirectDSN(), "lonely", foPollerKey)
	js = failover(t, "poller", "--yes", "--force", "--wait", "300ms", "-o", "json")
	checkJSONDoc(t, js.Stdout, js.Code, "failover")
	if took, _ := jsonValue(t, js.Stdout, "took_over"); js.Code != ExitCheckFailed || took != false {
		t.Errorf("no stand-by, -o json: exit %d\n%s%s", js.Code, js.Stdout, js.Stderr)
	}
}

func TestFailoverRefusesAStandbyServer(t *testing.T) {
	conn := pgtest.Conn(t, needLab(t).StandbyDSN(), "on-the-standby")
	hold(t, conn, foPollerKey)
	res := runCLI(t, nil, "--dsn", needLab(t).StandbyDSN(), "--keys", foKeys(t), "failover", "poller", "--yes")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "standby") || !strings.Contains(res.Stderr, "fences nothing on the primary") {
		t.Errorf("exit %d, stderr %q; want 2, refusing a standby", res.Code, res.Stderr)
	}
	vres := runCLI(t, nil, "--dsn", needLab(t).StandbyDSN(), "--keys", foKeys(t), "verify", "poller", "--failover", "--yes")
	if vres.Code != ExitUsage || !strings.Contains(vres.Stderr, "standby") {
		t.Errorf("verify on a standby: exit %d, stderr %q; want 2", vres.Code, vres.Stderr)
	}
	if err := conn.Ping(context.Background()); err != nil {
		t.Errorf("the standby's holder was terminated: %v", err)
	}
}

// TestFailoverThroughPoolers: leasectl through a transaction pooler says
// that it ends a pooler's server connection; the holder here reaches the
// server through a session-mode pooler, which closes the client's
// connection with its server connection. Through the pool of one that
// holds a stranded lock, leasectl's own statements run on the holder:
// refused.
func TestFailoverThroughPoolers(t *testing.T) {
	withTermRecord(t) // plain stand-bys, which begin no term and lead by holding the key
	ctx := context.Background()
	client, _ := leader(t, needLab(t).PoolerDSN("session"), "pooled-worker", foPollerKey)
	standByPID, _ := standBy(t, "poller-b", foPollerKey)
	res := runCLI(t, nil, "--dsn", needLab(t).PoolerDSN("transaction"), "--keys", foKeys(t), "failover", "poller", "--yes", "--force")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"pooler's server connections", "pooler's server connection pid", "pid " + itoa(standByPID) + " took over poller"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if err := client.Ping(ctx); err == nil {
		t.Errorf("the session pooler kept the worker's client connection open")
	}

	const key = foSchedulerKey
	pgtest.Strand(t, needLab(t), "tx1", key)
	before := holders(t, key)
	res = runCLI(t, nil, "--dsn", needLab(t).PoolerDSN("tx1"), "--keys", foKeys(t), "failover", "scheduler", "--yes")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "connect to the server directly") {
		t.Errorf("through the pooler that holds it: exit %d, stderr %q; want 2", res.Code, res.Stderr)
	}
	if after := holders(t, key); len(before) != 1 || len(after) != 1 || after[0] != before[0] {
		t.Errorf("holders before %v, after %v; want the stranded holder untouched", before, after)
	}
}

func TestFailoverUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "name the ROLE"},
		{[]string{"poller", "--key", "5"}, "not both"},
		{[]string{"nosuch"}, `unknown role "nosuch"`},
		{[]string{"1840200001"}, "use --key 1840200001"},
		{[]string{"--key", "x"}, `invalid argument "x" for "--key"`},
		{[]string{"poller", "--wait", "0s"}, "invalid --wait"},
		{[]string{"a", "b"}, "at most 1"},
	} {
		// Each is refused before failover connects: the DSN points nowhere.
		res := runCLI(t, nil, append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "--keys", foKeys(t), "failover"}, tc.args...)...)
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, tc.want) {
			t.Errorf("failover %q: exit %d, stderr %q; want 2 and %q", tc.args, res.Code, res.Stderr, tc.want)
		}
	}
	// A bare key needs no keys file.
	res := runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "failover", "--key", "-1840200009", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "nobody holds key -1840200009") {
		t.Errorf("--key without keys file: exit %d, stderr %q", res.Code, res.Stderr)
	}
	// Keys in hex, as keys.yaml and every other key flag take them.
	res = runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "failover", "--key", "0x6db1f0a9", "--yes")
	if res.Code != ExitCheckFailed || !strings.Contains(res.Stderr, "nobody holds key 1840378025") {
		t.Errorf("--key in hex: exit %d, stderr %q", res.Code, res.Stderr)
	}
	comp := runCLI(t, nil, "__complete", "failover", "--keys", "../keys.yaml", "")
	if !strings.Contains(comp.Stdout, "poller\t") {
		t.Errorf("ROLE completion:\n%s", comp.Stdout)
	}
	if comp := runCLI(t, nil, "__complete", "failover", "--keys", "../keys.yaml", "poller", ""); strings.Contains(comp.Stdout, "scheduler") {
		t.Errorf("a second ROLE is offered:\n%s", comp.Stdout)
	}
}

// TestFailoverAsksTheLeaderToStepDown: with two `leasectl run` replicas of
// one role, failover asks the leader to step down; it answers, stops its
// program (which takes 300 ms), releases the key, and the stand-by takes
// over, starting its program only after the old one exited. Nothing is
// terminated.
func TestFailoverAsksTheLeaderToStepDown(t *testing.T) {
	f := newRunFixture(t, "poller", 9200101)
	env := runEnv(f, needLab(t).DirectDSN())
	args := append([]string{"--role", "poller", "--retry-interval", "200ms", "-o", "json", "--"}, f.witnessArgs("-stop-delay", "300ms")...)
	first := startRun(t, env, args...)
	lead := f.next(leasetest.Start)
	second := startRun(t, env, args...)
	second.stderr.WaitFor(t, `"state":"standing_by"`, 1, hang)
	oldBackend, _ := strconv.Atoi(lead.BackendPID)

	res := runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "--keys", f.keys, "failover", "poller", "--yes", "-o", "json")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s\nleader:\n%s\nstand-by:\n%s", res.Code, res.Stdout, res.Stderr, first.stderr, second.stderr)
	}
	checkJSONDoc(t, res.Stdout, res.Code, "failover")
	var doc failoverCmdJSON
	if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	if doc.Path != "graceful" || doc.Resign == nil || !doc.Resign.Answered || !doc.Resign.Released || doc.Resign.Fallback != nil ||
		doc.TerminateMS != nil || doc.OldGone || !doc.TookOver || doc.NewHolder == nil || doc.OldHolder.PID == nil || int(*doc.OldHolder.PID) != oldBackend {
		t.Errorf("JSON: %s", res.Stdout)
	}
	term := f.next(leasetest.Term)
	exit := f.next(leasetest.Exit)
	next := f.next(leasetest.Start)
	if term.PID != lead.PID || exit.PID != lead.PID || next.PID == lead.PID {
		t.Errorf("events: term %+v, exit %+v, start %+v; want the old program stopped, then a new one", term, exit, next)
	}
	if next.BackendPID == lead.BackendPID || doc.NewHolder.PID == nil || strconv.Itoa(int(*doc.NewHolder.PID)) != next.BackendPID {
		t.Errorf("the new program runs under backend %s, the new holder is %v", next.BackendPID, doc.NewHolder.PID)
	}
	if !alive(t, int32(oldBackend)) {
		t.Errorf("the old leader's backend %d was terminated", oldBackend)
	}
	checkJSONLog(t, first.stderr.String())
	for _, want := range []string{`"msg":"asked to step down (leasectl failover): stopping work, then releasing the key"`, `"msg":"stepped down on request; standing by again"`} {
		if !strings.Contains(first.stderr.String(), want) {
			t.Errorf("the old leader's log lacks %s:\n%s", want, first.stderr)
		}
	}
	// The old leader stands by again; the text output of the next failover
	// says how it went.
	first.stderr.WaitFor(t, `"state":"standing_by"`, 2, hang)
	res = runCLI(t, nil, "--dsn", needLab(t).DirectDSN(), "--keys", f.keys, "failover", "poller", "--yes")
	if res.Code != 0 || !strings.Contains(res.Stdout, "stepped down on request: it answered in") || !strings.Contains(res.Stdout, "of the request") {
		t.Errorf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	f.next(leasetest.Start)
}

// TestFailoverTerminatesALeaderThatDoesNotAnswer: a holder that does not
// listen for the request (not a lease of leasectl's) is terminated once
// --timeout has passed.
func TestFailoverTerminatesALeaderThatDoesNotAnswer(t *testing.T) {
	withTermRecord(t) // plain stand-bys, which begin no term and lead by holding the key
	_, pid := leader(t, needLab(t).DirectDSN(), "old-worker", foPollerKey)
	standByPID, _ := standBy(t, "poller-b", foPollerKey)
	res := runCLI(t, nil, "--timeout", "1s", "--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "poller", "--yes")
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{
		"asked pid " + itoa(pid) + " to step down, but the leader did not answer the request to step down within 1s",
		"terminated pid " + itoa(pid),
		"pid " + itoa(standByPID) + " took over poller",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	if alive(t, pid) {
		t.Errorf("the holder %d is still there", pid)
	}
}

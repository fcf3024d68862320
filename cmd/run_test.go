package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/term"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// hang bounds every wait of these tests: reaching it means something hangs,
// it is not a timing assertion.
const hang = 90 * time.Second

var (
	runBinOnce              sync.Once
	leasectlBin, witnessBin string
	runBinErr               error
)

// runBinaries builds leasectl and the witness once, into the lab's directory
// (removed with the lab; its Stop also kills anything still running from it).
func runBinaries(t *testing.T) (leasectl, witness string) {
	t.Helper()
	runBinOnce.Do(func() {
		leasectlBin, witnessBin, runBinErr = leasetest.BuildAll(filepath.Join(needLab(t).Dir, "run-bin"))
	})
	if runBinErr != nil {
		t.Fatal(runBinErr)
	}
	return leasectlBin, witnessBin
}

// runFixture is one test's keys file, witness lock and event listener.
type runFixture struct {
	t        *testing.T
	key      int64
	dir      string
	keys     string
	lock     string
	events   *leasetest.Listener
	pending  []leasetest.Event // received, not yet asked for
	leasectl string
	witness  string
}

func newRunFixture(t *testing.T, role string, key int64) *runFixture {
	t.Helper()
	l, w := runBinaries(t)
	dir := t.TempDir()
	f := &runFixture{t: t, key: key, dir: dir, keys: filepath.Join(dir, "keys.yaml"), lock: filepath.Join(dir, "witness.lock"), leasectl: l, witness: w}
	if err := os.WriteFile(f.keys, fmt.Appendf(nil, "roles:\n  %s: %d\n", role, key), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.events, err = leasetest.Listen(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.events.Close() })
	return f
}

// witnessArgs is the command line of a witness child after --.
func (f *runFixture) witnessArgs(extra ...string) []string {
	return append([]string{f.witness, "-lock", f.lock, "-notify", f.events.Path}, extra...)
}

// next returns the oldest witness event of kind, failing on an overlap;
// events of other kinds stay queued for later calls.
func (f *runFixture) next(kind string) leasetest.Event {
	f.t.Helper()
	for i, ev := range f.pending {
		if ev.Kind == kind {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			return ev
		}
	}
	deadline := time.Now().Add(hang)
	for {
		ev, ok := f.events.Next(time.Until(deadline))
		if !ok {
			f.t.Fatalf("no %q event from a witness", kind)
		}
		if ev.Kind == leasetest.Overlap || ev.Kind == leasetest.Failed {
			f.t.Fatalf("witness %d: %s %s: two children ran at once", ev.PID, ev.Kind, ev.Detail)
		}
		if ev.Kind == kind {
			return ev
		}
		f.pending = append(f.pending, ev)
	}
}

// count drains the events received so far into the pending ones and
// returns how many pending events are of kind from pid.
func (f *runFixture) count(kind string, pid int) int {
	for {
		select {
		case ev := <-f.events.Events:
			f.pending = append(f.pending, ev)
			continue
		default:
		}
		break
	}
	n := 0
	for _, ev := range f.pending {
		if ev.Kind == kind && ev.PID == pid {
			n++
		}
	}
	return n
}

// noOverlap drains the events received so far and fails on an overlap.
func (f *runFixture) noOverlap() {
	f.t.Helper()
	for {
		select {
		case ev := <-f.events.Events:
			if ev.Kind == leasetest.Overlap || ev.Kind == leasetest.Failed {
				f.t.Fatalf("witness %d: %s %s: two children ran at once", ev.PID, ev.Kind, ev.Detail)
			}
		default:
			return
		}
	}
}

// liveRun is leasectl run executing in-process.
type liveRun struct {
	stderr *leasetest.Buffer
	stdout *leasetest.Buffer
	done   chan struct{}
	code   int
	cancel context.CancelFunc
}

func startRun(t *testing.T, env map[string]string, args ...string) *liveRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &liveRun{stderr: &leasetest.Buffer{}, stdout: &leasetest.Buffer{}, done: make(chan struct{}), cancel: cancel}
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(""), Out: r.stdout, ErrOut: r.stderr},
		Getenv: func(k string) string { return env[k] },
	}
	go func() {
		defer close(r.done)
		r.code = Run(ctx, app, append([]string{"run"}, args...))
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// stop cancels the run's context and returns its exit code.
func (r *liveRun) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(hang):
		t.Fatalf("leasectl run did not return after its context was cancelled; stderr:\n%s", r.stderr)
	}
	return r.code
}

func runEnv(f *runFixture, dsn string) map[string]string {
	return map[string]string{"LEASECTL_DSN": dsn, "LEASECTL_KEYS": f.keys}
}

// terminateBackend ends the lease session of f's role (backend pid) the way
// leasectl failover does.
func (f *runFixture) terminateBackend(pid string) {
	t := f.t
	t.Helper()
	n, err := strconv.ParseUint(pid, 10, 32)
	if err != nil {
		t.Fatalf("backend pid %q: %v", pid, err)
	}
	if err := leasetest.Terminate(context.Background(), pgtest.Conn(t, needLab(t).DirectDSN(), ""), f.key, uint32(n)); err != nil {
		t.Fatal(err)
	}
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// kill sends SIGKILL to pid, which need not be a child of this process.
func kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// ---- in-process ----

func TestRunUsageAndInputErrors(t *testing.T) {
	f := newRunFixture(t, "poller", 9200001)
	env := runEnv(f, needLab(t).DirectDSN())
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"run", "--role", "poller"}, "needs a command to run"},
		{"role and key", []string{"run", "--role", "poller", "--key", "5", "--", "true"}, "exactly one of --role"},
		{"neither", []string{"run", "--", "true"}, "exactly one of --role"},
		{"log format", []string{"run", "--role", "poller", "-o", "xml", "--", "true"}, `invalid -o/--output "xml"`},
		{"deprecated log format", []string{"run", "--role", "poller", "--log-format", "xml", "--", "true"}, `invalid -o/--output "xml"`},
		{"grace", []string{"run", "--role", "poller", "--grace", "0s", "--", "true"}, "invalid --grace"},
		{"unknown role", []string{"run", "--role", "sweeper", "--", "true"}, `unknown role "sweeper": ` + f.keys + " has poller (or give a bare key with --key N)"},
		{"numeric role", []string{"run", "--role", "9200001", "--", "true"}, `"9200001" is not a role of ` + f.keys + ": to hold a bare key, use --key 9200001"},
		{"missing program", []string{"run", "--role", "poller", "--", "/nonexistent/worker"}, `cannot run "/nonexistent/worker"`},
		{"probe key", []string{"run", "--key", strconv.FormatInt(locks.DefaultProbeKey, 10), "--", "true"}, "probe's key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, env, tc.args...)
			if res.Code != ExitUsage || !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", res.Code, res.Stderr, tc.want)
			}
		})
	}
	t.Run("bad DSN hides its password", func(t *testing.T) {
		res := runCLI(t, map[string]string{"LEASECTL_KEYS": f.keys}, "run", "--dsn", "postgres://u:hunter2secret@h:notaport/db", "--role", "poller", "--", "true")
		if res.Code != ExitUsage || strings.Contains(res.Stderr, "hunter2secret") {
			t.Errorf("exit %d, stderr:\n%s", res.Code, res.Stderr)
		}
	})
}

// TestRunPassesTheProgramsStatusAndEnvironment: the program runs under the
// lease with LEASECTL_* set and the lease socket as fd 3; its exit status is
// leasectl's; afterwards the key is free.
func TestRunPassesTheProgramsStatusAndEnvironment(t *testing.T) {
	const key = 9200002
	f := newRunFixture(t, "poller", key)
	for _, status := range []int{0, 3, 42} {
		res := runCLI(t, runEnv(f, needLab(t).DirectDSN()), append([]string{"run", "--role", "poller", "--"}, f.witnessArgs("-exit", strconv.Itoa(status))...)...)
		if res.Code != status {
			t.Errorf("program exit %d: leasectl exit %d; stderr:\n%s", status, res.Code, res.Stderr)
		}
		if strings.Contains(res.Stderr, "error:") {
			t.Errorf("an exit status of the program is not leasectl's error:\n%s", res.Stderr)
		}
		ev := f.next(leasetest.Start)
		if ev.Role != "poller" || ev.Key != strconv.Itoa(key) || ev.BackendPID == "" || ev.LeaseFD != "socket" || ev.FenceFD != "socket" {
			t.Errorf("the program saw role %q key %q backend %q fd 3 %q fd 4 %q", ev.Role, ev.Key, ev.BackendPID, ev.LeaseFD, ev.FenceFD)
		}
	}
	if !leasetest.KeyFree(t, needLab(t).DirectDSN(), key) {
		t.Error("key still held after leasectl run exited")
	}
}

// TestRunNeverLeadsWhereALeaseIsUnsafe: through a transaction-mode pooler
// (the real probe refuses it) and on a hot standby, leasectl run logs the
// refusal loudly, keeps trying, and never starts the program.
func TestRunNeverLeadsWhereALeaseIsUnsafe(t *testing.T) {
	for name, dsn := range map[string]string{"transaction pooler": needLab(t).PoolerDSN("transaction"), "standby": needLab(t).StandbyDSN()} {
		t.Run(name, func(t *testing.T) {
			f := newRunFixture(t, "poller", 9200003)
			r := startRun(t, runEnv(f, dsn), append([]string{"--role", "poller", "--retry-interval", "50ms", "--"}, f.witnessArgs()...)...)
			r.stderr.WaitFor(t, "refusing to lead", 2, hang)
			if code := r.stop(t); code != ExitOK {
				t.Errorf("exit %d after stopping while standing by, want 0", code)
			}
			if strings.Contains(r.stderr.String(), "program started") || strings.Contains(r.stderr.String(), "msg=leading") {
				t.Errorf("it led:\n%s", r.stderr)
			}
			select {
			case ev := <-f.events.Events:
				t.Errorf("a witness ran: %+v", ev)
			default:
			}
		})
	}
}

// TestRunKeepsRetryingAnUnreachableDatabase without exiting, and never logs
// the DSN's password.
func TestRunKeepsRetryingAnUnreachableDatabase(t *testing.T) {
	f := newRunFixture(t, "poller", 9200004)
	r := startRun(t, runEnv(f, "postgres://postgres:hunter2secret@127.0.0.1:1/postgres?sslmode=disable"), "--role", "poller", "--retry-interval", "50ms", "--", "true")
	r.stderr.WaitFor(t, "cannot connect; retrying", 3, hang)
	if code := r.stop(t); code != ExitOK {
		t.Errorf("exit %d, want 0", code)
	}
	if s := r.stderr.String(); strings.Contains(s, "hunter2secret") || !strings.Contains(s, "connection refused") {
		t.Errorf("stderr shows the password or not the reason:\n%s", s)
	}
}

// TestRunStepsDownWhenTheSessionIsTerminated: the program gets SIGTERM
// when the lease session is terminated, SIGKILL after --grace when it
// ignores it, and leasectl stands by and leads again. Metrics show it.
func TestRunStepsDownWhenTheSessionIsTerminated(t *testing.T) {
	f := newRunFixture(t, "poller", 9200005)
	r := startRun(t, runEnv(f, needLab(t).DirectDSN()), append([]string{"--role", "poller", "--retry-interval", "50ms", "--grace", "200ms",
		"-o", "json", "--metrics-addr", "127.0.0.1:0", "--"}, f.witnessArgs("-ignore-term")...)...)
	first := f.next(leasetest.Start)
	host, _ := os.Hostname()
	want := "leasectl run poller@" + host + "#" + strconv.Itoa(os.Getpid()) // run in this process
	var app string
	if err := pgtest.Conn(t, needLab(t).DirectDSN(), "observer").QueryRow(context.Background(), "SELECT application_name FROM pg_stat_activity WHERE pid = $1::int", first.BackendPID).Scan(&app); err != nil || app != want {
		t.Errorf("the lease session's application_name is %q (%v), want %q", app, err, want)
	}
	metricsURL := regexp.MustCompile(`http://127\.0\.0\.1:\d+/metrics`).FindString(r.stderr.String())
	waitMetrics(t, metricsURL, `leasectl_lease_leader{role="poller",key="9200005"} 1`)

	f.terminateBackend(first.BackendPID)
	if ev := f.next(leasetest.Term); ev.PID != first.PID || ev.Detail != "terminated" {
		t.Errorf("SIGTERM event %+v, want pid %d terminated", ev, first.PID)
	}
	second := f.next(leasetest.Start) // only after the first was SIGKILLed: the witness lock proves it
	if n := f.count(leasetest.Term, first.PID); n != 0 {
		t.Errorf("the first program got SIGTERM %d more time(s): each process of the tree must get it once", n)
	}
	if running(first.PID) {
		t.Errorf("the first program (pid %d) still runs", first.PID)
	}
	if second.BackendPID == first.BackendPID {
		t.Errorf("led again on the terminated backend %s", second.BackendPID)
	}
	waitMetrics(t, metricsURL, `leasectl_lease_transitions_total{role="poller",key="9200005",state="leading"} 2`,
		`leasectl_lease_program_starts_total{role="poller",key="9200005"} 2`, "leasectl_lease_heartbeat_age_seconds{")
	if code := r.stop(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d: the witness ignores SIGTERM and is killed after --grace", code, 128+int(syscall.SIGKILL))
	}
	for _, want := range []string{`"msg":"lease lost; stopping work"`, `"msg":"the program did not exit within the grace period: SIGKILL to its tree"`} {
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, r.stderr)
		}
	}
}

// waitMetrics scrapes url until the page contains every line of want (the
// witness may report its start before leasectl has counted it).
func waitMetrics(t *testing.T, url string, want ...string) {
	t.Helper()
	if url == "" {
		t.Fatal("no metrics URL in the log")
	}
	deadline := time.Now().Add(hang)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s:\n%s", missing, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- leasectl run as a process ----

// replica is one `leasectl run` process.
type replica struct {
	cmd    *exec.Cmd
	log    *leasetest.Buffer
	exited chan struct{}
	err    error
}

func (f *runFixture) startReplica(dsn string, flags ...string) *replica {
	f.t.Helper()
	args := append(append([]string{"run", "--role", "poller", "--retry-interval", "100ms", "-o", "json"}, flags...), "--")
	return f.startLeasectl(dsn, append(args, f.witnessArgs()...)...)
}

// startLeasectl starts the leasectl binary with args, the DSN and f's
// keys file, logging to its replica's buffer; the test's end kills it.
func (f *runFixture) startLeasectl(dsn string, args ...string) *replica {
	f.t.Helper()
	cmd := exec.Command(f.leasectl, args...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+f.keys)
	r := &replica{cmd: cmd, log: &leasetest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.log
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		defer close(r.exited)
		r.err = cmd.Wait()
	}()
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	return r
}

// stop sends SIGTERM and returns the exit code.
func (r *replica) stop(t *testing.T) int {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(hang):
		t.Fatalf("leasectl run %d did not exit after SIGTERM:\n%s", r.cmd.Process.Pid, r.log)
	}
	return r.cmd.ProcessState.ExitCode()
}

// TestRunReplicasNeverRunTwoPrograms: three replicas of leasectl run on one
// role; the witness's non-blocking flock catches any moment with two
// programs. First the leading leasectl is SIGKILLed, repeatedly, with
// default settings: its program dies with it (Pdeathsig) and, holding the
// lease socket, releases the key only as it dies. Then the leader's session
// is terminated and the server restarted, with --takeover-delay covering the
// old program's stop. In the end no process is left.
func TestRunReplicasNeverRunTwoPrograms(t *testing.T) {
	f := newRunFixture(t, "poller", 9200006)
	dsn := needLab(t).DirectDSN()
	byPID := map[int]*replica{}
	var all []*replica
	var children []int
	add := func(flags ...string) {
		r := f.startReplica(dsn, flags...)
		r.log.WaitFor(t, `"msg":"connecting"`, 1, hang) // its signal handling is in place
		byPID[r.cmd.Process.Pid] = r
		all = append(all, r)
	}
	for i := 0; i < 3; i++ {
		add()
	}
	leader := f.next(leasetest.Start)
	children = append(children, leader.PID)
	for i := 0; i < 3; i++ {
		r := byPID[leader.PPID]
		if r == nil {
			t.Fatalf("the program's parent %d is not a replica", leader.PPID)
		}
		_ = r.cmd.Process.Kill()
		<-r.exited
		delete(byPID, leader.PPID)
		next := f.next(leasetest.Start)
		if next.PPID == leader.PPID {
			t.Fatalf("a killed leasectl started a program")
		}
		children = append(children, next.PID)
		leader = next
		add()
	}
	// Stand-bys first, so that none takes over from the stopping leader.
	stopAll := func() {
		for _, pid := range append(otherPIDs(byPID, leader.PPID), leader.PPID) {
			if code := byPID[pid].stop(t); code != 0 {
				t.Errorf("replica %d exit %d after SIGTERM:\n%s", pid, code, byPID[pid].log)
			}
			delete(byPID, pid)
		}
		if ev := f.next(leasetest.Term); ev.PID != leader.PID {
			t.Errorf("SIGTERM reached witness %d, want the leader's %d", ev.PID, leader.PID)
		}
	}
	stopAll()

	for i := 0; i < 3; i++ {
		add("--takeover-delay", "1s")
	}
	leader = f.next(leasetest.Start)
	children = append(children, leader.PID)
	for i := 0; i < 2; i++ {
		f.terminateBackend(leader.BackendPID)
		if ev := f.next(leasetest.Term); ev.PID != leader.PID {
			t.Fatalf("SIGTERM reached witness %d, want the leader's %d", ev.PID, leader.PID)
		}
		leader = f.next(leasetest.Start)
		children = append(children, leader.PID)
	}
	if err := needLab(t).RestartPrimary(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	if ev := f.next(leasetest.Term); ev.PID != leader.PID {
		t.Fatalf("SIGTERM reached witness %d, want the leader's %d", ev.PID, leader.PID)
	}
	leader = f.next(leasetest.Start)
	children = append(children, leader.PID)
	stopAll()
	f.noOverlap()
	for _, r := range all {
		if running(r.cmd.Process.Pid) {
			t.Errorf("leasectl %d still runs", r.cmd.Process.Pid)
		}
	}
	for _, pid := range children {
		if running(pid) {
			t.Errorf("program %d still runs", pid)
		}
	}
	if !leasetest.KeyFreed(t, needLab(t).DirectDSN(), 9200006, 10*time.Second) {
		t.Error("key still held 10 s after every replica exited")
	}
}

func otherPIDs(m map[int]*replica, except int) []int {
	var out []int
	for pid := range m {
		if pid != except {
			out = append(out, pid)
		}
	}
	return out
}

// TestRunKeyOutlivesAKilledLeasectlWhileItsProgramLives: a program that
// escapes Pdeathsig (a grandchild, here behind sh) keeps the inherited lease
// socket, so the key stays held and no other replica starts a second
// program; once it exits the key passes on.
func TestRunKeyOutlivesAKilledLeasectlWhileItsProgramLives(t *testing.T) {
	const key = 9200007
	f := newRunFixture(t, "poller", key)
	cmd := exec.Command(f.leasectl, "run", "--role", "poller", "--", "sh", "-c", `"$0" "$@" & wait`, f.witness, "-lock", f.lock, "-notify", f.events.Path)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	orphan := f.next(leasetest.Start)
	standby := f.startReplica(needLab(t).DirectDSN())
	standby.log.WaitFor(t, "standing by", 1, hang)
	// Its obituary would stop what is left of the program's tree: this
	// test is about a leasectl that died with nobody left to do that.
	obit, ok := leasetest.ObituaryOf(cmd.Process.Pid)
	if !ok {
		t.Fatal("leasectl run has no obituary process")
	}
	if err := kill(obit); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !running(orphan.PID) {
		t.Fatal("the grandchild died with leasectl; this test needs it to survive")
	}
	if leasetest.KeyFree(t, needLab(t).DirectDSN(), key) {
		t.Fatal("key free while the killed leader's program still runs")
	}
	if err := kill(orphan.PID); err != nil {
		t.Fatal(err)
	}
	if next := f.next(leasetest.Start); next.PPID != standby.cmd.Process.Pid {
		t.Errorf("program started by %d, want the stand-by %d", next.PPID, standby.cmd.Process.Pid)
	}
	if code := standby.stop(t); code != 0 {
		t.Errorf("stand-by exit %d", code)
	}
}

// TestRunForwardsSignalsAndRestarts: SIGINT reaches the program as SIGINT;
// with --restart a program that exits is run again.
func TestRunForwardsSignalsAndRestarts(t *testing.T) {
	f := newRunFixture(t, "poller", 9200008)
	cmd := exec.Command(f.leasectl, append([]string{"run", "--role", "poller", "--restart", "--retry-interval", "50ms", "--"}, f.witnessArgs("-exit", "3")...)...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	var log leasetest.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.next(leasetest.Start)
	f.next(leasetest.Start) // run again after exiting with 3
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 && code != 3 {
		// 0 when stopped between runs, 3 when a run was just ending
		t.Errorf("with --restart, stopping leasectl: exit %d\n%s", code, &log)
	}

	r := f.startReplica(needLab(t).DirectDSN())
	first := f.next(leasetest.Start)
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	if ev := f.next(leasetest.Term); ev.PID != first.PID || ev.Detail != "interrupt" {
		t.Errorf("the program got %+v, want SIGINT", ev)
	}
	<-r.exited
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d, want the program's 0:\n%s", code, r.log)
	}
}

// TestRunCompletesRoles: --role completes from keys.yaml.
func TestRunCompletesRoles(t *testing.T) {
	f := newRunFixture(t, "poller", 9200009)
	res := runCLI(t, runEnv(f, needLab(t).DirectDSN()), "__complete", "run", "--role", "po")
	if res.Code != 0 || !strings.Contains(res.Stdout, "poller\tkey 9200009") {
		t.Errorf("completion of --role: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestRunStopsDaemonsBeforeReleasingTheKey: a program that starts a daemon
// and exits: the daemon left the program's process group and session
// (setsid), and in the double-fork case also cleared its environment, so
// only leasectl being a child subreaper finds it. leasectl stops it before
// it releases the key: when the stand-by's program starts, the daemon is
// gone.
func TestRunStopsDaemonsBeforeReleasingTheKey(t *testing.T) {
	for i, tc := range []struct{ name, script string }{
		{"setsid", `setsid sleep 1002 </dev/null >/dev/null 2>&1 & echo $! > "$DAEMON_PID"; sleep 1`},
		{"double fork without environment", `(env -i setsid sleep 1003 </dev/null >/dev/null 2>&1 & echo $! > "$DAEMON_PID"); sleep 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRunFixture(t, "poller", int64(9200020+i))
			cmd, log, daemon := f.runWithDaemon("5s", tc.script)
			standby := f.startReplica(needLab(t).DirectDSN())
			next := f.next(leasetest.Start)
			if running(daemon) {
				t.Errorf("the stand-by's program (pid %d) started while the daemon %d of the old leader still runs:\n%s", next.PID, daemon, log)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("leasectl run: %v (want exit 0, the program's status)\n%s", err, log)
			}
			if !strings.Contains(log.String(), "the program exited; stopping what is left of its tree") {
				t.Errorf("the log does not say that the daemon was stopped:\n%s", log)
			}
			if code := standby.stop(t); code != 0 {
				t.Errorf("stand-by exit %d", code)
			}
		})
	}
}

// TestRunGraceIsOneDeadline: --grace counts from the first signal, for the
// program and everything it started: a program and a daemon of it that both
// ignore SIGTERM are SIGKILLed once --grace has passed, not after a second
// grace period for the daemon. The bound below leaves half the grace period
// of slack; the old behaviour took two grace periods.
func TestRunGraceIsOneDeadline(t *testing.T) {
	f := newRunFixture(t, "poller", 9200030)
	const grace = 3 * time.Second
	cmd, log, daemon := f.runWithDaemon(grace.String(),
		`trap "" TERM; setsid sh -c 'trap "" TERM; echo $$ > "$DAEMON_PID"; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & while :; do sleep 1; done`)
	signalled := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	took := time.Since(signalled)
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d (the program was SIGKILLed)\n%s", code, 128+int(syscall.SIGKILL), log)
	}
	if took > grace+grace/2 {
		t.Errorf("stopping took %s with --grace %s: the grace period was restarted\n%s", took.Round(time.Millisecond), grace, log)
	}
	if running(daemon) {
		t.Errorf("the daemon %d outlived leasectl run:\n%s", daemon, log)
	}
}

// TestRunWarnsAboutAProxysIdleTimeout: through HAProxy with a 2 s client
// timeout, a lease with a 5 s heartbeat loses its sessions every 2 s. Once
// two ends agree, run logs a warning that names the likely cause.
func TestRunWarnsAboutAProxysIdleTimeout(t *testing.T) {
	f := newRunFixture(t, "poller", 9200040)
	r := startRun(t, runEnv(f, needDoors(t).HAProxyDSN("idle")), append([]string{"--role", "poller", "--heartbeat-interval", "5s", "--retry-interval", "200ms",
		"-o", "json", "--"}, f.witnessArgs()...)...)
	r.stderr.WaitFor(t, "keep ending after the same silence", 1, hang)
	// The warning comes at a reconnect, as a new leadership begins: stop
	// only once a program has started after it (and handles SIGTERM), or
	// its status is SIGTERM's rather than the stop's.
	f.count(leasetest.Start, 0)
	f.pending = nil
	f.next(leasetest.Start)
	log := r.stderr.String()
	checkJSONLog(t, log)
	for _, want := range []string{"closes idle connections", "HAProxy timeout client/server", `"silence_ms":2`} {
		if !strings.Contains(log, want) {
			t.Errorf("the warning lacks %q:\n%s", want, log)
		}
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// runWithDaemon starts the leasectl binary with --grace grace and the sh
// script as its program; the script starts a daemon and writes its pid to
// $DAEMON_PID. It returns once the daemon runs, with leasectl's log and the
// daemon's pid; both are killed when the test ends.
func (f *runFixture) runWithDaemon(grace, script string) (*exec.Cmd, *leasetest.Buffer, int) {
	t := f.t
	t.Helper()
	pidFile := filepath.Join(f.dir, "daemon.pid")
	cmd := exec.Command(f.leasectl, "run", "--role", "poller", "--grace", grace, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys, "DAEMON_PID="+pidFile)
	log := &leasetest.Buffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var daemon int
	for deadline := time.Now().Add(hang); daemon == 0; time.Sleep(10 * time.Millisecond) {
		if data, err := os.ReadFile(pidFile); err == nil {
			daemon, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program did not start its daemon:\n%s", log)
		}
	}
	t.Cleanup(func() { _ = kill(daemon) })
	return cmd, log, daemon
}

// TestRunObituaryRecordsTheEndOfAKilledLeader: leasectl run SIGKILLed
// while its program's child lives on (it is not Pdeathsig's): the obituary
// stops what is left of the tree, records the end of the term as killed,
// and the stand-by's program starts without waiting for the term's
// deadline (an hour here).
func TestRunObituaryRecordsTheEndOfAKilledLeader(t *testing.T) {
	const key = 9200017
	f := newRunFixture(t, "poller", key)
	args := []string{"run", "--role", "poller", "--heartbeat-interval", "1h", "--", "sh", "-c", `"$0" "$@" & wait`, f.witness, "-lock", f.lock, "-notify", f.events.Path}
	cmd := exec.Command(f.leasectl, args...)
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+needLab(t).DirectDSN(), "LEASECTL_KEYS="+f.keys)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	orphan := f.next(leasetest.Start)
	standby := f.startReplica(needLab(t).DirectDSN(), "--heartbeat-interval", "1h")
	standby.log.WaitFor(t, "standing by", 1, hang)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if next := f.next(leasetest.Start); next.PPID != standby.cmd.Process.Pid {
		t.Errorf("program started by %d, want the stand-by %d", next.PPID, standby.cmd.Process.Pid)
	}
	if running(orphan.PID) {
		t.Errorf("the killed leader's program (pid %d) still runs beside the new one", orphan.PID)
	}
	hist, err := term.History(context.Background(), pgtest.Conn(t, needLab(t).DirectDSN(), ""), key, time.Time{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[1].EndReason != term.Killed {
		t.Errorf("history %+v, want the killed leader's term ended %q", hist, term.Killed)
	}
	if code := standby.stop(t); code != 0 {
		t.Errorf("stand-by exit %d", code)
	}
}

// TestRunFence: with --fence, leasectl run never leads without the term
// record, and says what creates it; with the record, the program gets
// LEASECTL_EPOCH and LEASECTL_FENCE_TOKEN, and the token passes
// leasectl.fence in a transaction of its own.
func TestRunFence(t *testing.T) {
	const key = 9200018
	withoutTermRecord(t)
	// A role that may not create the schema leasectl.
	lab := needLab(t)
	admin := pgtest.Conn(t, lab.DirectDSN(), "")
	pgtest.Exec(t, admin, "DROP ROLE IF EXISTS run_nofence")
	pgtest.Exec(t, admin, "CREATE ROLE run_nofence LOGIN PASSWORD 'nofence-secret'")
	if err := lab.AddLogin("run_nofence", "nofence-secret"); err != nil {
		t.Fatal(err)
	}
	f := newRunFixture(t, "poller", key)
	r := f.startReplica(lab.DSN(lab.Primary.Port, "run_nofence", "postgres"), "--fence")
	r.log.WaitFor(t, "fencing needs the term record", 2, hang)
	if strings.Contains(r.log.String(), "program started") {
		t.Fatalf("it led without the term record:\n%s", r.log)
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}

	withTermRecord(t)
	r = f.startReplica(needLab(t).DirectDSN(), "--fence")
	ev := f.next(leasetest.Start)
	if ev.Epoch == "" || !strings.HasPrefix(ev.FenceToken, "leasectl:9200018:"+ev.Epoch+":") || !strings.HasSuffix(ev.FenceToken, ":poller") {
		t.Fatalf("the program got epoch %q and token %q", ev.Epoch, ev.FenceToken)
	}
	var epoch string
	if err := pgtest.Conn(t, needLab(t).DirectDSN(), "").QueryRow(context.Background(), "SELECT leasectl.fence($1)::text", ev.FenceToken).Scan(&epoch); err != nil || epoch != ev.Epoch {
		t.Errorf("leasectl.fence(%q) = %q, %v; want epoch %s", ev.FenceToken, epoch, err, ev.Epoch)
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}

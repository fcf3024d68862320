//go:build linux

package schedule

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/internal/timing"
	"github.com/leasectl/leasectl/test/chaos"
	"github.com/leasectl/leasectl/test/leasetest"
)

// The fleet: three replicas of `leasectl run --procfile --fence` over the
// group's roles and two of a single-role `leasectl run --fence`, the
// second of them inside the network namespace, each running the worker
// (./worker) as every role's program. A replica that is SIGKILLed is
// replaced in its slot by a new one.

const (
	groupRoles = 4
	soloRole   = "solo"
	keyBase    = int64(9370001)
	slots      = 5 // 0-2: the group replicas; 3, 4: the single-role ones
	netnsSlot  = 4
	// hang bounds every wait for something that must happen; reaching it
	// fails the run, saying what did not happen. It is not a timing rule.
	hang = 60 * time.Second
)

// shortFlags are fleetTiming's: the fault suite's short timings, whose
// term deadline is 8 s after the last renewal
// (timing.Lease.TermDeadline: 2 + 1 + (2 + 2) + 1).
var shortFlags = []string{
	"--heartbeat-interval", fleetTiming.Lease.HeartbeatInterval.String(),
	"--heartbeat-timeout", fleetTiming.Lease.HeartbeatTimeout.String(),
	"--grace", (fleetTiming.Lease.StopTimeout - timing.KillReap).String(),
	"--retry-interval", fleetTiming.Retry.String(),
}

func groupRole(i int) string { return fmt.Sprintf("g%d", i+1) }

// roles are every role of the fleet.
func roles() []string {
	out := []string{soloRole}
	for i := range groupRoles {
		out = append(out, groupRole(i))
	}
	return out
}

// replica is one `leasectl run` process.
type replica struct {
	slot   int
	name   string // its application_name, and SCHEDULE_REPLICA of its workers
	cmd    *exec.Cmd
	log    *leasetest.Buffer
	exited chan struct{}
	killed bool // SIGKILLed by the schedule
}

func (r *replica) pid() int { return r.cmd.Process.Pid }

func (r *replica) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

type fleet struct {
	t                  *testing.T
	lab                *lab.Lab
	leasectl, worker   string
	dir, keys, pf      string
	prefix             string // of every application_name of this run
	directDSN, poolDSN string
	nsDSN, nsPoolDSN   string // for the replica in the namespace

	// slotMu serialises the replacements of a slot's replica (a SIGKILL,
	// a restart after a drain); mu guards the fields below.
	slotMu [slots]sync.Mutex
	mu     sync.Mutex
	slots  [slots]*replica
	gen    [slots]int
	all    []*replica
}

// newFleet builds leasectl and the worker, writes keys.yaml and the
// Procfile, and returns a fleet with no replica yet; every replica is
// stopped when the test ends, whatever happened.
func newFleet(t *testing.T, l *lab.Lab) *fleet {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(filepath.Join(dir, "events"), 0o755); err != nil {
		t.Fatal(err)
	}
	leasectl, err := leasetest.GoBuild(bin, "leasectl", "github.com/leasectl/leasectl")
	if err != nil {
		t.Fatal(err)
	}
	worker, err := leasetest.GoBuild(bin, "worker", "github.com/leasectl/leasectl/test/schedule/worker")
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, lab: l, leasectl: leasectl, worker: worker, dir: dir,
		keys: filepath.Join(dir, "keys.yaml"), pf: filepath.Join(dir, "Procfile"),
		prefix:    fmt.Sprintf("sched%d-", os.Getpid()),
		directDSN: l.DirectDSN(),
		poolDSN:   withParams(l.PoolerDSN("transaction"), "connect_timeout", "2", "default_query_exec_mode", "exec")}
	var keys, pf bytes.Buffer
	keys.WriteString("roles:\n")
	fmt.Fprintf(&keys, "  %s: %d\n", soloRole, keyBase+100)
	pf.WriteString("# the randomized fault schedule's group: one worker per role\n")
	for i := range groupRoles {
		fmt.Fprintf(&keys, "  %s: %d\n", groupRole(i), keyBase+int64(i))
		fmt.Fprintf(&pf, "%s: %s\n", groupRole(i), worker)
	}
	if err := os.WriteFile(f.keys, keys.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.pf, pf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.teardown)
	return f
}

// withParams adds name=value pairs to the URL DSN dsn.
func withParams(dsn string, kv ...string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// relay forwards connections from the namespace's side of the host
// (HostAddr) to the transaction pooler, which listens on 127.0.0.1 only:
// the replica in the namespace writes through the pooler like the others,
// and a partition cuts that path too. It stops when the test ends.
func (f *fleet) relay(n *chaos.Netns) {
	t := f.t
	ln, err := net.Listen("tcp", n.HostAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("127.0.0.1:%d", f.lab.Pooler("transaction").Port)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s, err := net.DialTimeout("tcp", target, 2*time.Second)
				if err != nil {
					return
				}
				defer s.Close()
				track(c, true)
				track(s, true)
				defer track(c, false)
				defer track(s, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	port := ln.Addr().(*net.TCPAddr).Port
	u, _ := url.Parse(f.poolDSN)
	u.Host = fmt.Sprintf("%s:%d", n.HostAddr, port)
	f.nsPoolDSN = u.String()
	f.nsDSN = n.DSN(f.directDSN)
}

// start starts the replica of slot i (a new generation of it).
func (f *fleet) start(i int) *replica {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen[i]++
	name := fmt.Sprintf("%sr%d-%d", f.prefix, i+1, f.gen[i])
	args := []string{"run", "-o", "json", "--restart", "--fence", "--keep", "100000", "--keys", f.keys}
	args = append(args, shortFlags...)
	if i < 3 {
		args = append(args, "--procfile", f.pf)
	} else {
		args = append(args, "--role", soloRole, "--", f.worker)
	}
	dsn, pool := f.directDSN, f.poolDSN
	var cmd *exec.Cmd
	if i == netnsSlot && ns != nil {
		dsn, pool = f.nsDSN, f.nsPoolDSN
		cmd = ns.Command(f.leasectl, args...)
	} else {
		cmd = exec.Command(f.leasectl, args...)
	}
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "PGAPPNAME="+name,
		"SCHEDULE_REPLICA="+name, "SCHEDULE_DIR="+f.dir,
		"SCHEDULE_DSN="+withParams(pool, "application_name", name+"-worker"))
	// Should the test binary die without its cleanup, the replicas die
	// with it, and their programs with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &replica{slot: i, name: name, cmd: cmd, log: &leasetest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.log
	if *historyFlag != "" {
		// Beside the history, each replica's log, to read a long gap by.
		dir := *historyFlag + ".logs"
		err := os.MkdirAll(dir, 0o755)
		var lf *os.File
		if err == nil {
			lf, err = os.Create(filepath.Join(dir, name+".log"))
		}
		if err != nil {
			f.t.Fatalf("the replica's log beside the history: %v", err)
		}
		f.t.Cleanup(func() { _ = lf.Close() })
		cmd.Stderr = io.MultiWriter(r.log, lf)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	f.slots[i] = r
	f.all = append(f.all, r)
	return r
}

// replicaAt is the current replica of slot i.
func (f *fleet) replicaAt(i int) *replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots[i]
}

// kill SIGKILLs the replica of slot i, waits until it is gone, and starts
// its successor.
func (f *fleet) kill(i int) (dead, next *replica) {
	f.slotMu[i].Lock()
	defer f.slotMu[i].Unlock()
	dead = f.replicaAt(i)
	dead.killed = true
	_ = dead.cmd.Process.Kill()
	<-dead.exited
	return dead, f.start(i)
}

// restart stops old, the replica of slot i, with SIGTERM and starts its
// successor, unless old was replaced meanwhile: a node's restart after
// its drain. It returns the successor, or nil.
func (f *fleet) restart(i int, old *replica) *replica {
	f.slotMu[i].Lock()
	defer f.slotMu[i].Unlock()
	if f.replicaAt(i) != old {
		return nil
	}
	_ = old.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-old.exited:
	case <-time.After(hang):
		f.t.Errorf("%s (pid %d) did not exit within %s of SIGTERM; killed", old.name, old.pid(), hang)
		_ = old.cmd.Process.Kill()
		<-old.exited
	}
	return f.start(i)
}

// teardown stops every replica with SIGTERM (SIGKILL after hang), as an
// orchestrator would.
func (f *fleet) teardown() {
	f.mu.Lock()
	live := append([]*replica(nil), f.all...)
	f.mu.Unlock()
	for _, r := range live {
		if r.alive() {
			// A replica may still be frozen (a failed run): thaw it first.
			f.thaw(r, true)
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, r := range live {
		select {
		case <-r.exited:
		case <-time.After(hang):
			f.t.Errorf("%s (pid %d) did not exit within %s of SIGTERM; killed", r.name, r.pid(), hang)
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}
}

// descendants returns the processes below pid (its programs, and its
// obituary), from /proc's children lists.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}

// exeIs reports whether process pid runs the program at path.
func exeIs(pid int, path string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.TrimSuffix(exe, " (deleted)") == path
}

// programsOf returns the workers that replica r runs.
func (f *fleet) programsOf(r *replica) []int {
	var out []int
	for _, p := range descendants(r.pid()) {
		if exeIs(p, f.worker) {
			out = append(out, p)
		}
	}
	return out
}

// freeze stops r's leasectl and, with all, every process below it.
func (f *fleet) freeze(r *replica, all bool) {
	_ = syscall.Kill(r.pid(), syscall.SIGSTOP)
	if all {
		for _, p := range descendants(r.pid()) {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
	}
}

// thaw resumes what freeze stopped: the programs first, so that they try
// their writes before their leasectl stops them.
func (f *fleet) thaw(r *replica, all bool) {
	if all {
		for _, p := range descendants(r.pid()) {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
	}
	_ = syscall.Kill(r.pid(), syscall.SIGCONT)
}

// leftovers returns the processes still running this run's leasectl or
// worker binaries (an obituary runs leasectl's).
func (f *fleet) leftovers() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exeIs(pid, f.leasectl) || exeIs(pid, f.worker) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")))
		}
	}
	return out
}

// workerEvent is a line of a worker's event file (see ./worker).
type workerEvent struct {
	Ev      string    `json:"ev"`
	T       time.Time `json:"t"`
	Role    string    `json:"role"`
	Replica string    `json:"replica"`
	PID     int       `json:"pid"`
	Epoch   string    `json:"epoch"`
	Locked  bool      `json:"locked"`
	HeldBy  string    `json:"held_by"`
	Detail  string    `json:"detail"`
}

// workerRun is one worker's run, read back from its event file.
type workerRun struct {
	Work
	pid     int
	epoch   string
	stopped bool // it logged its stop
	refused int
	fails   []string // its failed writes other than refusals, one per change of error
}

// runs reads every worker's event file.
func (f *fleet) runs() ([]workerRun, error) {
	files, err := filepath.Glob(filepath.Join(f.dir, "events", "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var out []workerRun
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var r workerRun
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var ev workerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				continue // a line cut by a SIGKILL
			}
			switch ev.Ev {
			case "start":
				r.Role, r.Replica, r.pid, r.From, r.HeldBy, r.epoch = ev.Role, ev.Replica, ev.PID, ev.T, ev.HeldBy, ev.Epoch
				r.Writer = fmt.Sprintf("%s/%d", ev.Replica, ev.PID)
			case "refused":
				r.refused++
			case "fail":
				r.fails = append(r.fails, ev.T.UTC().Format(stamp)+" "+ev.Detail)
			case "stop":
				r.stopped = true
			}
			if !ev.T.IsZero() && ev.T.After(r.To) {
				r.To = ev.T
			}
		}
		if r.Role == "" {
			continue // it died before its start was written: it never ran
		}
		out = append(out, r)
	}
	return out, nil
}

//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/test/benchutil"
	"github.com/leasectl/leasectl/test/leasetest"
)

// The group's takeover: replicas of `leasectl run --procfile` over many
// roles, each role's program the same sh as the single-role takeover's.
// The replica that runs the most programs is SIGKILLed, and each role it
// led is timed from the SIGKILL until its program's first line arrives
// from another replica: the single-role takeover, per role, when a third
// of the roles move at once. The killed replica is started again and the
// roles spread over the three again before the next kill.

const groupKeyBase = 9400100 // role gNN has key groupKeyBase+NN

// groupReplica is one `leasectl run --procfile` process.
type groupReplica struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	tail   []string
}

func (s *setup) startGroup(procfile, keys string, i int) (*groupReplica, error) {
	cmd := exec.Command(s.leasectl, "run", "--procfile", procfile, "-o", "json")
	dsn := s.lab.DirectDSN() + "&application_name=" + url.QueryEscape(fmt.Sprintf("takeover-group-%d", i))
	cmd.Env = append(os.Environ(), "LEASECTL_DSN="+dsn, "LEASECTL_KEYS="+keys)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	g := &groupReplica{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(g.exited)
	}()
	go func() {
		// Until every writer is gone: leasectl, its obituary, the programs.
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			g.mu.Lock()
			if g.tail = append(g.tail, sc.Text()); len(g.tail) > 6 {
				g.tail = g.tail[1:]
			}
			g.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return g, nil
}

func (g *groupReplica) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("group replica %d:\n    %s", g.cmd.Process.Pid, strings.Join(g.tail, "\n    "))
}

// groupRun is the group phase's state: the replicas, and the programs each
// runs (their sh pids, from the start and term lines on the FIFO).
type groupRun struct {
	s        *setup
	procfile string
	keys     string
	roles    int
	reps     []*groupReplica
	running  []map[int]bool // by replica index
}

func (gr *groupRun) index(leasectlPID int) int {
	for i, g := range gr.reps {
		if g != nil && g.cmd.Process.Pid == leasectlPID {
			return i
		}
	}
	return -1
}

// apply counts one event from the FIFO.
func (gr *groupRun) apply(ev leasetest.Event) {
	switch ev.Kind {
	case leasetest.Start:
		if i := gr.index(ev.PPID); i >= 0 {
			gr.running[i][ev.PID] = true
		}
	case leasetest.Term:
		for _, m := range gr.running {
			delete(m, ev.PID)
		}
	}
}

func (gr *groupRun) counts() []int {
	n := make([]int, len(gr.running))
	for i, m := range gr.running {
		n[i] = len(m)
	}
	return n
}

func (gr *groupRun) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "programs running per replica %v", gr.counts())
	for _, g := range gr.reps {
		if g != nil {
			b.WriteString("\n  " + g.String())
		}
	}
	return b.String()
}

// settle waits until every role's program runs, no replica runs more than
// its share + 1 (the group's rule for stepping down), and no program has
// started or stopped for a second.
func (gr *groupRun) settle(limit time.Duration) error {
	share := (gr.roles + len(gr.reps) - 1) / len(gr.reps)
	deadline := time.After(limit)
	quiet := time.NewTimer(time.Second)
	defer quiet.Stop()
	for {
		select {
		case ev := <-gr.s.events.Events:
			gr.apply(ev)
			quiet.Reset(time.Second)
		case <-quiet.C:
			n := gr.counts()
			total := 0
			for _, c := range n {
				total += c
			}
			if total == gr.roles && slices.Max(n) <= share+1 {
				return nil
			}
			quiet.Reset(time.Second)
		case <-deadline:
			return fmt.Errorf("the group has not settled after %v: %s", limit, gr.describe())
		}
	}
}

// groupTakeovers runs the group phase: kills rounds of SIGKILL, and returns
// the per-role takeovers and how many roles each round moved.
func (s *setup) groupTakeovers(dir string, roles, replicas, kills int) ([]time.Duration, []int, error) {
	script := filepath.Join(dir, "child.sh")
	// The same program as the single-role takeover's, run from a file:
	// sh FILE FIFO has the FIFO in $1 rather than $0.
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(benchutil.ChildScript, `"$0"`, `"$1"`)+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	var keys, pf strings.Builder
	keys.WriteString("roles:\n")
	for i := 1; i <= roles; i++ {
		fmt.Fprintf(&keys, "  g%02d: %d\n", i, groupKeyBase+i)
		fmt.Fprintf(&pf, "g%02d: sh %s %s\n", i, script, s.events.Path)
	}
	gr := &groupRun{s: s, roles: roles, procfile: filepath.Join(dir, "Procfile"), keys: filepath.Join(dir, "group-keys.yaml")}
	if err := os.WriteFile(gr.keys, []byte(keys.String()), 0o600); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(gr.procfile, []byte(pf.String()), 0o600); err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, g := range gr.reps {
			if g != nil {
				_ = g.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, g := range gr.reps {
			if g != nil {
				select {
				case <-g.exited:
				case <-time.After(20 * time.Second):
					_ = g.cmd.Process.Kill()
				}
			}
		}
	}()
	gr.reps, gr.running = make([]*groupReplica, replicas), make([]map[int]bool, replicas)
	for _, ev := range s.pending {
		gr.apply(ev)
	}
	s.pending = nil
	for i := range replicas {
		g, err := s.startGroup(gr.procfile, gr.keys, i)
		if err != nil {
			return nil, nil, err
		}
		gr.reps[i], gr.running[i] = g, map[int]bool{}
	}
	if err := gr.settle(time.Minute); err != nil {
		return nil, nil, err
	}
	var out []time.Duration
	var moved []int
	for range kills {
		n := gr.counts()
		victim := slices.Index(n, slices.Max(n))
		want := n[victim]
		g := gr.reps[victim]
		t0 := time.Now()
		_ = g.cmd.Process.Kill()
		// Its programs die with it (Pdeathsig): no term lines.
		gr.running[victim], gr.reps[victim] = map[int]bool{}, nil
		got := 0
		deadline := time.After(30 * time.Second)
		for got < want {
			select {
			case ev := <-s.events.Events:
				if ev.Kind == leasetest.Start && gr.index(ev.PPID) >= 0 {
					out = append(out, ev.At.Sub(t0))
					got++
				}
				gr.apply(ev)
			case <-deadline:
				return nil, nil, fmt.Errorf("only %d of the %d roles of the SIGKILLed replica run elsewhere 30 s later: %s", got, want, gr.describe())
			}
		}
		moved = append(moved, want)
		<-g.exited
		ng, err := s.startGroup(gr.procfile, gr.keys, victim)
		if err != nil {
			return nil, nil, err
		}
		gr.reps[victim] = ng
		if err := gr.settle(time.Minute); err != nil {
			return nil, nil, err
		}
	}
	return out, moved, nil
}

//go:build unix

package benchutil

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/leasetest"
)

// ChildScript is the program the benchmarks run under a lease: it reports
// its start and its SIGTERM as lines on the FIFO named by $0. Its short
// sleeps hold none of the inherited descriptors: the lease socket (3) and
// the stop fence socket (4) would keep the key and the fence held after a
// SIGKILL of leasectl, which Pdeathsig does not pass on to them, until they
// end.
const ChildScript = `trap 'echo "term $$" > "$0"; exit 0' TERM INT
echo "start $$ $PPID $LEASECTL_BACKEND_PID" > "$0"
while :; do sleep 1 </dev/null >/dev/null 2>&1 3>&- 4>&- & wait $!; done`

// FIFO collects the lines that ChildScript programs write to a named pipe,
// as events stamped when they arrive.
type FIFO struct {
	Path   string
	Events chan leasetest.Event
}

// ListenFIFO makes a named pipe at path and reads it until the process
// ends.
func ListenFIFO(path string) (*FIFO, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	// Read-write, so that writers never block or see a closed pipe and the
	// reader never sees EOF between writers.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	q := &FIFO{Path: path, Events: make(chan leasetest.Event, 1024)}
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			at := time.Now()
			f := strings.Fields(sc.Text())
			ev := leasetest.Event{At: at}
			switch {
			case len(f) == 4 && f[0] == "start":
				ev.Kind, ev.BackendPID = leasetest.Start, f[3]
				ev.PID, _ = strconv.Atoi(f[1])
				ev.PPID, _ = strconv.Atoi(f[2])
			case len(f) == 2 && f[0] == "term":
				ev.Kind = leasetest.Term
				ev.PID, _ = strconv.Atoi(f[1])
			default:
				continue
			}
			q.Events <- ev
		}
	}()
	return q, nil
}

// Replica is one `leasectl run` process of a benchmark, its JSON log
// followed as it comes.
type Replica struct {
	Cmd    *exec.Cmd
	mu     sync.Mutex
	states []string
	// leadingAt and startedAt are the log times of the last "leading" and
	// "program started" lines.
	leadingAt, startedAt time.Time
	// tail is the last lines of its log, for a failure report.
	tail   []string
	seen   chan struct{} // a line was logged (capacity 1: a wake-up, not a count)
	Exited chan struct{}
}

// LogDir, when set, receives each replica's whole log, as
// replica-PID.log.
var LogDir string

// StartReplica runs `leasectl run --role ROLE -o json -- sh -c
// ChildScript FIFO` with env added to this process's environment.
func StartReplica(leasectl, role string, fifo *FIFO, env ...string) (*Replica, error) {
	cmd := exec.Command(leasectl, "run", "--role", role, "-o", "json", "--", "sh", "-c", ChildScript, fifo.Path)
	cmd.Env = append(os.Environ(), env...)
	r := &Replica{Cmd: cmd, seen: make(chan struct{}, 1), Exited: make(chan struct{})}
	stderr, w := io.Pipe()
	cmd.Stderr = w
	cmd.WaitDelay = time.Second // do not wait for the stderr copy once leasectl is gone
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(r.Exited)
	}()
	var logFile *os.File
	if LogDir != "" {
		logFile, _ = os.Create(filepath.Join(LogDir, fmt.Sprintf("replica-%d.log", cmd.Process.Pid)))
	}
	go func() {
		if logFile != nil {
			defer logFile.Close()
		}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if logFile != nil {
				fmt.Fprintln(logFile, sc.Text())
			}
			var line struct {
				Time  time.Time
				Msg   string
				State string
			}
			r.mu.Lock()
			r.tail = append(r.tail, sc.Text())
			if len(r.tail) > 8 {
				r.tail = r.tail[1:]
			}
			r.mu.Unlock()
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			r.mu.Lock()
			if line.Msg == "program started" {
				r.startedAt = line.Time
			}
			if line.State == "leading" {
				r.leadingAt = line.Time
			}
			if line.State != "" {
				r.states = append(r.states, line.State)
			}
			r.mu.Unlock()
			select { // never block: leasectl must not stall on a full stderr pipe
			case r.seen <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	return r, nil
}

// PID is the leasectl process's pid.
func (r *Replica) PID() int { return r.Cmd.Process.Pid }

// StandingBy waits up to limit until r's last logged state is standing_by,
// and then settle longer, for its lock request to reach the server.
func (r *Replica) StandingBy(limit, settle time.Duration) error {
	deadline := time.After(limit)
	for {
		r.mu.Lock()
		ok := len(r.states) > 0 && r.states[len(r.states)-1] == "standing_by"
		r.mu.Unlock()
		if ok {
			time.Sleep(settle)
			return nil
		}
		select {
		case <-r.seen:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			return fmt.Errorf("replica %d is not standing by after %v (states %v)", r.PID(), limit, r.states)
		}
	}
}

// LoggedStart returns the log times of r's "leading" and "program started"
// lines after t0, waiting up to a second for them: the program's own line
// can arrive first.
func (r *Replica) LoggedStart(t0 time.Time) (leading, started time.Time) {
	deadline := time.After(time.Second)
	for {
		r.mu.Lock()
		leading, started = r.leadingAt, r.startedAt
		r.mu.Unlock()
		if started.After(t0) && leading.After(t0) {
			return leading, started
		}
		select {
		case <-r.seen:
		case <-deadline:
			return time.Time{}, time.Time{}
		}
	}
}

// Tail is the last lines r logged.
func (r *Replica) Tail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.tail, "\n  ")
}

// Stop sends SIGTERM to every replica and waits for each to exit, with
// SIGKILL after 15 s.
func StopReplicas(rs []*Replica) {
	for _, r := range rs {
		_ = r.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, r := range rs {
		select {
		case <-r.Exited:
		case <-time.After(15 * time.Second):
			_ = r.Cmd.Process.Kill()
		}
	}
}

// StartLab starts a lab with opts, saying so on stderr, and builds
// leasectl into a directory of it, which it returns with the binary's
// path. The caller stops the lab.
func StartLab(ctx context.Context, opts lab.Options, what string) (l *lab.Lab, dir, leasectl string, err error) {
	fmt.Fprintf(os.Stderr, "starting %s …\n", what)
	if l, err = lab.Start(ctx, opts); err != nil {
		return nil, "", "", err
	}
	dir = filepath.Join(l.Dir, "bench")
	if err = os.MkdirAll(dir, 0o755); err == nil {
		fmt.Fprintln(os.Stderr, "building leasectl …")
		leasectl, err = BuildLeasectl(dir)
	}
	if err != nil {
		_ = l.Stop(context.Background())
		return nil, "", "", err
	}
	return l, dir, leasectl, nil
}

package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

var testLab *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(pgtest.RunMain(m, lab.Options{Poolers: []lab.PoolerSpec{}}, &testLab))
}

const pollerKey = 9300001

var (
	buildOnce sync.Once
	binaries  = map[string]string{}
	buildErr  error
)

// build compiles the worker without and with the worker tag, once, into the
// lab's directory.
func build(t *testing.T, tagged bool) string {
	t.Helper()
	buildOnce.Do(func() {
		dir := filepath.Join(testLab.Dir, "worker-bin")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		const pkg = "github.com/leasectl/leasectl/examples/worker"
		if binaries["default"], buildErr = leasetest.GoBuild(dir, "worker-default", pkg); buildErr != nil {
			return
		}
		binaries["tagged"], buildErr = leasetest.GoBuild(dir, "worker-tagged", pkg, "-tags", "worker")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if tagged {
		return binaries["tagged"]
	}
	return binaries["default"]
}

// symbols returns the names in bin's symbol table.
func symbols(t *testing.T, bin string) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(syms))
	for i, s := range syms {
		out[i] = s.Name
	}
	return out
}

// hasPoller reports whether names include the poller loop (possibly inlined
// into a closure, which keeps the name).
func hasPoller(names []string) bool {
	for _, n := range names {
		if strings.Contains(n, "pollLoop") {
			return true
		}
	}
	return false
}

// service is one running worker process.
type service struct {
	cmd  *exec.Cmd
	log  *leasetest.Buffer
	done chan struct{}
}

func startService(t *testing.T, bin string, env ...string) *service {
	t.Helper()
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "roles:\n  poller: %d\n", pollerKey), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+testLab.DirectDSN(), "LEASECTL_KEYS="+keysFile), env...)
	s := &service{cmd: cmd, log: &leasetest.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { defer close(s.done); _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-s.done })
	return s
}

// waitLog waits for line to appear in the service's log.
func (s *service) waitLog(t *testing.T, line string) {
	t.Helper()
	s.log.WaitFor(t, line, 1, time.Minute)
}

// stop sends SIGTERM and checks for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatalf("the service did not stop:\n%s", s.log)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d:\n%s", code, s.log)
	}
}

func pollerKeyFree(t *testing.T) bool {
	t.Helper()
	return leasetest.KeyFree(t, testLab.DirectDSN(), pollerKey)
}

// TestDefaultBuildHasNoPollerCode: gate one. Without the tag the binary
// holds neither the poller nor the lease, and WORKER_POLLER=on changes
// nothing.
func TestDefaultBuildHasNoPollerCode(t *testing.T) {
	bin := build(t, false)
	syms := symbols(t, bin)
	for _, name := range syms {
		if strings.HasPrefix(name, "github.com/leasectl/leasectl/lease.") {
			t.Errorf("the default build contains %s", name)
		}
	}
	if hasPoller(syms) {
		t.Error("the default build contains the poller loop")
	}
	if !hasPoller(symbols(t, build(t, true))) {
		t.Fatal("the tagged build lacks the poller loop: the check above proves nothing")
	}
	s := startService(t, bin, "WORKER_POLLER=on")
	s.waitLog(t, "poller not compiled in")
	if !pollerKeyFree(t) {
		t.Error("the poller key is held")
	}
	s.stop(t)
	if strings.Contains(s.log.String(), "leading") || strings.Contains(s.log.String(), "polling") {
		t.Errorf("the default build polled:\n%s", s.log)
	}
}

// TestTaggedBuildWithoutToggleIsInert: gate two.
func TestTaggedBuildWithoutToggleIsInert(t *testing.T) {
	for _, toggle := range []string{"", "WORKER_POLLER=off", "WORKER_POLLER=1"} {
		s := startService(t, build(t, true), toggle)
		s.waitLog(t, "poller compiled in but off")
		if !pollerKeyFree(t) {
			t.Errorf("%q: the poller key is held", toggle)
		}
		s.stop(t)
		if log := s.log.String(); strings.Contains(log, "connecting") || strings.Contains(log, "polling") {
			t.Errorf("%q: the poller ran:\n%s", toggle, log)
		}
	}
}

// TestBothGatesOpenOnePollerLeads: with the tag and WORKER_POLLER=on two
// replicas run, one polls under the lease, and the other takes over when it
// stops.
func TestBothGatesOpenOnePollerLeads(t *testing.T) {
	bin := build(t, true)
	a := startService(t, bin, "WORKER_POLLER=on")
	a.waitLog(t, "polling the queue")
	b := startService(t, bin, "WORKER_POLLER=on")
	b.waitLog(t, "standing by")
	if pollerKeyFree(t) {
		t.Error("the poller key is free while a poller runs")
	}
	a.stop(t)
	b.waitLog(t, "polling the queue")
	b.stop(t)
	if !pollerKeyFree(t) {
		t.Error("the poller key is still held after both services stopped")
	}
}

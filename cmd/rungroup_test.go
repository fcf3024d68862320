package cmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// groupFixture is a keys.yaml and a Procfile of witness programs, one lock
// file per role.
type groupFixture struct {
	*runFixture
	roles    []string
	procfile string
}

func newGroupFixture(t *testing.T, base int64, roles ...string) *groupFixture {
	t.Helper()
	f := &groupFixture{runFixture: newRunFixture(t, "unused", base-1), roles: roles, procfile: filepath.Join(t.TempDir(), "Procfile")}
	var keys, pf strings.Builder
	keys.WriteString("roles:\n")
	pf.WriteString("# the group's singletons\n")
	for i, r := range roles {
		fmt.Fprintf(&keys, "  %s: %d\n", r, base+int64(i))
		fmt.Fprintf(&pf, "%s: %s -lock %s -notify %s\n", r, f.witness, filepath.Join(f.dir, r+".lock"), f.events.Path)
	}
	if err := os.WriteFile(f.keys, []byte(keys.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.procfile, []byte(pf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *groupFixture) startGroup(name string) *replica {
	f.t.Helper()
	return f.startLeasectl(needLab(f.t).DirectDSN()+"&application_name="+name, "run", "--procfile", f.procfile, "--retry-interval", "100ms", "-o", "json")
}

// sessionsOf counts the server sessions named name.
func sessionsOf(t *testing.T, name string) int {
	t.Helper()
	var n int
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "")
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunProcfileInputErrors(t *testing.T) {
	f := newRunFixture(t, "poller", 9300000)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A DSN nothing listens on: every error below comes before a connect.
	env := map[string]string{"LEASECTL_DSN": "postgres://u@127.0.0.1:1/db?connect_timeout=1", "LEASECTL_KEYS": f.keys}
	unknown := write("unknown", "poller: true\n# a comment\nsweeper: true\n")
	syntax := write("syntax", "poller true\n")
	missing := write("missing", "poller: /nonexistent/worker\n")
	good := write("good", "poller: true\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown role", []string{"run", "--procfile", unknown}, unknown + `:3: role "sweeper" is not in ` + f.keys + " (it has poller)"},
		{"syntax", []string{"run", "--procfile", syntax}, syntax + ":1:"},
		{"missing program", []string{"run", "--procfile", missing}, missing + `:1: cannot run "/nonexistent/worker"`},
		{"no file", []string{"run", "--procfile", filepath.Join(dir, "nope")}, "nope"},
		{"with a role", []string{"run", "--procfile", good, "--role", "poller"}, "either --procfile FILE or --role"},
		{"with a command", []string{"run", "--procfile", good, "--", "true"}, "give no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, env, tc.args...)
			if res.Code != ExitUsage || !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", res.Code, res.Stderr, tc.want)
			}
		})
	}
}

// TestRunProcfileLeadsEveryRoleOnce: two replicas of one Procfile run each
// role's program exactly once, on two sessions each; SIGKILL the one that
// leads most, and the other runs every role; SIGTERM stops it with exit 0,
// leaving no program and no key.
func TestRunProcfileLeadsEveryRoleOnce(t *testing.T) {
	roles := []string{"poller", "scheduler", "reconciler", "sweeper"}
	f := newGroupFixture(t, 9300010, roles...)
	a := f.startGroup("group-a")
	b := f.startGroup("group-b")
	byReplica := map[int]*replica{a.cmd.Process.Pid: a, b.cmd.Process.Pid: b}
	running := map[string]leasetest.Event{} // role -> its program
	for len(running) < len(roles) {
		ev := f.next(leasetest.Start)
		if prev, ok := running[ev.Role]; ok {
			t.Fatalf("role %s started twice: by %d and %d", ev.Role, prev.PPID, ev.PPID)
		}
		if byReplica[ev.PPID] == nil {
			t.Fatalf("program %d of role %s is not a child of a replica", ev.PID, ev.Role)
		}
		running[ev.Role] = ev
	}
	for _, name := range []string{"group-a", "group-b"} {
		if n := sessionsOf(t, name); n > 3 {
			t.Errorf("replica %s has %d server sessions, want at most 3", name, n)
		}
	}
	leads := map[int]int{}
	for _, ev := range running {
		leads[ev.PPID]++
	}
	victim, survivor := a, b
	if leads[b.cmd.Process.Pid] > leads[a.cmd.Process.Pid] {
		victim, survivor = b, a
	}
	_ = victim.cmd.Process.Kill()
	<-victim.exited
	for role, ev := range running {
		if ev.PPID == victim.cmd.Process.Pid {
			delete(running, role)
		}
	}
	for len(running) < len(roles) {
		ev := f.next(leasetest.Start)
		if ev.PPID != survivor.cmd.Process.Pid {
			t.Fatalf("role %s started by %d, want the survivor %d", ev.Role, ev.PPID, survivor.cmd.Process.Pid)
		}
		if _, ok := running[ev.Role]; ok {
			t.Fatalf("role %s started twice", ev.Role)
		}
		running[ev.Role] = ev
	}
	if code := survivor.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM:\n%s", code, survivor.log)
	}
	f.noOverlap()
	for role, ev := range running {
		if isRunning(ev.PID) {
			t.Errorf("the program of %s (%d) still runs", role, ev.PID)
		}
	}
	for i := range roles {
		if !leasetest.KeyFreed(t, needLab(t).DirectDSN(), 9300010+int64(i), 10*time.Second) {
			t.Errorf("key of %s still held after every replica exited", roles[i])
		}
	}
	if !strings.Contains(survivor.log.String(), `"role":"poller"`) {
		t.Errorf("the log does not name the roles:\n%s", survivor.log)
	}
}

func isRunning(pid int) bool { return running(pid) }

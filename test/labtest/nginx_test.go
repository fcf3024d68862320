package labtest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
)

// TestNginx starts a lab whose front doors are nginx instances over the
// primary and the twin (round robin without and with a shared zone, hash,
// least_conn, random; two workers each), tells the two servers apart by
// their system identifiers, checks where each policy sends connections,
// and that Stop, from the saved state, leaves no nginx process behind.
func TestNginx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	split := []string{"primary", labtest.TwinBackend}
	l, d, err := labtest.Start(ctx, lab.Options{Dir: dir, Poolers: []lab.PoolerSpec{}}, labtest.Spec{
		Nginx: []labtest.NginxSpec{
			{Name: "rr", Backends: split},
			{Name: "zone", Backends: split, Zone: true},
			{Name: "hash", Backends: split, Policy: "hash"},
			{Name: "lc", Backends: split, Policy: "least_conn", Zone: true},
			{Name: "rand", Backends: split, Policy: "random"},
		},
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = l.Stop(context.Background())
		}
	}()
	names := []string{"rr", "zone", "hash", "lc", "rand"}
	if d.Twin() == nil {
		t.Fatal("nginx over the twin, and the lab has no twin")
	}

	// Two primaries, two systems: "P" is the primary, "T" the twin.
	const idSQL = "SELECT system_identifier FROM pg_control_system()"
	server := map[int64]string{}
	for name, dsn := range map[string]string{"P": l.DirectDSN(), "T": d.TwinDSN()} {
		var id int64
		if err := connectT(ctx, t, dsn).QueryRow(ctx, idSQL).Scan(&id); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		server[id] = name
	}
	if len(server) != 2 {
		t.Fatalf("the primary and the twin share a system identifier: %v", server)
	}
	// open opens a connection through the named nginx and returns it, the
	// server that answers it and the connection's local port.
	open := func(t *testing.T, name string) (*pgx.Conn, string, int) {
		t.Helper()
		conn := connectT(ctx, t, d.NginxDSN(name))
		var id int64
		if err := conn.QueryRow(ctx, idSQL).Scan(&id); err != nil {
			t.Fatalf("through %s: %v", name, err)
		}
		if server[id] == "" {
			t.Fatalf("through %s: system identifier %d is neither the primary's nor the twin's %v", name, id, server)
		}
		return conn, server[id], conn.PgConn().Conn().LocalAddr().(*net.TCPAddr).Port
	}
	closeAll := func(conns []*pgx.Conn) {
		for _, c := range conns {
			c.Close(ctx)
		}
	}

	t.Run("state", func(t *testing.T) {
		saved, sd, err := labtest.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(sd.Nginxes) != len(names) || sd.Twin() == nil || sd.TwinDSN() != d.TwinDSN() {
			t.Fatalf("lab.json lacks the nginx instances or the twin: %+v, twin %+v", sd.Nginxes, sd.Twin())
		}
		pw, _ := l.Password()
		for _, name := range names {
			dsn := d.NginxDSN(name)
			if dsn == "" || sd.NginxDSN(name) != dsn || strings.Contains(dsn, pw) {
				t.Errorf("%s: DSN %q (loaded: %q) empty, different or carrying the password", name, dsn, sd.NginxDSN(name))
			}
			n := sd.Nginx(name)
			if n == nil || n.Workers != 2 || n.Twin == nil || n.Version == "" || labtest.NginxPID(n) == 0 {
				t.Errorf("%s is not recorded with its defaults, the twin, its version and a live pid: %+v", name, n)
				continue
			}
			if conf := readFileT(n.ConfigFile); strings.Contains(conf, "/var/") || !strings.Contains(conf, "worker_processes 2;") {
				t.Errorf("%s: nginx.conf names /var or not 2 workers:\n%s", name, conf)
			}
		}
		if sd.NginxDSN("nope") != "" || sd.Nginx("nope") != nil {
			t.Error("an unknown name has a DSN")
		}
		if got, want := len(saved.Status()), len(l.Status()); got != want {
			t.Errorf("the loaded lab reports %d processes, the started one %d: are the front doors attached?", got, want)
		}
		kinds := map[string]string{}
		for _, c := range l.Status() {
			kinds[c.Name] = c.Kind
			if !c.Up || c.PID == 0 {
				t.Errorf("status: %s is not up: %+v", c.Name, c)
			}
		}
		for name, want := range map[string]string{"rr": "nginx round robin", "zone": "nginx round robin, zone", "hash": "nginx hash", "lc": "nginx least_conn, zone", "rand": "nginx random", "twin": "postgres (unrelated primary)"} {
			if kinds[name] != want {
				t.Errorf("status: %s is %q, want %q (all: %v)", name, kinds[name], want, kinds)
			}
		}
	})

	t.Run("processes run as the server user", func(t *testing.T) {
		u, err := user.Lookup(l.OSUser)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			master := labtest.NginxPID(d.Nginx(name))
			group := processGroup(master)
			if len(group) != 3 {
				t.Errorf("%s: the master's process group is %v: want the master and 2 workers", name, group)
			}
			for _, pid := range group {
				if uid := processUID(pid); uid != u.Uid {
					t.Errorf("%s: process %d runs as uid %s, want %s (%s)", name, pid, uid, u.Uid, l.OSUser)
				}
			}
		}
	})

	t.Run("round robin without zone reaches both", func(t *testing.T) {
		var conns []*pgx.Conn
		var seq strings.Builder
		var ports []int
		for range 40 {
			c, s, port := open(t, "rr")
			conns, ports = append(conns, c), append(ports, port)
			seq.WriteString(s)
		}
		closeAll(conns)
		got := seq.String()
		if !strings.Contains(got, "P") || !strings.Contains(got, "T") {
			t.Fatalf("40 connections through rr all reached one server: %s", got)
		}
		runs, longest := 0, 1
		for i := range got {
			if i+4 <= len(got) && strings.Count(got[i:i+4], got[i:i+1]) == 4 {
				runs++
			}
			j := i
			for j < len(got) && got[j] == got[i] {
				j++
			}
			longest = max(longest, j-i)
		}
		// Each worker keeps its own round-robin position and alternates on
		// its own, so a run on one server is at most as long as the
		// number of workers (2) while the workers take turns: within any
		// 3 consecutive connections one worker took two that were
		// consecutive for it. What this measures is how the kernel shares
		// the accepts between the workers (the log of workers below).
		t.Logf("rr (round robin, 2 workers, no zone), 40 connections in order: %s (P primary, T twin)", got)
		t.Logf("rr: %d of the 37 runs of 4 consecutive connections landed on one server; the longest run on one server is %d", runs, longest)
		t.Logf("rr: the worker that took each connection: %s", workersOf(d.Nginx("rr").LogFile, ports))
	})

	t.Run("round robin with zone alternates strictly", func(t *testing.T) {
		var conns []*pgx.Conn
		var seq strings.Builder
		var ports []int
		for range 20 {
			c, s, port := open(t, "zone")
			conns, ports = append(conns, c), append(ports, port)
			seq.WriteString(s)
		}
		closeAll(conns)
		got := seq.String()
		if strings.Contains(got, "PP") || strings.Contains(got, "TT") {
			t.Fatalf("20 consecutive connections through zone (round robin, shared zone) do not alternate: %s", got)
		}
		t.Logf("zone: %s; the worker that took each: %s", got, workersOf(d.Nginx("zone").LogFile, ports))
	})

	t.Run("hash reaches one server", func(t *testing.T) {
		var seq strings.Builder
		for range 20 {
			c, s, _ := open(t, "hash")
			c.Close(ctx)
			seq.WriteString(s)
		}
		if got := seq.String(); strings.Contains(got, "P") == strings.Contains(got, "T") {
			t.Fatalf("20 connections through hash ($remote_addr, always 127.0.0.1) reached %s: want one server", got)
		}
	})

	t.Run("least_conn with zone spreads held connections", func(t *testing.T) {
		c1, s1, _ := open(t, "lc")
		c2, s2, _ := open(t, "lc")
		closeAll([]*pgx.Conn{c1, c2})
		if s1 == s2 {
			t.Fatalf("two held connections through lc (least_conn, zone) both reached %s", s1)
		}
	})

	t.Run("random reaches both", func(t *testing.T) {
		seen := map[string]bool{}
		for i := 0; i < 40 && len(seen) < 2; i++ {
			c, s, _ := open(t, "rand")
			c.Close(ctx)
			seen[s] = true
		}
		if len(seen) < 2 {
			t.Fatalf("40 connections through rand (random) all reached %v", seen)
		}
	})

	t.Run("stop leaves nothing", func(t *testing.T) {
		runDir := l.RunDir
		using := map[int]bool{}
		for _, pid := range lab.ProcessesUsing(runDir) {
			using[pid] = true
		}
		var pids []int
		for _, name := range names {
			master := labtest.NginxPID(d.Nginx(name))
			if master == 0 {
				t.Fatalf("nginx %s has no live pid", name)
			}
			group := processGroup(master)
			if len(group) < 2 {
				t.Fatalf("nginx %s: its master's group has %d processes: %v", name, len(group), group)
			}
			for _, pid := range group {
				// The workers retitle themselves ("nginx: worker
				// process"): Stop's last sweep finds them by their
				// working directory.
				if !using[pid] {
					t.Errorf("nginx %s: process %d is not found by ProcessesUsing", name, pid)
				}
			}
			pids = append(pids, group...)
		}
		twinPID := lab.ServerPID(d.Twin())
		// Stop it as `leasectl lab down` does: from its saved state.
		saved, _, err := labtest.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		stopped = true
		if err := saved.Stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if left := lab.ProcessesUsing(runDir); len(left) > 0 {
			t.Fatalf("processes left behind after Stop: %v", left)
		}
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("nginx process %d still exists", pid)
			}
		}
		for _, c := range l.Status() {
			if c.Up || c.PID != 0 {
				t.Errorf("after stop, %s still up: %+v", c.Name, c)
			}
		}
		if _, err := os.Stat(runDir); err == nil {
			t.Errorf("run dir %s still exists", runDir)
		}
		if ids := sharedMemoryOf(twinPID); len(ids) > 0 {
			t.Errorf("the twin's shared memory is left behind: shmids %v", ids)
		}
	})
}

// processUID returns the real uid of process pid, as /proc shows it.
func processUID(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}

// workersOf reads the session lines of an nginx log and returns, for each
// client port in ports, in order, the worker that served it ("a" for the
// first worker seen, "b" for the second, ...; "?" for a session not logged
// within 5 s). A session is logged when it ends.
func workersOf(logFile string, ports []int) string {
	line := regexp.MustCompile(`127\.0\.0\.1:(\d+) worker (\d+) -> `)
	deadline := time.Now().Add(5 * time.Second)
	for {
		worker := map[int]string{}
		for _, m := range line.FindAllStringSubmatch(readFileT(logFile), -1) {
			port, _ := strconv.Atoi(m[1])
			worker[port] = m[2]
		}
		all := true
		for _, p := range ports {
			all = all && worker[p] != ""
		}
		if all || time.Now().After(deadline) {
			letter := map[string]string{}
			var b strings.Builder
			for _, p := range ports {
				w := worker[p]
				if w == "" {
					b.WriteString("?")
					continue
				}
				if letter[w] == "" {
					letter[w] = string(rune('a' + len(letter)))
				}
				b.WriteString(letter[w])
			}
			return b.String()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNginxOptionErrors: nginx instances that cannot work are refused
// before anything starts, with a message that says what to change.
func TestNginxOptionErrors(t *testing.T) {
	primary := []string{"primary"}
	for _, tc := range []struct {
		spec labtest.Spec
		want string
	}{
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a", Backends: []string{"standby"}}}}, "Standby: true"},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a", Backends: []string{"replica"}}}}, `neither "primary" nor "standby"`},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a"}}}, "no Backends"},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a", Backends: primary}, {Name: "a", Backends: primary}}}, "own name"},
		{labtest.Spec{HAProxy: []labtest.HAProxySpec{{Name: "a", Backends: primary}}, Nginx: []labtest.NginxSpec{{Name: "a", Backends: primary}}}, "own name"},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a/b", Backends: primary}}}, "letters, digits"},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a", Backends: primary, Policy: "ip_hash"}}}, `"least_conn", "random" or "hash"`},
		{labtest.Spec{Nginx: []labtest.NginxSpec{{Name: "a", Backends: primary, Workers: -1}}}, "out of range"},
	} {
		_, _, err := labtest.Start(context.Background(), lab.Options{}, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.spec, err, tc.want)
		}
	}
}

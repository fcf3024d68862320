package cmd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease/leaseapi"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
	"github.com/leasectl/leasectl/test/runtimes"
)

// The client programs of docs/serve.md, each run as the page shows it with
// its language's runtime (Debian's python3 with python3-psycopg, node with
// node-postgres from the npm registry, ruby with ruby-pg, go) against a
// real serve, writing through PgBouncer in transaction mode.

// serveClient is one language's program of docs/serve.md.
type serveClient struct {
	name, lang, file string
	command          func(t *testing.T, file string) *exec.Cmd
}

var serveClients = []serveClient{
	{"python", "python", "worker.py", func(t *testing.T, file string) *exec.Cmd {
		return exec.Command(runtimes.PsycopgPython(t), file)
	}},
	{"node", "js", "worker.mjs", func(t *testing.T, file string) *exec.Cmd {
		runtimes.LinkNodePg(t, filepath.Dir(file))
		return exec.Command(runtimes.Need(t, "node", "apt-get install nodejs"), file)
	}},
	{"ruby", "ruby", "worker.rb", func(t *testing.T, file string) *exec.Cmd {
		return exec.Command(runtimes.Need(t, "ruby", "apt-get install ruby-pg"), file)
	}},
	{"go", "go", "worker.go", func(t *testing.T, file string) *exec.Cmd {
		bin := strings.TrimSuffix(file, ".go")
		build := exec.Command(runtimes.Need(t, "go", "https://go.dev/dl/"), "build", "-o", bin, file)
		build.Dir = ".." // the module's root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return exec.Command(bin)
	}},
}

// TestServeDocClients runs each client of docs/serve.md beside a serve
// that leads its role: it writes fenced rows with the term's epoch; after
// a resign (the replica stands by 2 s, then leads again, there being no
// other), its blocking query takes it to the new term, whose epoch its
// rows then carry.
func TestServeDocClients(t *testing.T) {
	l := needLab(t)
	direct := pgtest.Database(t, l, "serve_clients")
	p := l.Pooler("transaction")
	if p == nil {
		t.Fatal("the lab has no pooler \"transaction\"")
	}
	pooled := l.DSN(p.Port, l.User, "serve_clients")
	password, err := l.Password()
	if err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Conn(t, direct, "serve-clients")
	pgtest.Exec(t, admin, "CREATE TABLE ticks (epoch bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())")

	f := newRunFixture(t, "scheduler", 9400010)
	r := f.startLeasectl(direct, append([]string{"serve", "--role", "scheduler", "--listen", "127.0.0.1:0"}, serveFlags...)...)
	r.log.WaitFor(t, "serving the API", 1, hang)
	m := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`).FindStringSubmatch(r.log.String())
	if m == nil {
		t.Fatalf("no listen= in serve's log:\n%s", r.log)
	}
	base := "http://" + m[1]
	get := func(path string) leaseapi.RoleState {
		var st leaseapi.RoleState
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := jsonDecode(resp, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, c := range serveClients {
		t.Run(c.name, func(t *testing.T) {
			st := get("/v1/roles/scheduler")
			for !st.Leader {
				st = get(fmt.Sprintf("/v1/roles/scheduler?epoch=%d&wait=30s", st.Epoch))
			}
			pgtest.Exec(t, admin, "TRUNCATE ticks")
			file := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(file, []byte(serveDocBlock(t, c.lang)), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := c.command(t, file)
			cmd.Env = append(os.Environ(), "LEASECTL_SERVE_URL="+base, "LEASECTL_ROLE=scheduler", "DATABASE_URL="+pooled, "PGPASSWORD="+password)
			out := &leasetest.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			defer func() { _ = cmd.Process.Kill(); <-exited }()
			rows := func(epoch int64) int {
				var n int
				if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM ticks WHERE epoch = $1", epoch).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			awaitRows := func(epoch int64) {
				deadline := time.Now().Add(hang)
				for rows(epoch) < 3 {
					select {
					case <-exited:
						t.Fatalf("the %s client exited:\n%s", c.name, out)
					case <-time.After(50 * time.Millisecond):
					}
					if time.Now().After(deadline) {
						t.Fatalf("the %s client wrote no rows of epoch %d:\n%s", c.name, epoch, out)
					}
				}
			}
			awaitRows(st.Epoch)
			resp, err := http.Post(base+"/v1/roles/scheduler/resign", "", nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("resign: %v %v", resp, err)
			}
			resp.Body.Close()
			next := get("/v1/roles/scheduler?epoch=0&wait=60s")
			if !next.Leader || next.Epoch <= st.Epoch {
				t.Fatalf("after the resign: %+v", next)
			}
			awaitRows(next.Epoch)
			var late int
			if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM ticks WHERE epoch < $1 AND at > (SELECT min(at) FROM ticks WHERE epoch = $1)", next.Epoch).Scan(&late); err != nil {
				t.Fatal(err)
			}
			if late > 0 {
				t.Errorf("%d rows of an old epoch committed after the new term's first", late)
			}
		})
	}
}

// serveDocBlock returns the one ```lang block of docs/serve.md that reads
// LEASECTL_SERVE_URL.
func serveDocBlock(t *testing.T, lang string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "serve.md"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, part := range strings.Split(string(data), "\n```"+lang+"\n")[1:] {
		block, _, _ := strings.Cut(part, "\n```\n")
		if strings.Contains(block, "LEASECTL_SERVE_URL") {
			found = append(found, block+"\n")
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/serve.md has %d ```%s blocks that read LEASECTL_SERVE_URL, want 1", len(found), lang)
	}
	return found[0]
}

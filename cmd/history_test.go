package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/pgtest"
)

const (
	historyPollerKey    = 1840200001
	historySchedulerKey = 1840200002
)

// historyKeys writes a keys file whose roles use keys no other test takes.
func historyKeys(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("roles:\n  poller: 1840200001\n  scheduler: 1840200002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testLease is a real lease (lease.Run) of this process, whose work reports
// each term it leads in and runs until the lease is stopped.
type testLease struct {
	cancel context.CancelFunc
	done   chan struct{}
	led    chan lease.Session
	once   sync.Once
	err    error
}

// startLease runs a lease of role on key over dsn, with heartbeat as its
// heartbeat interval (and its stand-by's wait for the key), until the test
// ends or stop is called.
func startLease(t *testing.T, dsn, role string, key int64, heartbeat time.Duration) *testLease {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &testLease{cancel: cancel, done: make(chan struct{}), led: make(chan lease.Session, 16)}
	cfg := lease.Config{Role: role, Key: key, DSN: dsn, RetryInterval: 200 * time.Millisecond,
		HeartbeatInterval: heartbeat, HeartbeatTimeout: 2 * time.Second, StopTimeout: time.Second}
	go func() {
		defer close(l.done)
		l.err = lease.Run(ctx, cfg, func(ctx context.Context) error {
			if s, ok := lease.SessionFrom(ctx); ok {
				l.led <- *s
			}
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() { l.stop(t) })
	return l
}

// leads waits until the lease's work starts in a new term, and returns it.
func (l *testLease) leads(t *testing.T, what string) lease.Session {
	t.Helper()
	select {
	case s := <-l.led:
		if s.Epoch == 0 {
			t.Fatalf("%s: the lease leads without a term", what)
		}
		return s
	case <-l.done:
		t.Fatalf("%s: the lease stopped: %v", what, l.err)
	case <-time.After(time.Minute):
		t.Fatalf("%s: the lease did not lead within a minute", what)
	}
	return lease.Session{}
}

// stop ends the lease the way SIGTERM ends leasectl run: its work returns,
// and its term ends as released.
func (l *testLease) stop(t *testing.T) {
	l.once.Do(func() {
		l.cancel()
		select {
		case <-l.done:
		case <-time.After(time.Minute):
			t.Errorf("the lease did not stop within a minute of being cancelled")
		}
	})
}

// history runs `leasectl --dsn DSN --keys KEYS history ARGS...`.
func history(t *testing.T, dsn, keysPath string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, append([]string{"--dsn", dsn, "--keys", keysPath, "history"}, args...)...)
}

// historyTable reads the table of history's text output: one map of cells
// by column name per row, the columns found where the header puts them.
func historyTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "EPOCH ") })
	if at < 0 {
		t.Fatalf("no table in:\n%s", out)
	}
	header := lines[at]
	var names []string
	var starts []int
	for _, name := range []string{"EPOCH", "HOLDER", "APPLICATION", "BEGAN", "ENDED", "HOW", "LASTED", "LEADERLESS BEFORE"} {
		if i := strings.Index(header, name); i >= 0 {
			names, starts = append(names, name), append(starts, i)
		}
	}
	var rows []map[string]string
	for _, l := range lines[at+1:] {
		if l == "" {
			break
		}
		r := map[string]string{}
		for i, name := range names {
			end := len(l)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(l))
			}
			if starts[i] < end {
				r[name] = strings.TrimSpace(l[starts[i]:end])
			} else {
				r[name] = ""
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// historyDoc runs history with -o json and decodes the document.
func historyDoc(t *testing.T, dsn, keysPath string, args ...string) historyJSON {
	t.Helper()
	res := history(t, dsn, keysPath, append(args, "-o", "json")...)
	if res.Code != ExitOK {
		t.Fatalf("history %v -o json: exit %d: %s", args, res.Code, res.Stderr)
	}
	checkJSONDoc(t, res.Stdout, res.Code, "history")
	var doc historyJSON
	if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
		t.Fatalf("history -o json: %v\n%s", err, res.Stdout)
	}
	return doc
}

// wantHows checks the epochs and end reasons of history's rows, newest first.
func wantHows(t *testing.T, out string, want ...[2]string) []map[string]string {
	t.Helper()
	rows := historyTable(t, out)
	var got, wanted []string
	for _, r := range rows {
		how := r["HOW"]
		if r["ENDED"] == "live" {
			how = "live"
		}
		got = append(got, r["EPOCH"]+" "+how)
	}
	for _, w := range want {
		wanted = append(wanted, w[0]+" "+w[1])
	}
	if !slices.Equal(got, wanted) {
		t.Fatalf("history rows %q, want %q:\n%s", got, wanted, out)
	}
	return rows
}

// TestHistoryOfRealTerms: terms that real leases lead and end, read back as
// the user sees them. Before any lease ran the database has no record
// (exit 1); then a released term, a live one, one that lost its session,
// one that stepped down for leasectl failover; --limit, --since, a bare KEY,
// -o wide and -o json.
func TestHistoryOfRealTerms(t *testing.T) {
	l := needLab(t)
	dsn := pgtest.Database(t, l, "history_cmd")
	keysPath := historyKeys(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{{"poller"}, {"poller", "-o", "json"}} {
		res := history(t, dsn, keysPath, args...)
		if res.Code != ExitCheckFailed || res.Stdout != "" ||
			res.Stderr != "error: no term record in this database: nothing has led with a term yet; leasectl run creates it, or run `leasectl fence init`\n" {
			t.Errorf("history %v without a term record: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", args, res.Code, res.Stdout, res.Stderr)
		}
	}

	a := startLease(t, dsn, "poller", historyPollerKey, 200*time.Millisecond)
	first := a.leads(t, "the first lease")
	a.stop(t)
	b := startLease(t, dsn, "poller", historyPollerKey, 200*time.Millisecond)
	second := b.leads(t, "the second lease")

	res := history(t, dsn, keysPath, "poller")
	if res.Code != ExitOK || res.Stderr != "" {
		t.Fatalf("history poller: exit %d: %s", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "role poller · key 1840200001\n") || !strings.Contains(res.Stdout, "database history_cmd") {
		t.Errorf("the header does not name the role, its key and the database:\n%s", res.Stdout)
	}
	rows := wantHows(t, res.Stdout, [2]string{strconv.FormatInt(second.Epoch, 10), "live"}, [2]string{strconv.FormatInt(first.Epoch, 10), "released"})
	pid := strconv.Itoa(os.Getpid())
	for _, r := range rows {
		if r["HOLDER"] != host+" pid "+pid || r["APPLICATION"] != "leasectl lease poller@"+host+"#"+strconv.Itoa(os.Getpid()) {
			t.Errorf("holder %q, application %q: want %s pid %s, leasectl lease poller@%s#%s", r["HOLDER"], r["APPLICATION"], host, pid, host, pid)
		}
		if r["BEGAN"] == "" || r["LASTED"] == "" {
			t.Errorf("a row without its start or length: %v\n%s", r, res.Stdout)
		}
	}
	if rows[0]["LEADERLESS BEFORE"] == "" || rows[1]["LEADERLESS BEFORE"] != "" {
		t.Errorf("LEADERLESS BEFORE: %q for the second term (want a gap), %q for the first (want none)\n%s",
			rows[0]["LEADERLESS BEFORE"], rows[1]["LEADERLESS BEFORE"], res.Stdout)
	}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasSuffix(l, " ") || strings.Contains(l, "\x1b[") {
			t.Errorf("trailing blanks or escape codes in piped output: %q", l)
		}
	}

	doc := historyDoc(t, dsn, keysPath, "poller")
	if doc.Role == nil || *doc.Role != "poller" || doc.Key != "1840200001" || doc.Since != nil || doc.Limit != 0 || doc.Truncated || len(doc.Terms) != 2 {
		t.Fatalf("history -o json: role %v key %s since %v limit %d truncated %v, %d terms; want poller, all 2",
			doc.Role, doc.Key, doc.Since, doc.Limit, doc.Truncated, len(doc.Terms))
	}
	live, released := doc.Terms[0], doc.Terms[1]
	if live.Epoch != second.Epoch || live.TermID != second.TermID || live.Ended != nil || live.EndReason != nil || live.LeaderlessBeforeMS == nil ||
		live.Holder.BackendPID != second.BackendPID || live.Holder.FenceBackendPID != second.FenceBackendPID {
		t.Errorf("the live term: %+v\nwant epoch %d, term %s, backends %d and %d, no end, a leaderless gap",
			live, second.Epoch, second.TermID, second.BackendPID, second.FenceBackendPID)
	}
	if released.Epoch != first.Epoch || released.Ended == nil || released.EndReason == nil || *released.EndReason != "released" ||
		released.LeaderlessBeforeMS != nil || released.DurationMS <= 0 || released.Evicted ||
		!released.Ended.After(released.Began) || released.Holder.BackendPID != first.BackendPID {
		t.Errorf("the released term: %+v", released)
	}
	for _, tj := range doc.Terms {
		if tj.Role != "poller" || tj.Key != "1840200001" || tj.Holder.Host != host || tj.Holder.OSPID != os.Getpid() ||
			tj.Holder.Application != "leasectl lease poller@"+host+"#"+strconv.Itoa(os.Getpid()) || tj.Holder.BackendStart.IsZero() ||
			tj.HeartbeatIntervalMS != 200 || tj.HeartbeatTimeoutMS != 2000 || tj.StopTimeoutMS != 1000 || tj.Renewed.Before(tj.Began) {
			t.Errorf("term %d: %+v", tj.Epoch, tj)
		}
	}

	// The server ends the leader's session: the lease stops its work,
	// leads again in a new term and records how the old one ended.
	admin := pgtest.Conn(t, dsn, "history-admin")
	pgtest.Exec(t, admin, "SELECT pg_terminate_backend($1)", int32(second.BackendPID))
	third := b.leads(t, "after its session was ended")
	// A stand-by takes over when the leader steps down (leasectl failover).
	// It waits for the key 5s at a time (its heartbeat interval), so that
	// it is in the server's lock queue, ahead of the leader stepping down,
	// when the key is released.
	c := startLease(t, dsn, "poller", historyPollerKey, 5*time.Second)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if res := who(t, keysPath, "--dsn", dsn, "poller"); strings.Contains(res.Stdout, "1 waiting") || time.Now().After(deadline) {
			break
		}
	}
	if res := runCLI(t, nil, "--dsn", dsn, "--keys", keysPath, "failover", "poller", "--yes", "--wait", "1m"); res.Code != ExitOK {
		t.Fatalf("failover poller: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	fourth := c.leads(t, "after the failover")

	res = history(t, dsn, keysPath, "poller")
	epoch := func(s lease.Session) string { return strconv.FormatInt(s.Epoch, 10) }
	wantHows(t, res.Stdout, [2]string{epoch(fourth), "live"}, [2]string{epoch(third), "stepped down"},
		[2]string{epoch(second), "session lost"}, [2]string{epoch(first), "released"})
	if !strings.Contains(res.Stdout, "\nsession lost: the holder lost its session") {
		t.Errorf("no note on the lost session:\n%s", res.Stdout)
	}

	// --limit: the newest, and a note that there are more.
	res = history(t, dsn, keysPath, "poller", "--limit", "1")
	wantHows(t, res.Stdout, [2]string{epoch(fourth), "live"})
	if !strings.Contains(res.Stdout, "showing the newest 1 term; --limit 0 shows them all") {
		t.Errorf("history --limit 1 does not say there are more:\n%s", res.Stdout)
	}
	if doc := historyDoc(t, dsn, keysPath, "poller", "--limit", "1"); len(doc.Terms) != 1 || !doc.Truncated || doc.Limit != 1 {
		t.Errorf("history --limit 1 -o json: %d terms, truncated %v, limit %d", len(doc.Terms), doc.Truncated, doc.Limit)
	}

	// --since: a time (here the third term's start, on the server's
	// clock), or a duration back from the server's clock.
	all := historyDoc(t, dsn, keysPath, "poller")
	since := all.Terms[1].Began.Format(time.RFC3339Nano)
	res = history(t, dsn, keysPath, "poller", "--since", since)
	wantHows(t, res.Stdout, [2]string{epoch(fourth), "live"}, [2]string{epoch(third), "stepped down"})
	if doc := historyDoc(t, dsn, keysPath, "poller", "--since", since); doc.Since == nil || !doc.Since.Equal(all.Terms[1].Began) || len(doc.Terms) != 2 {
		t.Errorf("history --since %s -o json: since %v, %d terms", since, doc.Since, len(doc.Terms))
	}
	res = history(t, dsn, keysPath, "poller", "--since", "1h")
	wantHows(t, res.Stdout, [2]string{epoch(fourth), "live"}, [2]string{epoch(third), "stepped down"},
		[2]string{epoch(second), "session lost"}, [2]string{epoch(first), "released"})
	if !strings.Contains(res.Stdout, "role poller · key 1840200001 · since ") {
		t.Errorf("the header does not say since when:\n%s", res.Stdout)
	}
	if doc := historyDoc(t, dsn, keysPath, "poller", "--since", "1h"); doc.Since == nil || !doc.Since.Equal(doc.Now.Add(-time.Hour)) {
		t.Errorf("history --since 1h -o json: since %v, now %v: want an hour before now", doc.Since, doc.Now)
	}

	// A bare KEY is its role's.
	res = history(t, dsn, keysPath, "1840200001")
	wantHows(t, res.Stdout, [2]string{epoch(fourth), "live"}, [2]string{epoch(third), "stepped down"},
		[2]string{epoch(second), "session lost"}, [2]string{epoch(first), "released"})

	// On a terminal: the narrow table, and every column with -o wide.
	env := map[string]string{"COLUMNS": "200", "NO_COLOR": "1"}
	narrow := runCLIWith(t, context.Background(), env, true, "", "--dsn", dsn, "--keys", keysPath, "history", "poller")
	if narrow.Code != ExitOK || strings.Contains(narrow.Stdout, "APPLICATION") || !strings.Contains(narrow.Stdout, "EPOCH  HOLDER  ") {
		t.Errorf("history on a terminal: exit %d, want the table without APPLICATION:\n%s", narrow.Code, narrow.Stdout)
	}
	// ... and the terms as a timeline, oldest first, the live one last.
	var bars []string
	for _, l := range strings.Split(narrow.Stdout[strings.Index(narrow.Stdout, "\nTimeline ")+1:], "\n") {
		if strings.HasPrefix(l, "e") && strings.Contains(l, "█") {
			bars = append(bars, l)
		}
	}
	if !strings.Contains(narrow.Stdout, "\nTimeline ") || len(bars) != 4 || !strings.HasPrefix(bars[0], "e"+epoch(first)+" ") ||
		!strings.HasPrefix(bars[3], "e"+epoch(fourth)+" ") || !strings.HasSuffix(bars[3], "▶") {
		t.Errorf("history on a terminal: want a timeline of the 4 terms, oldest first, the live one marked:\n%s", narrow.Stdout)
	}
	if strings.Contains(res.Stdout, "Timeline") {
		t.Errorf("a timeline in piped output:\n%s", res.Stdout)
	}
	wide := runCLIWith(t, context.Background(), env, true, "", "--dsn", dsn, "--keys", keysPath, "history", "poller", "-o", "wide")
	if rows := historyTable(t, wide.Stdout); wide.Code != ExitOK || len(rows) != 4 || rows[0]["APPLICATION"] != "leasectl lease poller@"+host+"#"+strconv.Itoa(os.Getpid()) {
		t.Errorf("history -o wide on a terminal: exit %d, want APPLICATION:\n%s", wide.Code, wide.Stdout)
	}
}

// TestHistoryOfARoleWithoutTerms: the record exists, but nothing has led
// the role: an empty table, a one-line note, exit 0.
func TestHistoryOfARoleWithoutTerms(t *testing.T) {
	dsn := pgtest.Database(t, needLab(t), "history_cmd_empty")
	if res := fenceInit(t, dsn); res.Code != ExitOK {
		t.Fatalf("fence init: exit %d: %s", res.Code, res.Stderr)
	}
	keysPath := historyKeys(t)
	res := history(t, dsn, keysPath, "scheduler")
	if res.Code != ExitOK || res.Stderr != "" {
		t.Fatalf("history scheduler: exit %d: %s", res.Code, res.Stderr)
	}
	if rows := historyTable(t, res.Stdout); len(rows) != 0 {
		t.Errorf("rows for a role that never led: %v", rows)
	}
	if !strings.HasSuffix(res.Stdout, "\n\nno terms: nothing has led scheduler with a term in database history_cmd_empty yet\n") {
		t.Errorf("no note that nothing has led the role:\n%s", res.Stdout)
	}
	res = history(t, dsn, keysPath, "scheduler", "--since", "24h")
	if res.Code != ExitOK || !strings.Contains(res.Stdout, "no terms: no term of scheduler began since ") {
		t.Errorf("history scheduler --since 24h: exit %d:\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	doc := historyDoc(t, dsn, keysPath, "scheduler")
	if doc.Terms == nil || len(doc.Terms) != 0 || *doc.Role != "scheduler" || doc.Key != strconv.Itoa(historySchedulerKey) {
		t.Errorf("history scheduler -o json: %+v", doc)
	}
	// An unknown role is a mistake in the call, with the known ones.
	if res := history(t, dsn, keysPath, "polller"); res.Code != ExitUsage || !strings.Contains(res.Stderr, `unknown role "polller"`) || !strings.Contains(res.Stderr, "poller, scheduler") {
		t.Errorf("history polller: exit %d: %s", res.Code, res.Stderr)
	}
}

// TestHistoryWithoutPrivilege: a role that may not read the record is exit
// 3, told what it needs.
func TestHistoryWithoutPrivilege(t *testing.T) {
	const role = "history_cmd_reader"
	l := needLab(t)
	dsn := pgtest.Database(t, l, "history_cmd_denied")
	if res := fenceInit(t, dsn); res.Code != ExitOK {
		t.Fatalf("fence init: exit %d: %s", res.Code, res.Stderr)
	}
	pgtest.Login(t, l, role, "history-cmd-reader-pw")
	res := history(t, l.DSN(l.Primary.Port, role, "history_cmd_denied"), historyKeys(t), "poller")
	if res.Code != ExitUnavailable || res.Stdout != "" || !strings.Contains(res.Stderr, "permission denied for schema leasectl") ||
		!strings.Contains(res.Stderr, `role "`+role+`" needs USAGE on schema leasectl and SELECT on leasectl.term_history`) {
		t.Errorf("history as %s: exit %d, want 3 and what to grant\nstdout:\n%s\nstderr:\n%s", role, res.Code, res.Stdout, res.Stderr)
	}
}

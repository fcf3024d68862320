package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
)

// whoJSON is the document of `leasectl who -o json` (docs/json.md), for
// the tests to decode what who prints.
type whoJSON struct {
	docHeader
	Server       dbconn.ServerInfo `json:"server"`
	Now          time.Time         `json:"now"`
	StaleAfterMS float64           `json:"stale_after_ms"`
	Leases       []leaseJSON       `json:"leases"`
	Hidden       bool              `json:"hidden"`
	RevealGrant  *string           `json:"reveal_grant"`
}

// whoKeys writes a keys file whose roles use keys no other test takes.
func whoKeys(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("roles:\n  poller: 1840100001\n  scheduler: 1840100002\n  reconciler: 1840100003\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	pollerKey    = 1840100001
	schedulerKey = 1840100002
)

// who runs `leasectl --dsn DSN --keys KEYS who ARGS...` against the lab's
// primary, unless args name another --dsn.
func who(t *testing.T, keysPath string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, nil, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who"}, args...)...)
}

func pidOf(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	return strconv.Itoa(int(pgtest.PID(t, conn)))
}

// hold takes key on conn for the rest of the test.
func hold(t *testing.T, conn *pgx.Conn, key int64) {
	t.Helper()
	if ok, err := locks.TryLock(context.Background(), conn, key); err != nil || !ok {
		t.Fatalf("take key %d: %v, %v", key, ok, err)
	}
	t.Cleanup(func() { _, _ = locks.Unlock(context.Background(), conn, key) })
}

// row returns the output line that has every one of fields as a
// whitespace-separated field, in order, or fails.
func row(t *testing.T, out string, fields ...string) string {
	t.Helper()
	if l, ok := findRow(out, fields...); ok {
		return l
	}
	t.Fatalf("no line with %q in:\n%s", fields, out)
	return ""
}

func findRow(out string, fields ...string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		f, i := strings.Fields(l), 0
		for _, x := range f {
			if i < len(fields) && x == fields[i] {
				i++
			}
		}
		if i == len(fields) {
			return l, true
		}
	}
	return "", false
}

func TestWhoShowsHolderAndWaiterOfEachRole(t *testing.T) {
	ctx := context.Background()
	keysPath := whoKeys(t)
	leader := pgtest.Conn(t, needLab(t).DirectDSN(), "poller-a")
	standby := pgtest.Conn(t, needLab(t).DirectDSN(), "poller-b")
	hold(t, leader, pollerKey)
	leaderPID, standbyPID := pidOf(t, leader), pidOf(t, standby)
	blocked := pgtest.Wait(t, standby, pollerKey)
	t.Cleanup(func() {
		_, _ = locks.Unlock(ctx, leader, pollerKey)
		<-blocked
		_, _ = locks.Unlock(ctx, standby, pollerKey)
	})
	var res cliResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		res = who(t, keysPath)
		if _, ok := findRow(res.Stdout, "poller", "waiting", standbyPID); ok || time.Now().After(deadline) {
			break
		}
	}
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	row(t, res.Stdout, "poller", strconv.Itoa(pollerKey), "HELD,", "1", "waiting", leaderPID, needLab(t).User, "poller-a", "idle")
	row(t, res.Stdout, "poller", strconv.Itoa(pollerKey), "waiting", standbyPID, "poller-b")
	row(t, res.Stdout, "scheduler", strconv.Itoa(schedulerKey), "FREE", "-")
	row(t, res.Stdout, "reconciler", "FREE")
	if !strings.Contains(res.Stdout, fmt.Sprintf("server 127.0.0.1:%d", needLab(t).Primary.Port)) || !strings.Contains(res.Stdout, "PostgreSQL ") {
		t.Errorf("header does not say which server answered:\n%s", res.Stdout)
	}
	if strings.Contains(res.Stdout, "\x1b[") {
		t.Errorf("escape codes in output that is not a terminal:\n%q", res.Stdout)
	}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing blanks: %q", l)
		}
	}

	// Narrowed to one role, by name or by key: the others are not shown.
	for _, arg := range []string{"poller", strconv.Itoa(pollerKey)} {
		one := who(t, keysPath, arg)
		row(t, one.Stdout, "poller", "HELD,", leaderPID)
		if strings.Contains(one.Stdout, "scheduler") {
			t.Errorf("who %s shows other roles:\n%s", arg, one.Stdout)
		}
	}
}

func TestWhoKeysAtTheEdgesOfTheEncoding(t *testing.T) {
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "edges")
	pid := pidOf(t, conn)
	edges := []int64{-1, 1 << 31, 1<<32 + 5, math.MaxInt64}
	var args []string
	for _, k := range edges {
		hold(t, conn, k)
		args = append(args, strconv.FormatInt(k, 10))
	}
	// A negative key looks like a flag: it goes after "--", and the error
	// says so when it does not.
	if res := who(t, whoKeys(t), args...); res.Code != ExitUsage || !strings.Contains(res.Stderr, "leasectl who -- -1") {
		t.Errorf("who -1: exit %d, stderr %q; want 2 and a hint to use --", res.Code, res.Stderr)
	}
	res := who(t, whoKeys(t), append([]string{"--"}, args...)...)
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	for _, k := range args {
		row(t, res.Stdout, "-", k, "HELD", pid, "edges")
	}
	all := who(t, whoKeys(t), "--all")
	for _, k := range args {
		row(t, all.Stdout, "-", k, "HELD", pid)
	}
	// In 0x hex, as keys.yaml and the --key flags take keys.
	hex := who(t, whoKeys(t), "0x100000005", "0x7fffffffffffffff")
	if hex.Code != 0 {
		t.Fatalf("hex keys: exit %d: %s", hex.Code, hex.Stderr)
	}
	row(t, hex.Stdout, "-", strconv.FormatInt(1<<32+5, 10), "HELD", pid)
	row(t, hex.Stdout, "-", strconv.FormatInt(math.MaxInt64, 10), "HELD", pid)
}

func TestWhoIgnoresLocksOfOtherDatabases(t *testing.T) {
	otherDSN := pgtest.Database(t, needLab(t), "who_cmd_other")
	other := pgtest.Conn(t, otherDSN, "other-db")
	const key = 1840100777
	hold(t, other, key)
	for _, args := range [][]string{{"--all"}, {strconv.Itoa(key)}} {
		res := who(t, whoKeys(t), args...)
		if _, held := findRow(res.Stdout, "-", strconv.Itoa(key), "HELD"); held {
			t.Errorf("who %v shows a lock of database who_cmd_other:\n%s", args, res.Stdout)
		}
	}
	// The same command pointed at that database does see it.
	res := runCLI(t, nil, "--dsn", otherDSN, "--keys", whoKeys(t), "who", strconv.Itoa(key))
	row(t, res.Stdout, strconv.Itoa(key), "HELD", pidOf(t, other))
}

func TestWhoShowsPairKeysOnlyWithAll(t *testing.T) {
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "pair")
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock(-7, 9)")
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock(-7, 9)") })
	keysPath := whoKeys(t)
	if res := who(t, keysPath); strings.Contains(res.Stdout, "-7,9") {
		t.Errorf("a two-int4 lock shown without --all:\n%s", res.Stdout)
	}
	row(t, who(t, keysPath, "--all").Stdout, "-", "-7,9", "HELD", pidOf(t, conn), "pair")
	row(t, who(t, keysPath, "--", "-7,9").Stdout, "-", "-7,9", "HELD")
}

func TestWhoShowsPreparedTransactionWithoutPID(t *testing.T) {
	const key = 1840100555
	gid := pgtest.PreparedLock(t, needLab(t), key)

	res := who(t, whoKeys(t), "--all")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	row(t, res.Stdout, strconv.Itoa(key), "HELD", "none", needLab(t).User, "prepared", "xact", strconv.Quote(gid))
	if !strings.Contains(res.Stdout, "ROLLBACK PREPARED") {
		t.Errorf("no word on how a prepared transaction's lock goes away:\n%s", res.Stdout)
	}
	var out map[string]any
	js := who(t, whoKeys(t), "-o", "json", strconv.Itoa(key))
	if err := json.Unmarshal([]byte(js.Stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, js.Stdout)
	}
	h := out["leases"].([]any)[0].(map[string]any)["holders"].([]any)[0].(map[string]any)
	if h["pid"] != nil || h["prepared_xact"].(map[string]any)["gid"] != gid {
		t.Errorf("JSON holder: pid %v, prepared_xact %v; want null and gid %s", h["pid"], h["prepared_xact"], gid)
	}
}

// TestWhoFlagsAStrandedLockAsStale strands a lock the way FACTS.md says it
// happens: a client takes it through a transaction pooler and leaves; the
// pooled server connection keeps it and idles.
func TestWhoFlagsAStrandedLockAsStale(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	keysPath := whoKeys(t)
	pgtest.Strand(t, needLab(t), "tx1", schedulerKey)
	if res := who(t, keysPath, "scheduler", "--check"); res.Code != 0 {
		t.Fatalf("a fresh holder: --check exit %d, want 0\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	pgtest.WaitIdleHolder(t, pgtest.Conn(t, needLab(t).DirectDSN(), "observer"), schedulerKey, time.Second) // past the threshold below
	res := who(t, keysPath, "scheduler", "--stale", "1s")
	row(t, res.Stdout, "scheduler", strconv.Itoa(schedulerKey), "HELD", "STALE", "stranding-client")
	if !strings.Contains(res.Stdout, "stranded") {
		t.Errorf("no explanation of STALE:\n%s", res.Stdout)
	}
	if res.Code != 0 {
		t.Errorf("without --check a stale holder is reported, not failed: exit %d", res.Code)
	}
	chk := who(t, keysPath, "scheduler", "--stale", "1s", "--check")
	if chk.Code != ExitCheckFailed || !strings.Contains(chk.Stderr, "scheduler's holder pid") || !strings.Contains(chk.Stderr, "stale") {
		t.Errorf("--check on a stale holder: exit %d, stderr %q; want 1 naming the role", chk.Code, chk.Stderr)
	}
	if res := who(t, keysPath, "scheduler", "--check"); res.Code != 0 {
		t.Errorf("--check with the default 45s: exit %d, want 0", res.Code)
	}
}

func TestWhoCheckFailsWithoutHolder(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	keysPath := whoKeys(t)
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "leader")
	hold(t, conn, pollerKey)
	if res := who(t, keysPath, "poller", "--check"); res.Code != 0 {
		t.Errorf("held by a fresh holder: exit %d, want 0: %s", res.Code, res.Stderr)
	}
	res := who(t, keysPath, "--check")
	if res.Code != ExitCheckFailed {
		t.Fatalf("scheduler and reconciler unheld: exit %d, want 1", res.Code)
	}
	if !strings.Contains(res.Stderr, "scheduler has no holder") || !strings.Contains(res.Stderr, "reconciler has no holder") ||
		strings.Contains(res.Stderr, "poller") || strings.Contains(res.Stderr, "for usage.") {
		t.Errorf("stderr: %q", res.Stderr)
	}
	row(t, res.Stdout, "poller", "HELD")
	// In JSON ok is the same verdict; without --check too, where who exits 0.
	for _, tc := range []struct {
		args []string
		code int
		ok   bool
	}{
		{[]string{"--check", "-o", "json"}, ExitCheckFailed, false},
		{[]string{"-o", "json"}, ExitOK, false},
		{[]string{"poller", "--check", "-o", "json"}, ExitOK, true},
		{[]string{"poller", "-o", "json"}, ExitOK, true},
	} {
		res := who(t, keysPath, tc.args...)
		if res.Code != tc.code {
			t.Errorf("who %v: exit %d, want %d: %s", tc.args, res.Code, tc.code, res.Stderr)
		}
		checkJSONConvention(t, res.Stdout, tc.ok, "who")
	}
	// A role given twice is shown once, and what follows it is still checked.
	dup := who(t, keysPath, "--check", "poller", "poller", "scheduler")
	if dup.Code != ExitCheckFailed || !strings.Contains(dup.Stderr, "scheduler has no holder") || strings.Count(dup.Stdout, "poller") != 1 {
		t.Errorf("who --check poller poller scheduler: exit %d\n%s%s", dup.Code, dup.Stdout, dup.Stderr)
	}
}

func TestWhoSaysHiddenWithoutReadAllStats(t *testing.T) {
	const role = "who_cmd_viewer"
	dsn := pgtest.Login(t, needLab(t), role, "who-cmd-viewer-pw")
	admin := pgtest.Conn(t, needLab(t).DirectDSN(), "the-leader")
	hold(t, admin, pollerKey)
	res := runCLI(t, nil, "--dsn", dsn, "--keys", whoKeys(t), "who", "poller")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	row(t, res.Stdout, "poller", "HELD", pidOf(t, admin), needLab(t).User, "the-leader", "hidden", "hidden", "hidden")
	if !strings.Contains(res.Stdout, "GRANT pg_read_all_stats TO \""+role+"\";") {
		t.Errorf("no grant that would reveal the session:\n%s", res.Stdout)
	}
	var out whoJSON
	js := runCLI(t, nil, "--dsn", dsn, "--keys", whoKeys(t), "-o", "json", "who", "poller")
	if err := json.Unmarshal([]byte(js.Stdout), &out); err != nil {
		t.Fatal(err)
	}
	h := out.Leases[0].Holders[0]
	if !out.Hidden || out.RevealGrant == nil || *out.RevealGrant != "GRANT pg_read_all_stats TO \""+role+"\"" ||
		!h.Hidden || h.ClientAddr != nil || h.BackendStart != nil || h.State != nil {
		t.Errorf("JSON: hidden %v grant %v holder %+v", out.Hidden, out.RevealGrant, h)
	}
	// As the superuser nothing is hidden.
	if res := who(t, whoKeys(t), "poller"); strings.Contains(res.Stdout, "hidden") {
		t.Errorf("superuser sees hidden fields:\n%s", res.Stdout)
	}
}

func TestWhoStandbyWarning(t *testing.T) {
	res := runCLI(t, nil, "--dsn", needLab(t).StandbyDSN(), "--keys", whoKeys(t), "who")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "standby") || !strings.Contains(res.Stdout, "say nothing about the primary") {
		t.Errorf("no standby warning:\n%s", res.Stdout)
	}
	if res := who(t, whoKeys(t)); strings.Contains(res.Stdout, "standby:") {
		t.Errorf("standby warning on the primary:\n%s", res.Stdout)
	}
}

// The JSON schema documented in docs/json.md, field by field.
var (
	whoJSONFields     = []string{"schema_version", "ok", "server", "now", "stale_after_ms", "leases", "hidden", "reveal_grant"}
	serverJSONFields  = []string{"version", "version_num", "addr", "port", "in_recovery", "database", "user", "backend_pid", "system_identifier", "postmaster_start_time"}
	leaseJSONFields   = []string{"role", "key", "key_form", "kind", "presence_of", "requested", "state", "stale", "health", "term", "waiter_count", "holders", "waiters", "stand_bys", "present"}
	sessionJSONFields = []string{"pid", "prepared_xact", "mode", "user", "application_name", "client_addr", "client_port",
		"backend_start", "state", "state_change", "idle_ms", "wait_start", "wait_ms", "stale", "hidden", "gone"}
)

func TestWhoJSONSchema(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "json-holder")
	hold(t, conn, pollerKey)
	pgtest.Exec(t, conn, "SELECT pg_advisory_lock(3, 4)")
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock(3, 4)") })
	res := who(t, whoKeys(t), "-o", "json", "--all")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	checkJSONConvention(t, res.Stdout, false, "who") // scheduler and reconciler have no holder
	var doc map[string]any
	if err := json.Unmarshal([]byte(res.Stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	sameFields(t, "top level", doc, whoJSONFields)
	sameFields(t, "server", doc["server"].(map[string]any), serverJSONFields)
	leases := doc["leases"].([]any)
	byKey := map[string]map[string]any{}
	for _, l := range leases {
		l := l.(map[string]any)
		sameFields(t, "lease", l, leaseJSONFields)
		byKey[l["key"].(string)] = l
	}
	p := byKey[strconv.Itoa(pollerKey)]
	if p["role"] != "poller" || p["state"] != "HELD" || p["health"] != "ok" || p["key_form"] != "bigint" || p["requested"] != true {
		t.Errorf("poller lease: %v", p)
	}
	h := p["holders"].([]any)[0].(map[string]any)
	sameFields(t, "session", h, sessionJSONFields)
	if fmt.Sprint(h["pid"]) != pidOf(t, conn) || h["application_name"] != "json-holder" || h["mode"] != "exclusive" {
		t.Errorf("poller holder: %v", h)
	}
	if s := byKey[strconv.Itoa(schedulerKey)]; s["state"] != "FREE" || s["health"] != "no_holder" || len(s["holders"].([]any)) != 0 {
		t.Errorf("scheduler lease: %v", s)
	}
	if pair := byKey["3,4"]; pair == nil || pair["key_form"] != "pair" || pair["role"] != nil || pair["requested"] != false {
		t.Errorf("pair lease: %v", pair)
	}
}

func sameFields(t *testing.T, what string, m map[string]any, want []string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(m))
	if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s fields: %v, want %v (update docs/json.md too)", what, got, want)
	}
}

func TestWhoNeverPrintsThePassword(t *testing.T) {
	pw, err := needLab(t).Password()
	if err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", needLab(t).User, pw, needLab(t).Primary.Port)
	bad := fmt.Sprintf("postgres://%s:%s-wrong@127.0.0.1:%d/postgres?sslmode=disable", needLab(t).User, pw, needLab(t).Primary.Port)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--dsn", good, "who", "--all"}, 0},
		{[]string{"--dsn", good, "-o", "json", "who", "--all"}, 0},
		{[]string{"--dsn", good, "who", "--check"}, ExitCheckFailed},
		{[]string{"--dsn", bad, "who"}, ExitUnavailable},
		{[]string{"--dsn", good + "&bogus=1", "who"}, ExitUnavailable},
		{[]string{"--dsn", "postgres://u:" + pw + "@127.0.0.1:notaport/db", "who"}, ExitUsage},
	} {
		res := runCLI(t, nil, append([]string{"--keys", whoKeys(t)}, tc.args...)...)
		if res.Code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args[2:], res.Code, tc.code, res.Stderr)
		}
		if strings.Contains(res.Stdout+res.Stderr, pw) {
			t.Errorf("%v: the password appears in the output:\n%s%s", tc.args[2:], res.Stdout, res.Stderr)
		}
	}
}

func TestWhoInputErrors(t *testing.T) {
	keysPath := whoKeys(t)
	// These are refused before who connects: the DSN points nowhere.
	refused := func(args ...string) cliResult {
		return runCLI(t, nil, append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "--keys", keysPath, "who"}, args...)...)
	}
	res := refused("pollr")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, `unknown role "pollr"`) ||
		!strings.Contains(res.Stderr, "poller, scheduler, reconciler") || strings.Contains(res.Stderr, "goroutine") {
		t.Errorf("unknown role: exit %d, stderr %q", res.Code, res.Stderr)
	}
	for _, args := range [][]string{
		{"--stale", "0s"},
		{"--check", "--watch"},
		{"--watch=1ms"},
		{"--bogus"},
	} {
		if res := refused(args...); res.Code != ExitUsage || !strings.HasPrefix(res.Stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2", args, res.Code, res.Stderr)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("roles:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := who(t, empty); res.Code != 0 || !strings.Contains(res.Stdout, "no roles to show") {
		t.Errorf("who with no roles: exit %d: %s%s", res.Code, res.Stdout, res.Stderr)
	}
	if res := who(t, empty, "--check"); res.Code != ExitUsage || !strings.Contains(res.Stderr, "nothing to check") {
		t.Errorf("who --check with no roles: exit %d: %s", res.Code, res.Stderr)
	}
	// Without a keys file, numeric keys and --all still work; role names need it.
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	noKeys := func(args ...string) cliResult {
		return runCLIWith(t, context.Background(), map[string]string{"LEASECTL_DSN": needLab(t).DirectDSN()}, false, "", append([]string{"who"}, args...)...)
	}
	t.Chdir(t.TempDir())
	if res := noKeys("42"); res.Code != 0 {
		t.Errorf("who 42 without keys.yaml: exit %d: %s", res.Code, res.Stderr)
	}
	if res := noKeys("--all"); res.Code != 0 {
		t.Errorf("who --all without keys.yaml: exit %d: %s", res.Code, res.Stderr)
	}
	if res := noKeys("poller"); res.Code != ExitUsage || !strings.Contains(res.Stderr, "keys.yaml not found") {
		t.Errorf("who poller without keys.yaml: exit %d: %s", res.Code, res.Stderr)
	}
	if res := runCLI(t, map[string]string{"LEASECTL_DSN": needLab(t).DirectDSN()}, "--keys", missing, "who", "42"); res.Code != ExitUsage {
		t.Errorf("a named keys file that is missing: exit %d, want 2", res.Code)
	}
}

func TestWhoCompletesRoles(t *testing.T) {
	res := runCLI(t, nil, "__complete", "who", "--keys", "../keys.yaml", "")
	for _, role := range []string{"poller", "scheduler", "reconciler"} {
		if !strings.Contains(res.Stdout, role+"\t") {
			t.Errorf("completion lacks %s:\n%s", role, res.Stdout)
		}
	}
	res = runCLI(t, nil, "__complete", "who", "--keys", "../keys.yaml", "poller", "")
	if strings.Contains(res.Stdout, "poller") || !strings.Contains(res.Stdout, "scheduler") {
		t.Errorf("a role already given is offered again:\n%s", res.Stdout)
	}
}

// frameWriter collects output and cancels once it has seen n writes:
// `who --watch` writes each frame in one Write. onWrite, if set, sees each
// frame as it is written.
type frameWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	n       int
	cancel  context.CancelFunc
	onWrite func([]byte)
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.onWrite != nil {
		w.onWrite(p)
	}
	if w.writes++; w.writes == w.n {
		w.cancel()
	}
	return len(p), nil
}

// watchWith runs `who --watch ...` until out has seen its n frames, as if
// Ctrl-C came then, and returns stdout, stderr and the exit code.
func watchWith(t *testing.T, tty bool, out *frameWriter, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out.cancel = cancel
	var errOut bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(""), Out: out, ErrOut: &errOut, InTTY: tty, OutTTY: tty, ErrTTY: tty},
		Getenv: func(string) string { return "" },
	}
	code := Run(ctx, app, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", whoKeys(t), "who"}, args...))
	return out.buf.String(), errOut.String(), code
}

func watch(t *testing.T, tty bool, frames int, args ...string) (string, int) {
	t.Helper()
	out, errOut, code := watchWith(t, tty, &frameWriter{n: frames}, args...)
	if errOut != "" {
		t.Errorf("stderr: %s", errOut)
	}
	return out, code
}

func TestWhoWatch(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "watched")
	hold(t, conn, pollerKey)
	pid := pidOf(t, conn)

	out, code := watch(t, false, 3, "--watch=100ms", "poller")
	if code != 0 {
		t.Fatalf("exit %d after Ctrl-C", code)
	}
	if n := strings.Count(out, "\n--- "); n != 2 {
		t.Errorf("plain --watch: %d separators for 3 frames:\n%s", n, out)
	}
	if strings.Count(out, "server 127.0.0.1") != 3 || strings.Contains(out, "\x1b[") {
		t.Errorf("plain --watch: want 3 frames without escape codes:\n%q", out)
	}
	row(t, out, "poller", "HELD", pid)

	// On a terminal each frame clears the screen and redraws in place; the
	// interval may also follow the flag as an argument.
	out, code = watch(t, true, 2, "-w=100ms", "poller")
	if code != 0 || strings.Count(out, "\x1b[H\x1b[2J") != 2 || strings.Contains(out, "\n--- ") || !strings.Contains(out, "Ctrl-C") {
		t.Errorf("terminal --watch: exit %d:\n%q", code, out)
	}
	if !strings.Contains(out, "every 100ms") {
		t.Errorf("the interval argument was not taken:\n%q", out)
	}

	// With -o json to a pipe: one document a frame, each on a line of its
	// own (JSON lines).
	js, _ := watch(t, false, 2, "--watch=100ms", "-o", "json", "poller")
	lines := strings.SplitAfter(js, "\n")
	if len(lines) != 3 || lines[2] != "" {
		t.Fatalf("-o json to a pipe: %d lines for 2 frames, want one a frame:\n%s", len(lines)-1, js)
	}
	for i, line := range lines[:2] {
		checkJSONConvention(t, line, true, "who")
		var doc whoJSON
		if err := json.Unmarshal([]byte(line), &doc); err != nil || len(doc.Leases) != 1 {
			t.Fatalf("JSON frame %d: %v %+v", i, err, doc)
		}
	}

	// On a terminal: the same documents, indented, one after the other;
	// no redrawing in place.
	js, _ = watch(t, true, 2, "--watch=100ms", "-o", "json", "poller")
	if strings.Contains(js, "\x1b[") {
		t.Errorf("-o json on a terminal: escape codes in the output:\n%q", js)
	}
	dec := json.NewDecoder(strings.NewReader(js))
	for i := range 2 {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("JSON frame %d on a terminal: %v\n%s", i, err, js)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, raw, "", "  "); err != nil || !strings.Contains(js, indented.String()+"\n") {
			t.Errorf("JSON frame %d on a terminal is not indented:\n%s", i, js)
		}
	}
	if dec.More() {
		t.Errorf("more than 2 documents for 2 frames:\n%s", js)
	}
}

// TestWhoWatchReconnects ends the watching session's backend after the
// first frame: the next reading fails, is reported, and the one after comes
// from a new connection.
func TestWhoWatchReconnects(t *testing.T) {
	admin := pgtest.Conn(t, needLab(t).DirectDSN(), "admin")
	var pids []float64
	out := &frameWriter{n: 2, onWrite: func(p []byte) {
		var doc map[string]any
		if err := json.Unmarshal(p, &doc); err != nil {
			t.Errorf("frame is not one JSON document: %v\n%s", err, p)
			return
		}
		pid := doc["server"].(map[string]any)["backend_pid"].(float64)
		if pids = append(pids, pid); len(pids) == 1 {
			pgtest.Exec(t, admin, "SELECT pg_terminate_backend($1)", int32(pid))
		}
	}}
	_, errOut, code := watchWith(t, false, out, "--watch=100ms", "-o", "json", "poller")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(pids) != 2 || pids[0] == pids[1] {
		t.Errorf("backend pids of the frames: %v, want two different ones", pids)
	}
	if !strings.Contains(errOut, "retrying every 100ms") {
		t.Errorf("the failed reading was not reported on stderr: %q", errOut)
	}
}

// TestWhoWatchMarksAChangeOfLeader: after the first frame the leader
// closes its session and another takes the key; a later frame lists the
// change under the table, with its time, and the footer shows the time.
func TestWhoWatchMarksAChangeOfLeader(t *testing.T) {
	withoutTermRecord(t)
	first := pgtest.Conn(t, needLab(t).DirectDSN(), "first-leader")
	hold(t, first, pollerKey)
	next := pgtest.Conn(t, needLab(t).DirectDSN(), "next-leader")
	nextPID := pidOf(t, next)
	moved := false
	w := &frameWriter{n: 4}
	w.onWrite = func([]byte) {
		if moved {
			return
		}
		moved = true
		// After the first frame: hand the key over, as a failover does.
		if _, err := locks.Unlock(context.Background(), first, pollerKey); err != nil {
			t.Error(err)
		}
		hold(t, next, pollerKey)
	}
	out, _, code := watchWith(t, true, w, "-w=100ms", "poller")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	change := regexp.MustCompile(`\d\d:\d\d:\d\d  poller: pid \d+ \(first-leader\) → pid ` + nextPID + ` \(next-leader\)`)
	if !strings.Contains(out, "Changes of leader") || !change.MatchString(out) {
		t.Errorf("no change of leader under the table:\n%s", out)
	}
	if !regexp.MustCompile(`\d\d:\d\d:\d\d · every 100ms · Ctrl-C to stop`).MatchString(out) {
		t.Errorf("the footer shows no time:\n%s", out)
	}
}

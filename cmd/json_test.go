package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/locks"
)

// The JSON convention of docs/json.md, checked mechanically on what the
// commands print. Every test that runs a command with -o json passes its
// stdout to checkJSONDoc; TestJSONConvention runs those no other test
// covers.

// dataMaps are fields whose value is an object keyed by data (variable
// names, DSN labels, statuses), not by field names.
var dataMaps = map[string]bool{"dsns": true, "env": true, "counts": true}

var fieldName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkJSONDoc checks one document printed with -o json by a command that
// exited with code: ok must be true exactly when it exited 0.
func checkJSONDoc(t *testing.T, out string, code int, command string) {
	t.Helper()
	checkJSONConvention(t, out, code == ExitOK, command)
}

// checkJSONConvention checks one document of command (as docs/json.md names
// it: "who", "lab status") against the convention and against its section
// of docs/json.md, which must mention every field it prints.
func checkJSONConvention(t *testing.T, out string, wantOK bool, command string) {
	t.Helper()
	prefix := fmt.Sprintf("{\n  \"schema_version\": %d,\n  \"ok\": %t,\n", schemaVersion, wantOK)
	if !strings.HasPrefix(out, prefix) {
		t.Errorf("%s -o json: the document does not start with schema_version %d and ok %t:\n%s", command, schemaVersion, wantOK, head(out))
	}
	if !strings.HasSuffix(out, "}\n") {
		t.Errorf("%s -o json: the document does not end with a newline", command)
	}
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s -o json: not one JSON object: %v\n%s", command, err, head(out))
	}
	if dec.More() {
		t.Errorf("%s -o json: more than one document on stdout:\n%s", command, head(out))
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(out), "", "  "); err != nil || indented.String() != out {
		t.Errorf("%s -o json: not indented by two spaces as json.MarshalIndent does (%v)", command, err)
	}
	section := jsonDocSection(t, command)
	for name, v := range doc {
		if name != "schema_version" && name != "ok" && !mentions(section, name) { // those two: under The convention
			t.Errorf("docs/json.md, section of %s: field %q is not documented", command, name)
		}
		walkJSON(t, command, name, v, func(field string) {
			// Nested objects are documented once: under Shared objects,
			// or where they come from (verify's failover: failover's).
			if !mentions(jsonDoc, field) {
				t.Errorf("docs/json.md: field %q of %s (in %s) is not documented", field, command, name)
			}
		})
	}
}

// walkJSON checks the field name at path and its value v, and every field
// below it, calling nested for each field name below the top level.
func walkJSON(t *testing.T, command, path string, v any, nested func(string)) {
	t.Helper()
	name := path[strings.LastIndexByte(path, '.')+1:]
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	if !fieldName.MatchString(name) {
		t.Errorf("%s: field %s is not snake_case", command, path)
	}
	if name == "seconds" || strings.HasSuffix(name, "_seconds") {
		t.Errorf("%s: field %s is in seconds: durations are _ms", command, path)
	}
	if name == "key" || strings.HasSuffix(name, "_key") {
		if _, isString := v.(string); !isString && v != nil {
			t.Errorf("%s: key field %s is %T (%v), not a string", command, path, v, v)
		}
	}
	if strings.HasSuffix(name, "_ms") {
		if _, isNumber := v.(json.Number); !isNumber && v != nil {
			t.Errorf("%s: duration %s is %T (%v), not a number of milliseconds", command, path, v, v)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		if dataMaps[name] {
			return
		}
		for k, x := range v {
			nested(k)
			walkJSON(t, command, path+"."+k, x, nested)
		}
	case []any:
		for i, x := range v {
			walkJSON(t, command, fmt.Sprintf("%s[%d]", path, i), x, nested)
		}
	}
}

// checkJSONLog checks the lines of `run --log-format json`: each one JSON
// object with schema_version, keys as strings, durations in _ms.
func checkJSONLog(t *testing.T, log string) {
	t.Helper()
	lines := 0
	for l := range strings.Lines(log) {
		if !strings.HasPrefix(l, "{") {
			continue // the program's own output
		}
		lines++
		var rec map[string]any
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		if err := dec.Decode(&rec); err != nil {
			t.Errorf("log line is not JSON: %v: %s", err, l)
			continue
		}
		if rec["schema_version"] != json.Number(strconv.Itoa(schemaVersion)) {
			t.Errorf("log line without schema_version %d: %s", schemaVersion, l)
		}
		for k, v := range rec {
			walkJSON(t, "run --log-format json", k, v, func(string) {})
		}
	}
	if lines == 0 {
		t.Errorf("no JSON log lines in:\n%s", log)
	}
}

func head(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

var (
	jsonDocOnce sync.Once
	jsonDoc     string
)

// jsonDocSection returns the section of docs/json.md whose heading names
// `leasectl COMMAND`.
func jsonDocSection(t *testing.T, command string) (section string) {
	t.Helper()
	jsonDocOnce.Do(func() {
		b, err := os.ReadFile("../docs/json.md")
		if err != nil {
			t.Fatalf("the JSON schema's documentation: %v", err)
		}
		jsonDoc = string(b)
	})
	for _, s := range strings.Split(jsonDoc, "\n## ") {
		heading, _, _ := strings.Cut(s, "\n")
		if strings.Contains(heading, "`leasectl "+command+"`") {
			section = s
		}
	}
	if section == "" {
		t.Fatalf("docs/json.md has no section headed `leasectl %s`", command)
	}
	return section
}

func mentions(doc, field string) bool { return strings.Contains(doc, "`"+field+"`") }

// TestJSONConvention runs the commands with -o json that no other test
// runs that way, against the lab, and checks every document.
func TestJSONConvention(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	keysPath := whoKeys(t)
	holder := pgtest.Conn(t, needLab(t).DirectDSN(), "json-convention")
	hold(t, holder, pollerKey)
	for _, tc := range []struct {
		command string
		args    []string
		code    int
	}{
		{"version", []string{"version", "-o", "json"}, ExitOK},
		{"version", []string{"--version", "-o", "json"}, ExitOK},
		{"probe", []string{"probe", "-o", "json", needLab(t).DirectDSN()}, ExitOK},
		{"probe", []string{"probe", "-o", "json", "--strict", needLab(t).PoolerDSN("session")}, ExitCheckFailed},
		{"who", []string{"who", "-o", "json", "--all", "--check", "poller"}, ExitOK},
		{"keys lint", []string{"keys", "lint", "-o", "json", keysCompatible}, ExitOK},
		{"keys lint", []string{"keys", "lint", "-o", "json", keysInvalid}, ExitUsage},
		{"keys diff", []string{"keys", "diff", "-o", "json", keysCompatible, "--base-file", keysBase}, ExitOK},
		{"keys diff", []string{"keys", "diff", "-o", "json", keysBreaking, "--base-file", keysBase}, ExitCheckFailed},
		{"lab env", []string{"lab", "env", "-o", "json", "--dir", needLab(t).Dir}, ExitOK},
		{"lab status", []string{"lab", "status", "-o", "json", "--dir", needLab(t).Dir}, ExitOK},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			res := runCLI(t, nil, append([]string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath}, tc.args...)...)
			if res.Code != tc.code {
				t.Fatalf("%v: exit %d, want %d\n%s%s", tc.args, res.Code, tc.code, res.Stdout, res.Stderr)
			}
			checkJSONDoc(t, res.Stdout, res.Code, tc.command)
		})
	}
}

// TestJSONDocumentsEveryCommand: docs/json.md has a section for every
// command that prints JSON, and says which schema_version it describes.
func TestJSONDocumentsEveryCommand(t *testing.T) {
	for _, c := range []string{"probe", "who", "keys lint", "keys diff", "failover", "verify", "version", "lab up", "lab down",
		"lab env", "lab status", "lab switchover", "lab kill-primary", "lab revive", "run", "history", "fence init"} {
		jsonDocSection(t, c)
	}
	if !strings.Contains(jsonDoc, fmt.Sprintf("`schema_version` is %d", schemaVersion)) {
		t.Errorf("docs/json.md does not say \"`schema_version` is %d\"", schemaVersion)
	}
}

// TestJSONLabRevive checks the document of `lab revive -o json`, which only
// the HA lab's test can produce (once): here it is rendered from a value.
func TestJSONLabRevive(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, labReviveJSON{docHeader: header(true), Node: "node2", Role: "replica", TookMS: 5123.4}); err != nil {
		t.Fatal(err)
	}
	checkJSONDoc(t, b.String(), ExitOK, "lab revive")
}

// TestWhoJSONStream: the document of `who --all -o json`, written a lease
// at a time, for a reading with holders, a waiter, a shared lock, a pair key
// and odd application names, and for an empty one.
func TestWhoJSONStream(t *testing.T) {
	withoutTermRecord(t) // plain holders, judged by their locks alone
	ctx := t.Context()
	a := pgtest.Conn(t, needLab(t).DirectDSN(), `json<"odd">&\name`)
	b := pgtest.Conn(t, needLab(t).DirectDSN(), "")
	hold(t, a, pollerKey)
	pgtest.Exec(t, a, "SELECT pg_advisory_lock_shared(9200777)")
	pgtest.Exec(t, b, "SELECT pg_advisory_lock_shared(9200777)")
	pgtest.Exec(t, a, "SELECT pg_advisory_lock(5, 6)")
	waiter := pgtest.Conn(t, needLab(t).DirectDSN(), "json-waiter")
	blocked := pgtest.Wait(t, waiter, pollerKey)
	t.Cleanup(func() { // t.Context() is done by now
		_, _ = locks.Unlock(context.Background(), a, pollerKey)
		<-blocked
		_, _ = locks.Unlock(context.Background(), waiter, pollerKey)
	})
	app := &App{Global: GlobalOptions{Timeout: 10 * time.Second}, Getenv: func(string) string { return "" }}
	opts := &whoOptions{app: app, All: true, Stale: 45 * time.Second}
	conn := pgtest.Conn(t, needLab(t).DirectDSN(), "json-reader")
	var view *whoView
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if view, err = readWho(ctx, opts, conn, whoSelection{want: []locks.Key{locks.BigintKey(pollerKey)}}); err != nil {
			t.Fatal(err)
		}
		if waiting(view, pollerKey) || time.Now().After(deadline) {
			break
		}
	}
	var streamed bytes.Buffer
	if err := writeWhoJSON(&streamed, view); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"json\u003c\"odd\"\u003e\u0026\\name"`, `"key": "5,6"`, `"mode": "shared"`, `"waiter_count": 1`} {
		if !strings.Contains(streamed.String(), want) {
			t.Errorf("the reading lacks %s", want)
		}
	}
	checkJSONConvention(t, streamed.String(), true, "who")
	var doc whoJSON
	if err := json.Unmarshal(streamed.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Leases) != len(view.leases) {
		t.Errorf("%d leases in the document, %d in the reading", len(doc.Leases), len(view.leases))
	}

	// An empty reading: no leases.
	empty := &whoView{server: view.server, now: view.now, staleAfter: time.Second}
	streamed.Reset()
	if err := writeWhoJSON(&streamed, empty); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(streamed.String(), "\n  \"leases\": [],\n") {
		t.Errorf("empty reading: leases is not []:\n%s", streamed.String())
	}
	checkJSONConvention(t, streamed.String(), true, "who")
}

func waiting(v *whoView, key int64) bool {
	for _, l := range v.leases {
		if l.Key == locks.BigintKey(key) && len(l.Waiters) > 0 {
			return true
		}
	}
	return false
}

// FuzzAppendIndent: appendIndent indents any compact JSON as json.Indent
// does, with a prefix and without: the leases of the golden readings,
// strings that hold brackets, commas, colons, quotes and backslashes, empty
// and nested objects and arrays.
//
//	go test ./cmd -run '^$' -fuzz FuzzAppendIndent -fuzztime 1m -parallel 1
func FuzzAppendIndent(f *testing.F) {
	v := goldenWhoView(goldenSingleRoleLeases())
	snap, roles := goldenGroupSnapshot()
	group := goldenWhoView(snap.ByRole(roles, nil, true))
	for _, view := range []*whoView{v, group} {
		for i := range view.leases {
			b, err := json.Marshal(leaseJSONOf(view, i))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(string(b))
		}
	}
	for _, seed := range []string{
		`null`, `0`, `-1.5e-7`, `""`, `"a"`, `{}`, `[]`, `[{}]`, `{"a":[]}`, `[[[]],{}]`, `{"a":{"b":{"c":[1,2,{}]}}}`,
		`"{[,:]}"`, `{"k\"":"v\\"}`, `["\\\"",",",":","}","]"]`, `{"":""}`, `"\u2028 caf\u00e9 \ud83d\ude00"`,
		`{"a":"x\\"}`, `{"a":true,"b":false,"c":null}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(in)) != nil {
			return // appendIndent takes only valid JSON, as encoding/json writes it
		}
		for _, prefix := range []string{"", "    "} {
			var want bytes.Buffer
			if err := json.Indent(&want, compact.Bytes(), prefix, "  "); err != nil {
				t.Fatal(err)
			}
			if got := appendIndent(nil, compact.Bytes(), prefix); string(got) != want.String() {
				t.Errorf("prefix %q, %s:\nappendIndent:\n%s\njson.Indent:\n%s", prefix, compact.Bytes(), got, want.String())
			}
		}
	})
}

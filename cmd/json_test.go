package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/leasectl/leasectl/test/pgtest"
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
// it: "who", "lab status"), printed to a pipe, against the convention and
// against its section of docs/json.md, which must mention every field it
// prints.
func checkJSONConvention(t *testing.T, out string, wantOK bool, command string) {
	t.Helper()
	if err := jsonHeaderFirst(out, wantOK); err != nil {
		t.Errorf("%s -o json: the document does not start with schema_version %d and ok %t: %v\n%s", command, schemaVersion, wantOK, err, head(out))
	}
	checkJSONLayout(t, out, false, command)
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s -o json: not one JSON object: %v\n%s", command, err, head(out))
	}
	if dec.More() {
		t.Errorf("%s -o json: more than one document on stdout:\n%s", command, head(out))
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

// jsonHeaderFirst reports whether the document out starts with
// schema_version and then ok, whose value is wantOK.
func jsonHeaderFirst(out string, wantOK bool) error {
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	want := []json.Token{json.Delim('{'), "schema_version", json.Number(strconv.Itoa(schemaVersion)), "ok", wantOK}
	for i, w := range want {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != w {
			return fmt.Errorf("token %d is %v, want %v", i, tok, w)
		}
	}
	return nil
}

// checkJSONLayout checks the layout of one document: on one line (compact,
// as encoding/json writes it) for a pipe, indented by two spaces as
// json.MarshalIndent does on a terminal; either way ending in a newline.
func checkJSONLayout(t *testing.T, out string, indent bool, command string) {
	t.Helper()
	if !strings.HasSuffix(out, "}\n") {
		t.Errorf("%s -o json: the document does not end with } and a newline:\n%s", command, head(out))
		return
	}
	body := []byte(strings.TrimSuffix(out, "\n"))
	var want bytes.Buffer
	var err error
	if indent {
		err = json.Indent(&want, body, "", "  ")
	} else {
		err = json.Compact(&want, body)
	}
	switch {
	case err != nil:
		t.Errorf("%s -o json: not JSON: %v\n%s", command, err, head(out))
	case want.String() != string(body) && indent:
		t.Errorf("%s -o json on a terminal: not indented by two spaces as json.MarshalIndent does:\n%s", command, head(out))
	case want.String() != string(body):
		t.Errorf("%s -o json to a pipe: not compact JSON on one line:\n%s", command, head(out))
	}
}

// jsonValue parses out, one JSON document, and returns the value at path:
// field names and array indices joined by dots ("leases.0.term"), numbers
// as json.Number; found is false when there is no such value.
func jsonValue(t *testing.T, out, path string) (v any, found bool) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not a JSON document: %v\n%s", err, head(out))
	}
	for _, step := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			if v, found = x[step]; !found {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// wantJSONValue fails unless the document out has want (a string, bool,
// nil, or a number as json.Number) at path (jsonValue's).
func wantJSONValue(t *testing.T, out, path string, want any) {
	t.Helper()
	if got, ok := jsonValue(t, out, path); !ok || got != want {
		t.Errorf("%s is %#v (found %v), want %#v in:\n%s", path, got, ok, want, head(out))
	}
}

// goldenJSON compares the JSON document got with the golden file name as
// parsed values, whatever the layout of either; -update writes it indented,
// for people to read.
func goldenJSON(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		var b bytes.Buffer
		if err := json.Indent(&b, []byte(got), "", "  "); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, got)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd -run %s -update to create it)", err, t.Name())
	}
	parse := func(what string, b []byte) any {
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s is not JSON: %v\n%s", what, err, b)
		}
		if dec.More() {
			t.Fatalf("%s holds more than one JSON document:\n%s", what, b)
		}
		return v
	}
	if !reflect.DeepEqual(parse("the output", []byte(got)), parse(path, want)) {
		var indented bytes.Buffer
		_ = json.Indent(&indented, []byte(got), "", "  ")
		t.Errorf("output differs from %s as JSON (if the change is intended, run go test ./cmd -run %s -update):\n--- got\n%s\n--- want\n%s", path, t.Name(), indented.String(), want)
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

// TestJSONLayout: -o json prints one compact line to a pipe and the same
// document indented by two spaces on a terminal, as gh does (docs/json.md).
func TestJSONLayout(t *testing.T) {
	for _, args := range [][]string{
		{"version", "-o", "json"},
		{"--version", "-o", "json"},
		{"keys", "lint", "-o", "json", keysCompatible},
		{"keys", "lint", "-o", "json", keysInvalid},
		{"keys", "diff", "-o", "json", keysBreaking, "--base-file", keysBase},
	} {
		name := strings.Join(args, " ")
		piped := runCLIWith(t, t.Context(), nil, false, "", args...)
		onTTY := runCLIWith(t, t.Context(), nil, true, "", args...)
		if piped.Code != onTTY.Code {
			t.Errorf("%s: exit %d to a pipe, %d on a terminal", name, piped.Code, onTTY.Code)
		}
		checkJSONLayout(t, piped.Stdout, false, name)
		checkJSONLayout(t, onTTY.Stdout, true, name)
		var indented bytes.Buffer
		if err := json.Indent(&indented, []byte(piped.Stdout), "", "  "); err != nil || indented.String() != onTTY.Stdout {
			t.Errorf("%s: the terminal's document is not the pipe's indented (%v):\n%s\n%s", name, err, piped.Stdout, onTTY.Stdout)
		}
	}

	t.Run("who --all", func(t *testing.T) {
		withoutTermRecord(t)
		keysPath := whoKeys(t)
		hold(t, pgtest.Conn(t, needLab(t).DirectDSN(), "json-layout"), pollerKey)
		args := []string{"--dsn", needLab(t).DirectDSN(), "--keys", keysPath, "who", "--all", "-o", "json"}
		piped := runCLIWith(t, t.Context(), nil, false, "", args...)
		onTTY := runCLIWith(t, t.Context(), nil, true, "", args...)
		if piped.Code != ExitOK || onTTY.Code != ExitOK {
			t.Fatalf("exit %d to a pipe, %d on a terminal\n%s%s", piped.Code, onTTY.Code, piped.Stderr, onTTY.Stderr)
		}
		checkJSONConvention(t, piped.Stdout, false, "who")
		checkJSONLayout(t, onTTY.Stdout, true, "who")
		if err := jsonHeaderFirst(onTTY.Stdout, false); err != nil {
			t.Errorf("on a terminal: %v", err)
		}
		var a, b whoJSON
		decodeJSON(t, piped.Stdout, &a)
		decodeJSON(t, onTTY.Stdout, &b)
		keysOf := func(d whoJSON) []string {
			var ks []string
			for _, l := range d.Leases {
				ks = append(ks, l.Key)
			}
			return ks
		}
		if !slices.Contains(keysOf(a), strconv.Itoa(pollerKey)) || !slices.Contains(keysOf(b), strconv.Itoa(pollerKey)) {
			t.Errorf("the leases lack %d: to a pipe %v, on a terminal %v", pollerKey, keysOf(a), keysOf(b))
		}
	})
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
	if err := writeJSON(&b, labReviveJSON{docHeader: header(true), Node: "node2", Role: "replica", TookMS: 5123.4}, false); err != nil {
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
	var streamed, indented bytes.Buffer
	if err := writeWhoJSON(&streamed, view, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(streamed.String(), `"json\u003c\"odd\"\u003e\u0026\\name"`) {
		t.Errorf("the odd application name is not escaped as encoding/json escapes it:\n%s", head(streamed.String()))
	}
	checkJSONConvention(t, streamed.String(), true, "who")
	var doc whoJSON
	if err := json.Unmarshal(streamed.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Leases) != len(view.leases) {
		t.Errorf("%d leases in the document, %d in the reading", len(doc.Leases), len(view.leases))
	}
	pair, shared, waited := false, false, false
	for _, l := range doc.Leases {
		pair = pair || l.Key == "5,6" && l.KeyForm == "pair"
		waited = waited || l.WaiterCount == 1
		for _, h := range l.Holders {
			shared = shared || h.Mode == "shared"
		}
	}
	if !pair || !shared || !waited {
		t.Errorf("the document lacks the pair key 5,6 (%v), a shared holder (%v) or a lease with one waiter (%v)", pair, shared, waited)
	}
	// On a terminal: the same document, indented.
	if err := writeWhoJSON(&indented, view, true); err != nil {
		t.Fatal(err)
	}
	checkJSONLayout(t, indented.String(), true, "who")
	var compacted bytes.Buffer
	if err := json.Compact(&compacted, indented.Bytes()); err != nil || compacted.String()+"\n" != streamed.String() {
		t.Errorf("the indented document is not the compact one indented (%v)", err)
	}

	// An empty reading: no leases.
	empty := &whoView{server: view.server, now: view.now, staleAfter: time.Second}
	for _, indent := range []bool{false, true} {
		streamed.Reset()
		if err := writeWhoJSON(&streamed, empty, indent); err != nil {
			t.Fatal(err)
		}
		if leases, ok := jsonValue(t, streamed.String(), "leases"); !ok || leases == nil || len(leases.([]any)) != 0 {
			t.Errorf("empty reading: leases is %#v, not []:\n%s", leases, streamed.String())
		}
		if indent {
			checkJSONLayout(t, streamed.String(), true, "who")
		} else {
			checkJSONConvention(t, streamed.String(), true, "who")
		}
	}
}

func waiting(v *whoView, key int64) bool {
	for _, l := range v.leases {
		if l.Key == locks.BigintKey(key) && len(l.Waiters) > 0 {
			return true
		}
	}
	return false
}

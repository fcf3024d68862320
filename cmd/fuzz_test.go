package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
)

// FuzzWhoArgs feeds `leasectl who` arbitrary arguments (NUL-separated in one
// fuzz string), with and without --watch, against a keys file with two
// roles: the parsing of ROLE, KEY and k1,k2 (a --watch interval is never an
// argument: it comes after "="). It runs without a database: only the
// parsing is fuzzed.
// Whatever the arguments, there is no panic, and the result is either an
// error that is a usage or input error (exit 2) with a message, or a
// selection of exactly one key per argument (every role's with none): a role's key for a role name, else the key the
// argument spells, which reads back the same from its printed form.
//
//	go test ./cmd -run '^$' -fuzz FuzzWhoArgs -fuzztime 3m -parallel 1
func FuzzWhoArgs(f *testing.F) {
	for _, seed := range []string{
		"poller", "scheduler\x00poller", "1840900001", "-1", "3,4", "-2147483648,2147483647", "5s", "poller\x002s",
		"9223372036854775807", "-9223372036854775808", "99999999999999999999", "1,2,3", "", ",", " 1 , 2 ", "1e3", "0x10",
		"+5", "nosuch", "1h2m3s", "-1s", "1,", "poller\x005s\x001m",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	dir := f.TempDir()
	keysFile := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysFile, []byte("roles:\n  poller: 1840900001\n  scheduler: 1840900002\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	roles := map[string]int64{"poller": 1840900001, "scheduler": 1840900002}
	f.Fuzz(func(t *testing.T, joined string, watch bool) {
		if len(joined) > 4096 {
			return // a command line, not a file
		}
		args := strings.Split(joined, "\x00")
		app := &App{IO: &IOStreams{}, Getenv: func(string) string { return "" }, Global: GlobalOptions{Keys: keysFile, Timeout: time.Second}}
		opts := &whoOptions{app: app, Args: append([]string(nil), args...), Stale: 45 * time.Second}
		if watch {
			opts.Watch, opts.WatchGiven = defaultWatchInterval, true
		}
		err := opts.validate()
		var sel whoSelection
		if err == nil {
			sel, err = opts.selection()
		}
		if err != nil {
			if code := ExitCode(err); code != ExitUsage || err.Error() == "" {
				t.Fatalf("who %q: exit %d, %v; want a usage or input error", args, code, err)
			}
			return
		}
		if watch && opts.Watch < 100*time.Millisecond {
			t.Fatalf("who --watch %q: accepted an interval of %s", args, opts.Watch)
		}
		if len(opts.Args) == 0 {
			if len(sel.want) != len(roles) {
				t.Fatalf("who %q: no arguments left, but %d keys selected, not every role's", args, len(sel.want))
			}
			return
		}
		if len(sel.want) != len(opts.Args) {
			t.Fatalf("who %q: %d keys for %d arguments %q", args, len(sel.want), len(opts.Args), opts.Args)
		}
		if !watch && len(opts.Args) != len(args) {
			t.Fatalf("who %q: arguments taken without --watch: %q", args, opts.Args)
		}
		for i, a := range opts.Args {
			got := sel.want[i]
			if k, ok := roles[a]; ok {
				if got != locks.BigintKey(k) {
					t.Fatalf("role %q selected %v, want its key %d", a, got, k)
				}
				continue
			}
			want, err := locks.ParseKey(a)
			if err != nil || got != want {
				t.Fatalf("argument %q selected %v; ParseKey gives %v, %v", a, got, want, err)
			}
			back, err := locks.ParseKey(got.String())
			if err != nil || back != got {
				t.Fatalf("key %v prints as %q, which reads back as %v, %v", got, got.String(), back, err)
			}
		}
	})
}

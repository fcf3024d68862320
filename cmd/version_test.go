package cmd

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: leasectl version and --version print the build, as text or,
// with -o json, as the same JSON object; a stray argument is a usage error.
// (test/release's tests check the values a release build stamps.)
func TestVersion(t *testing.T) {
	res := runCLI(t, nil, "version")
	wantExit(t, res, ExitOK)
	for _, want := range []string{"leasectl ", "\ncommit:  ", "\ndate:    ", "\ngo:      " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("leasectl version lacks %q:\n%s", want, res.Stdout)
		}
	}

	res = runCLI(t, nil, "--version")
	wantExit(t, res, ExitOK)
	if lines := strings.Split(strings.TrimSpace(res.Stdout), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "leasectl ") || !strings.HasSuffix(lines[0], runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("leasectl --version: %q", res.Stdout)
	}

	var fromFlag, fromCmd map[string]any
	for _, tc := range []struct {
		args []string
		into *map[string]any
	}{{[]string{"--version", "-o", "json"}, &fromFlag}, {[]string{"-o", "json", "version"}, &fromCmd}} {
		res := runCLI(t, nil, tc.args...)
		wantExit(t, res, ExitOK)
		if err := json.Unmarshal([]byte(res.Stdout), tc.into); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, res.Stdout)
		}
		for _, key := range []string{"schema_version", "ok", "version", "commit", "date", "modified", "go_version", "platform"} {
			if _, ok := (*tc.into)[key]; !ok {
				t.Errorf("%v: no %q in %s", tc.args, key, res.Stdout)
			}
		}
	}
	if fromFlag["version"] != fromCmd["version"] || fromFlag["go_version"] != runtime.Version() {
		t.Errorf("--version -o json %v differs from version -o json %v", fromFlag, fromCmd)
	}

	res = runCLI(t, nil, "version", "extra")
	wantExit(t, res, ExitUsage)
	if !strings.Contains(res.Stderr, "takes no arguments") {
		t.Errorf("stderr: %s", res.Stderr)
	}
}

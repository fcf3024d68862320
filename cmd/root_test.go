package cmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
)

func TestNonUsageErrorsShowNoUsage(t *testing.T) {
	res := runCLI(t, nil, "lab", "status", "--dir", t.TempDir())
	if res.Code != ExitUsage {
		t.Fatalf("status of a missing lab: exit %d, want 2; stderr: %s", res.Code, res.Stderr)
	}
	if strings.Contains(res.Stderr, "Usage:") || strings.Contains(res.Stderr, "--help' for usage") {
		t.Errorf("usage or a hint to it shown for an error that is not about usage: %s", res.Stderr)
	}
	if !strings.Contains(res.Stderr, "leasectl lab up") {
		t.Errorf("the error does not say what to do: %s", res.Stderr)
	}
}

// TestLabRefusalExits2: where the lab cannot run (Windows, see
// lab.Support), its refusal exits 2 as leasectl run's does, whether it
// comes from lab up's own check or wrapped by lab.Start or lab.Load.
func TestLabRefusalExits2(t *testing.T) {
	refusal := fmt.Errorf("%w, and this is Windows", lab.ErrUnsupported)
	for _, err := range []error{refusal, fmt.Errorf("start lab: %w", refusal), &InputError{Err: fmt.Errorf("leasectl lab: %w", refusal)}} {
		if code := ExitCode(err); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", err, code, ExitUsage)
		}
	}
}

func TestHelpReadsWell(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"lab", "--help"}, {"lab", "up", "--help"}, {"lab", "env", "--help"}, {"completion", "--help"}} {
		res := runCLI(t, nil, args...)
		if res.Code != 0 {
			t.Errorf("%v: exit %d", args, res.Code)
		}
		if !strings.Contains(res.Stdout, "Usage:") || len(res.Stdout) < 200 {
			t.Errorf("%v: thin help: %q", args, res.Stdout)
		}
	}
}

func TestDSNResolutionOrder(t *testing.T) {
	cases := []struct {
		name   string
		flag   string
		env    map[string]string
		want   string
		source string
	}{
		{"flag wins", "postgres://flag", map[string]string{"LEASECTL_DSN": "postgres://l", "DATABASE_URL": "postgres://d"}, "postgres://flag", "--dsn"},
		{"LEASECTL_DSN next", "", map[string]string{"LEASECTL_DSN": "postgres://l", "DATABASE_URL": "postgres://d"}, "postgres://l", "LEASECTL_DSN"},
		{"DATABASE_URL next", "", map[string]string{"DATABASE_URL": "postgres://d"}, "postgres://d", "DATABASE_URL"},
		{"then libpq's", "", map[string]string{}, "", "PG* environment"},
	}
	for _, tc := range cases {
		app := &App{Getenv: func(k string) string { return tc.env[k] }, Global: GlobalOptions{DSN: tc.flag}}
		got, src := app.DSN("")
		if got != tc.want || src != tc.source {
			t.Errorf("%s: got %q from %s, want %q from %s", tc.name, got, src, tc.want, tc.source)
		}
	}
	app := &App{Getenv: func(string) string { return "postgres://env" }, Global: GlobalOptions{DSN: "postgres://flag"}}
	if got, _ := app.DSN("postgres://arg"); got != "postgres://arg" {
		t.Errorf("a positional DSN must win, got %q", got)
	}
}

func TestKeysPathResolutionOrder(t *testing.T) {
	app := &App{Getenv: func(k string) string { return map[string]string{"LEASECTL_KEYS": "/env.yaml"}[k] }}
	if got := app.KeysPath(); got != "/env.yaml" {
		t.Errorf("env: got %q", got)
	}
	app.Global.Keys = "/flag.yaml"
	if got := app.KeysPath(); got != "/flag.yaml" {
		t.Errorf("flag: got %q", got)
	}
	app = &App{Getenv: func(string) string { return "" }}
	if got := app.KeysPath(); got != "keys.yaml" {
		t.Errorf("default: got %q", got)
	}
}

// TestCompletionScriptsAreCurrent fails when completions/ is stale.
func TestCompletionScriptsAreCurrent(t *testing.T) {
	for _, shell := range Shells {
		var buf bytes.Buffer
		if err := GenerateCompletion(shell, &buf); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "completions", CompletionFile(shell))
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run: go generate ./cmd)", path, err)
		}
		if !bytes.Equal(committed, buf.Bytes()) {
			t.Errorf("%s is stale: run `go generate ./cmd` (or make completions) and commit the result", path)
		}
		res := runCLI(t, nil, "completion", shell)
		if res.Code != 0 || res.Stdout != buf.String() {
			t.Errorf("leasectl completion %s differs from the generated script (exit %d)", shell, res.Code)
		}
	}
}

package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// cliResult is what a user sees from one invocation.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

// runCLI runs leasectl in-process with in-memory streams, no terminal, and
// an environment made only of env.
func runCLI(t *testing.T, env map[string]string, args ...string) cliResult {
	t.Helper()
	return runCLIWith(t, context.Background(), env, false, "", args...)
}

func runCLIWith(t *testing.T, ctx context.Context, env map[string]string, tty bool, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut, InTTY: tty, OutTTY: tty, ErrTTY: tty},
		Getenv: func(k string) string { return env[k] },
	}
	code := Run(ctx, app, args)
	return cliResult{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

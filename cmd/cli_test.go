package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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

// runStubbed runs args like runCLI, in a tree where each of cmds (built with
// a runF, for the same app) takes the place of the command of its name: the
// command line is parsed and checked as leasectl does, and runF gets the
// options instead of anything running. No database.
func runStubbed(t *testing.T, env map[string]string, cmds func(app *App) []*cobra.Command, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &App{
		IO:     &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Getenv: func(k string) string { return env[k] },
	}
	root := NewRootCmd(app)
	for _, c := range cmds(app) {
		replaceCmd(t, root, c)
	}
	code := runTree(context.Background(), app, root, args)
	return cliResult{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// replaceCmd puts c in root's tree in place of the command with its name
// and usage line.
func replaceCmd(t *testing.T, root, c *cobra.Command) {
	t.Helper()
	var walk func(parent *cobra.Command) bool
	walk = func(parent *cobra.Command) bool {
		for _, old := range parent.Commands() {
			if old.Name() == c.Name() && old.Use == c.Use {
				c.GroupID = old.GroupID
				parent.RemoveCommand(old)
				parent.AddCommand(c)
				return true
			}
			if walk(old) {
				return true
			}
		}
		return false
	}
	if !walk(root) {
		t.Fatalf("no command %q in the tree", c.Use)
	}
}

// stubAll builds every command that has a runF with one that records that
// it ran (in *ran, by name) and does nothing else.
func stubAll(ran *[]string) func(app *App) []*cobra.Command {
	return func(app *App) []*cobra.Command {
		mark := func(name string) { *ran = append(*ran, name) }
		return []*cobra.Command{
			newProbeCmd(app, func(*probeOptions) error { mark("probe"); return nil }),
			newWhoCmd(app, func(*whoOptions) error { mark("who"); return nil }),
			newHistoryCmd(app, func(*historyOptions) error { mark("history"); return nil }),
			newFenceInitCmd(app, func(*fenceInitOptions) error { mark("fence init"); return nil }),
			newVerifyCmd(app, func(*verifyOptions) error { mark("verify"); return nil }),
			newFailoverCmd(app, func(*failoverOptions) error { mark("failover"); return nil }),
			newRunCmd(app, func(*runOptions) error { mark("run"); return nil }),
			newKeysLintCmd(app, func(*keysLintOptions) error { mark("keys lint"); return nil }),
			newKeysDiffCmd(app, func(*keysDiffOptions) error { mark("keys diff"); return nil }),
			newLabCmd(app, func(o *labOptions) error { mark("lab " + o.Op); return nil }),
		}
	}
}

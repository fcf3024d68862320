package cmd

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/test/leasetest"
)

// TestCtrlCAtThePromptEndsAtOnce: SIGINT at failover's [y/N] prompt (it
// cancels the command's context) ends the command at once with exit 130,
// and nothing is done: the leader still holds the key. The answer a person
// was typing is never read.
func TestCtrlCAtThePromptEndsAtOnce(t *testing.T) {
	_, pid := leader(t, needLab(t).DirectDSN(), "poller-a", foPollerKey)
	in, typing := io.Pipe() // a terminal nobody answers on
	defer typing.Close()
	var out, errOut leasetest.Buffer // written by the command while the test reads
	app := &App{
		IO:     &IOStreams{In: in, Out: &out, ErrOut: &errOut, InTTY: true, OutTTY: true, ErrTTY: true},
		Getenv: func(string) string { return "" },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, app, []string{"--dsn", needLab(t).DirectDSN(), "--keys", foKeys(t), "failover", "poller"})
	}()
	deadline := time.Now().Add(hang)
	for !strings.Contains(out.String()+errOut.String(), "[y/N]") {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt; stdout:\n%s\nstderr:\n%s", &out, &errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // what SIGINT does
	var code int
	select {
	case code = <-done:
	case <-time.After(hang):
		t.Fatal("failover still waits for an answer after Ctrl-C")
	}
	if code != ExitInterrupted || !strings.Contains(errOut.String(), "interrupted at the prompt: nothing done") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 130 and 'nothing done'", code, &errOut)
	}
	if hs := holders(t, foPollerKey); !slices.Contains(hs, uint32(pid)) {
		t.Errorf("holders of the key after an interrupted prompt: %v, want the leader %d", hs, pid)
	}
}

// TestNoDSNAnywhereSaysSo: with no DSN in any of the places leasectl looks,
// the error says that, not "check host= in the DSN".
func TestNoDSNAnywhereSaysSo(t *testing.T) {
	for _, v := range pgConnVars {
		t.Setenv(v, "") // libpq's variables are read from the process itself
	}
	res := runCLI(t, map[string]string{}, "who", "--keys", foKeys(t))
	if res.Code != ExitUnavailable || !strings.Contains(res.Stderr, "no DSN was given: leasectl looked for --dsn, $LEASECTL_DSN, $DATABASE_URL") ||
		strings.Contains(res.Stderr, "check host=") {
		t.Errorf("exit %d, stderr:\n%s", res.Code, res.Stderr)
	}
}

// TestRunWithNoDSNSaysSo: run retries its connects, so with no DSN in any
// of the places leasectl looks it says so once, before the first retry.
func TestRunWithNoDSNSaysSo(t *testing.T) {
	for _, v := range pgConnVars {
		t.Setenv(v, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := runCLIWith(t, ctx, map[string]string{}, false, "", "run", "--keys", foKeys(t), "--role", "poller", "--", "sleep", "60")
	if !strings.Contains(res.Stderr, "no DSN was given: leasectl looked for --dsn, $LEASECTL_DSN, $DATABASE_URL") ||
		!strings.Contains(res.Stderr, "connecting to libpq's default, the local server at ") {
		t.Errorf("exit %d, stderr:\n%s", res.Code, res.Stderr)
	}
}

package supervisor

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

var brokenPipes sync.Once

// SurviveBrokenPipes makes a write to a pipe whose reader has gone fail
// with EPIPE instead of killing this process: Go kills a program with
// SIGPIPE on a failed write to descriptor 1 or 2 unless it is notified of
// SIGPIPE. `leasectl run ... 2>&1 | head` would otherwise lose its leader
// at the first log line after head exits. It notifies rather than ignores:
// an ignored signal stays ignored across exec, in the programs this process
// starts, which must keep the default.
func SurviveBrokenPipes() {
	brokenPipes.Do(func() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) })
}

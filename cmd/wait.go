package cmd

import (
	"os"
	"sync"
	"time"

	"github.com/briandowns/spinner"
)

// spinAfter is how long a wait must last before it shows itself: a quick
// connect draws nothing.
const spinAfter = 250 * time.Millisecond

// waiting shows, on a terminal (stderr), a spinner with what is being
// waited for and the time waited so far, until stop is called, which
// erases it. Piped, or with -o json, it shows nothing: the wait is in the
// exit status and the output that follows.
func (a *App) waiting(what string) (stop func()) {
	return a.waitingFor(func(waited time.Duration) string { return what + " " + fmtAge(waited) })
}

// waitingFor is waiting with a text that changes as the wait goes on:
// say gets the time waited so far and returns the whole line.
func (a *App) waitingFor(say func(waited time.Duration) string) (stop func()) {
	f, ok := a.IO.ErrOut.(*os.File)
	if !ok || !a.IO.ErrTTY || a.Getenv("TERM") == "dumb" {
		return func() {}
	}
	began := time.Now()
	s := spinner.New(spinner.CharSets[14], 100*time.Millisecond, spinner.WithWriterFile(f), spinner.WithHiddenCursor(false))
	s.PreUpdate = func(s *spinner.Spinner) {
		s.Suffix = " " + termSafe(say(time.Since(began)))
	}
	s.Suffix = " " + termSafe(say(0))
	var mu sync.Mutex
	stopped := false
	t := time.AfterFunc(spinAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			s.Start()
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		s.Stop()
	}
}

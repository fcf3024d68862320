package cmd

import (
	"fmt"
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
	f, ok := a.IO.ErrOut.(*os.File)
	if !ok || !a.IO.ErrTTY || a.Getenv("TERM") == "dumb" {
		return func() {}
	}
	began := time.Now()
	s := spinner.New(spinner.CharSets[14], 100*time.Millisecond, spinner.WithWriterFile(f), spinner.WithHiddenCursor(false))
	s.PreUpdate = func(s *spinner.Spinner) {
		s.Suffix = fmt.Sprintf(" %s %s", termSafe(what), fmtAge(time.Since(began)))
	}
	s.Suffix = " " + termSafe(what)
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

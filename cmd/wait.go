package cmd

import (
	"os"
	"sync"
	"time"
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
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(spinAfter):
		case <-done:
			return
		}
		tick := time.NewTicker(spinEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			frame := spinFrames[i%len(spinFrames)]
			// \r and erase-line redraw the line in place.
			_, _ = f.WriteString("\r\x1b[K" + frame + " " + termSafe(say(time.Since(began))))
			select {
			case <-tick.C:
			case <-done:
				_, _ = f.WriteString("\r\x1b[K")
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// spinFrames are the spinner's frames, drawn every spinEvery.
var spinFrames = [...]string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

const spinEvery = 100 * time.Millisecond

//go:build !linux

package supervisor

import "time"

// exitWatch is Linux's (a pidfd); elsewhere the obituary looks at the
// processes (and has no obituary on macOS or Windows anyway).
type exitWatch struct{}

func watchExit(int, uint64) *exitWatch                   { return nil }
func (w *exitWatch) close()                              {}
func awaitTrees([]*programTree, []*exitWatch, time.Time) {}
func bootTicks() uint64                                  { return 0 }

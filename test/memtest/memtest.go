// Package memtest measures how much memory a piece of code allocates, for
// tests that bound the cost of hostile input (an alias bomb, a huge keys
// file) in bytes rather than in allocations, which testing.AllocsPerRun
// counts.
package memtest

import "runtime"

// Allocated returns how many bytes fn allocates: an upper bound of the heap
// it grows by. Allocations of other goroutines running meanwhile count too,
// so callers run fn while no other test of theirs runs in parallel.
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

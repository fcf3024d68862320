// Package schedule is leasectl's randomized fault schedule, the way
// Jepsen tests databases: a fleet of real `leasectl run --fence` replicas
// (three over a Procfile of four roles, two over a single role, one of
// them in a network namespace) runs a worker per role that writes fenced
// rows through PgBouncer in transaction mode and holds a flock witness,
// while a seeded schedule injects the faults of production in
// interleaving order (SIGKILLs, freezes below and past the term's
// deadline, frozen programs, terminated sessions, PostgreSQL and
// PgBouncer restarts and reloads, failovers, a partition, pauses). Then a
// checker reads the recorded history, not timings: the committed writes
// with their commit timestamps, the term record (`leasectl history`), the
// workers' runs and the faults; it finds late writes, stale commits, an
// inconsistent term record, overlaps not explained by a replica frozen
// past its deadline, and roles not led at the end, and holds each
// leaderless gap to the bound its faults' documented timings give. The same seed draws the same
// schedule. The checker (history.go) is tested on histories made by hand;
// the schedule (Linux, root) runs in its bounded form in `go test ./...`,
// and in full with `make chaos-schedule SEED=N DURATION=D`, which writes
// the history it checked; `go run ./test/schedule/recheck FILE` checks a
// written history again.
package schedule

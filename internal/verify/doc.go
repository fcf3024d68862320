// Package verify runs the post-deploy and game-day checks against a live
// deployment: for each role, that
// exactly one live session leads it (one_leader); optionally, that a forced
// failover moves the lease to another session within a limit and the old
// backend is gone (clean_failover); and that the session-stability probe
// refuses the pooler DSN that workers must not hold leases over
// (pooler_rejection). [Run] returns one [Result] per check and role, with
// pass, fail or skip and one line of why; rendering is the caller's.
package verify

// Package probe answers one question before anyone trusts a lease: over
// this DSN, does a session-level advisory lock give mutual exclusion?
//
// The textbook session probe (backend pid, temp table, pid again, row back) is
// necessary but not sufficient: through a quiet PgBouncer in transaction
// mode the lone client keeps getting the same pooled backend, the temp table
// survives, and the probe passes, while two clients then both win the lock.
// So [Run] also creates contention: while connection A holds the probe key,
// further connections through the same DSN must get other backends and must
// fail to take the key, and A must still hold it afterwards. Each statement
// is its own round trip and its own transaction, because a batch, pipeline
// or multi-statement string runs as one implicit transaction that a pooler
// keeps on one backend.
//
// The probe leaves nothing behind: its temp table is dropped and its key is
// released on every connection that may have taken it, on every path,
// including cancellation.
package probe

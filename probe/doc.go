// Package probe answers one question before anyone trusts a lease: over
// this DSN, does a session-level advisory lock give mutual exclusion?
//
// The textbook session probe (backend pid, temp table, pid again, row back) is
// necessary but not sufficient: through a quiet PgBouncer in transaction
// mode the lone client keeps getting the same pooled backend, the temp table
// survives, and the probe passes, while two clients then both win the lock.
// So [Run] also creates contention: while connection A holds the probe key,
// further connections through the same DSN must get other backends of the
// same server and must fail to take the key, and A must still hold it
// afterwards; then A disconnects, and the key must be free. Each statement
// is its own round trip and its own transaction, because a batch, pipeline
// or multi-statement string runs as one implicit transaction that a pooler
// keeps on one backend, and each says which backend and which server ran
// it. Behind a proxy, ten contenders are also opened one after another once
// A holds the key: a balancer may put connections that arrive together on
// one server, and one that spreads connections over two servers sends all
// ten to A's with a chance of at most 1 in 1,024.
//
// The probe leaves nothing behind: its key is released on every connection
// that may have taken it, on every path, including cancellation, and where
// a connection that held it closed unobserved, pg_locks says what is left.
package probe

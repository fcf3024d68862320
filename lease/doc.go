// Package lease runs work only while this process holds a PostgreSQL
// session-level advisory lock: leader election for leader-only workers.
//
// [Run] keeps one dedicated connection (never a pool) in a pooler-safe exec
// mode. On every (re)connect it checks that the server is a primary
// (pg_is_in_recovery) and runs the session-stability probe; a connection
// that fails either never leads, and the refusal is logged loudly. Then it
// stands by in the server's lock queue (pg_advisory_lock under a bounded
// lock_timeout), so that the key passes to it the moment the holder's
// session ends, in milliseconds rather than a retry interval. While leading
// it keeps reading the idle connection, so the server's FATAL (the session
// was terminated, the server is shutting down) or EOF is seen at once, and
// it heartbeats with SELECT 1 to notice a silent network. When the lease is
// lost, work's context is cancelled, Run waits for work to return and only
// then reconnects; when Run's context ends, it stops work, unlocks and
// closes, so no session holds the key after Run returns.
//
// The timing rule: the leader notices a dead network within
// HeartbeatInterval + HeartbeatTimeout of the last good round trip, and work
// needs up to StopTimeout to stop. The server must keep the session (and the
// key) of a silent client for longer than that, or a second leader starts
// while the first still runs. Run sets tcp_user_timeout and TCP keepalives
// on its server session to ServerTimeout, which defaults to HeartbeatInterval
// + 2 × HeartbeatTimeout + StopTimeout and must exceed the sum above; the
// operating system's default (about 2 h 11 min) is safe but makes a
// partitioned leader's replacement wait that long.
//
// [Command] runs an external program as the work of a lease; it is what
// `leasectl run` uses.
package lease

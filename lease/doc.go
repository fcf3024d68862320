// Package lease runs work only while this process holds a PostgreSQL
// session-level advisory lock: leader election for leader-only workers.
//
// [Run] keeps two dedicated connections (never a pool) in a pooler-safe
// exec mode: the lease session, which waits for and holds the key, and the
// stop fence session. On every (re)connect it checks that the server is a
// primary and runs the session-stability probe; a connection that fails
// either never leads, and the refusal is logged loudly. Then it stands by in
// the server's lock queue (pg_advisory_lock under a bounded lock_timeout),
// so that the key passes to it the moment the holder's session ends, in
// milliseconds rather than a retry interval.
//
// The lease proves itself. When the lock is granted and at every heartbeat,
// one statement shows that it ran on the session's own backend, on the same
// server (system identifier and postmaster start time), a primary, and that
// pg_locks shows the key granted to that backend. A pooler reconfigured
// under a live fleet, a load balancer or a promotion shows up as a
// mismatch, and a mismatch is a loss.
//
// The stop fence. Before work starts, the new leader also takes the key's
// fence (the same 64 bits as a two-int4 advisory key) on its second
// session, and it releases the fence only once work has returned. When the
// server ends a leader's lease session (pg_terminate_backend, `leasectl
// failover --force`, idle_session_timeout), a stand-by gets the key at once
// but waits for the fence, so the old work and the new never overlap, and
// the handover takes the old work's stop time plus milliseconds. A program
// run by package supervisor inherits the fence session's socket
// ([Session.DupFenceSocket]), so a SIGKILLed leader's fence outlives it
// until its program is gone.
//
// While leading, Run keeps reading both idle connections, so the server's
// FATAL (the session was terminated, the server is shutting down) or EOF is
// seen at once, and it heartbeats to notice a silent network. When the lease
// is lost, work's context is cancelled, Run waits for work to return,
// releases the fence, and only then reconnects; when Run's context ends, it
// stops work, unlocks and closes, so no session holds the key after Run
// returns. The lease session LISTENs for requests to step down (`leasectl
// failover`): the leader answers, stops work, and releases the key to the
// first stand-by in the queue ([ErrResigned]).
//
// Run never sends a cancel request (PgBouncer 1.18 crashes on bursts of
// them): a stand-by told to stop closes its connection, and the server ends
// its wait within client_connection_check_interval, which the lease sets.
//
// The timing rule (package timing): the leader notices a dead network within
// HeartbeatInterval + HeartbeatTimeout of the last good round trip, and work
// needs up to StopTimeout to stop. The server must keep the session (and the
// key) of a silent client for longer than that, or a second leader starts
// while the first still runs. Run sets tcp_user_timeout and TCP keepalives
// on its sessions to ServerTimeout, which defaults to HeartbeatInterval +
// 2 × HeartbeatTimeout + StopTimeout and must exceed the sum above; the
// operating system's default (about 2 h 11 min) is safe but makes a
// partitioned leader's replacement wait that long.
//
// Each leadership is a term in the term record; work gets its fencing
// token from [Session.FenceToken] and checks it with [Fence] inside its own
// transactions, so that a frozen leader's late writes fail instead of
// landing beside the next leader's.
//
// [RunGroup] runs many roles over one lease session and one stop fence
// session: the lease session holds the key of every role it leads, and a
// stand-by, which cannot queue for many keys on one session, polls for them
// and spreads the roles over the replicas.
//
// Package supervisor runs an external program as a lease's work, the way
// `leasectl run` does. Package lease/leasehttp serves a lease's Prometheus
// metrics and its /healthz and /readyz checks, as `leasectl run
// --metrics-addr` does.
package lease

// Package locks holds the SQL of session-level advisory locks: key encoding
// as pg_locks shows it, taking and releasing a key, and reading who holds
// and awaits each key ([Read], one query over pg_locks and
// pg_stat_activity) with the decisions built on it: which role a key
// belongs to, whether a lease is held, and whether its holder is stale.
// A forced failover ([FindTarget], [Target.Failover]) terminates a key's
// holder in one statement that re-checks it at that instant ([Terminate])
// and waits for another session to take the key ([AwaitTakeover]).
//
// A bigint advisory key k appears in pg_locks as classid = high 32 bits,
// objid = low 32 bits, objsubid = 1; the two-int4 form (k1, k2) as classid =
// k1, objid = k2, objsubid = 2. Session locks are re-entrant and stack: a
// session that took a key twice must release it twice, so [Unlock] releases
// until the server says the session no longer holds it.
package locks

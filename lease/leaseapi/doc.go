// Package leaseapi serves the leases of a group of roles (package lease's
// RunGroup) to an application beside it, in any language, over a small
// HTTP/JSON API: `leasectl serve`.
//
// An [API] gives each role a Work function ([API.GroupRole]) that does no
// work of its own: while the replica leads the role, it publishes "leader
// in epoch E, fencing token T" and blocks until the lease is lost, the
// application resigns, or the application stops checking in (Options.AppTTL).
// The application asks over HTTP ([API.Handler]):
//
//   - GET /v1/roles and GET /v1/roles/ROLE: the [RoleState] of each role.
//   - GET /v1/roles/ROLE?epoch=E&wait=D: a blocking query; it answers when
//     the role's epoch differs from E (0 while this replica does not lead),
//     or when D (at most [MaxWait]) has passed.
//   - GET /v1/watch: Server-Sent Events, the state of every role, then one
//     event per change.
//   - POST /v1/roles/ROLE/alive: the application checks in.
//   - POST /v1/roles/ROLE/resign: the application steps down; the replica
//     stands by again after a short hold.
//
// The promise. RoleState.ValidUntil is the latest moment the application
// may go on working as the leader without asking again: the last round
// trip that proved the lease sessions alive plus the heartbeat interval
// and timeout (by then the next heartbeat has renewed the lease or failed),
// and never later than the application's check-in deadline. The group runs
// with [StopTimeout], the heartbeat interval plus two heartbeat timeouts,
// so a term's deadline (package timing: the heartbeat interval, three
// heartbeat timeouts and the stop time past its last renewal) and the time
// the server keeps a silent leader's session both lie beyond any
// ValidUntil handed out, by about two heartbeat timeouts, even when this
// process is killed or frozen.
//
// When a role's lease ends here (lost, resigned, app TTL, shutdown), the
// API first shows the role as not led (watchers get the event), then keeps
// the lease's work, and with it the stop fence and the term, until the
// last ValidUntil it handed out has passed, so that an application that
// only looks at ValidUntil has stopped before the next leader begins. A
// resign (POST .../resign, with ?epoch=E after the fact) says the
// application has stopped, and ends that wait at once.
//
// What no local API can do is stop a thread that ignores it: an
// application frozen (or slow) past ValidUntil can still write late. Its
// writes to the lease's database are refused by the fencing token
// (leasectl.fence in the same transaction), which is what the token is
// for.
package leaseapi

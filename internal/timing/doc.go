// Package timing is leasectl's one model of time, shared by the lease,
// `leasectl run` and the probe.
//
// The safety rule: a leader must notice that it lost its session, and stop
// its work, before the server can hand the key to another replica. A leader
// whose network goes silent notices within [Lease.Notice] of its last good
// round trip (the next heartbeat and its timeout) and has stopped its work
// [Lease.Stopped] after it. The server drops a client it cannot reach after
// a time that depends on its TCP settings and on what was in flight at the
// cut ([TCP.Earliest]); that must be longer. A lease sets its own sessions'
// settings ([Lease.ServerTCP]) so that it is, and the probe judges a
// server's settings, which matter for workers that do not, by the same
// numbers.
package timing

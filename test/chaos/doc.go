// Package chaos is leasectl's fault suite: five replicas of the real
// `leasectl run` binary contend for one role, each running the flock witness
// (test/leasetest) as its program, while the suite injects the faults
// that break leader election in production: SIGKILLs of the leading
// leasectl, pg_terminate_backend of its session, PostgreSQL restarts, a
// network partition of the leader (a network namespace whose path to the
// server is cut with an nftables drop rule), and an HA failover to a
// promoted standby; one replica goes through PgBouncer in transaction mode
// throughout. The witness proves that no two programs ever run at once; the
// suite reports, per scenario, the faults injected, the overlaps seen (which
// must be zero), the leads over an unsafe connection (zero) and the takeover
// times. TestDeadPeerTime measures when the server drops silent sessions
// under a partition, on both paths of the timing model (package timing); TestWitnessSeesOverlaps
// shows that the witness does report an overlap when one happens.
//
// The tests are the suite; this file and netns.go hold what they need that
// is not a test: setting up and tearing down the network namespace. `go test
// ./test/chaos` runs a bounded version (CI runs it on every submission);
// `make chaos` runs the full one (-args -full). The suite is Linux's
// (network namespaces, nftables, Pdeathsig, /proc): on other systems every
// file but this one is left out, and the package is empty.
package chaos

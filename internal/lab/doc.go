// Package lab starts and stops a throwaway PostgreSQL cluster with PgBouncer
// in front of it, from the system's own binaries, on free loopback ports.
//
// It is what `leasectl lab` runs and what every integration test uses: one
// lab per test package, started in TestMain through test/pgtest's
// RunMain (test code, kept out of the leasectl binary). The primary
// listens on 127.0.0.1 and on a unix socket; each pooler is its own
// PgBouncer process with its own port and pool mode (transaction and session by
// default; statement mode or a pool of one on request); a streaming hot
// standby made with pg_basebackup -R is optional. Extensions
// ([Options.Extensions]) add further processes that the lab starts after
// its servers and stops with them, without knowing what they are: the
// front doors that tests put between a client and the primary (pgpool-II,
// HAProxy, socat relays) live in test/labtest, which the leasectl
// binary does not link.
// With Options.HA the lab is a high-availability cluster instead: one etcd
// member, two PostgreSQL nodes managed by Patroni (node1 bootstraps as the
// primary, node2 streams from it) and HAProxy routing a primary and a
// replicas listener by Patroni's REST health checks; [Lab.Switchover],
// [Lab.KillPrimary] and [Lab.ReviveNode] change the primary as an operator
// or a dead machine would, and [Lab.HAPrimary] tells which node it is now.
// PostgreSQL and PgBouncer both refuse to run as root, so on Linux, when the
// caller is root, the servers (and the extensions' daemons, alike) run as the
// unprivileged "postgres" user that Debian's packages create, and their
// files live in a temporary directory that user owns.
//
// The lab runs on Linux and macOS. On macOS it takes Homebrew's PostgreSQL
// and PgBouncer (see [FindBinaries]), runs them as the caller and refuses
// root, and finds processes with sysctl and lsof where Linux reads /proc;
// what differs lives in files named for each system (support_*.go,
// signal_*.go, procs_*.go, shm_*.go). On Windows [Start] and [Load] return
// [ErrUnsupported] (see [Support]): the package builds there, with the same
// API, so that the rest of leasectl does.
//
// DSNs never carry the password: the lab writes a pgpass file and names it
// with the passfile parameter, which both libpq and pgx honour.
package lab

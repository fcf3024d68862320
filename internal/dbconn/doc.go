// Package dbconn turns a DSN into a pgx connection that is safe to use
// through a connection pooler, and turns the ways that can fail into typed
// errors that never carry the DSN's password.
//
// Every leasectl connection goes through [Parse] and [Connect]: the statement
// cache is off and queries use [pgx.QueryExecModeExec], because pgx's default
// cached prepared statements fail through transaction poolers (SQLSTATE 42P05)
// and a lease connection must behave the same with or without a pooler in
// front. An empty DSN means what it means to libpq: PG* environment
// variables, the pgpass file and service files, as pgx reads them.
// (locks.Read sends its statement the same way, through pgconn, to ask for
// binary rows.)
package dbconn

// Package term holds the SQL of the durable term record: the schema
// leasectl in the lease's own database, with one row per role for its
// current term (leasectl.term) and one row per term for its history
// (leasectl.term_history), and the statements that begin, renew, end and
// read terms.
//
// A session-level advisory lock dies with its session, and so does the
// stop fence; a row does not. When the server ends every session of a
// leader at once (a restart, pg_terminate_backend by application name),
// the next leader finds the previous term not ended and waits until its
// holder records the end (its work is gone) or until the term's deadline
// passes (see timing.Lease.TermDeadline). The current-term row changes only
// when a term begins or ends, never at a renewal, so that a fencing check
// of it in a REPEATABLE READ transaction is not disturbed by heartbeats;
// renewals go to the term's history row.
package term

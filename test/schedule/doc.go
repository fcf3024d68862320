// Package schedule is the start of leasectl's randomized fault schedule:
// the checker that reads a recorded history (the fenced writes as the
// database committed them, the role's terms from the term record, the
// flock witness's working intervals, the faults injected) and says
// whether every promise held, the way Jepsen's checkers read a history
// rather than timings. The fleet and the seeded schedule that record such
// a history are not written yet; the checker is tested on histories made
// by hand.
package schedule

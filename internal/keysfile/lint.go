package keysfile

import (
	"fmt"

	"github.com/leasectl/leasectl/locks"
)

// Lint checks how the roles of a file relate to each other: shared keys,
// retired keys in use again, a name both active and retired, the probe's
// key range (rules DUPLICATE_KEY, ACTIVE_AND_RETIRED and PROBE_KEY). It
// returns the problems found, in file order.
func Lint(f *File) []Problem {
	problems := duplicateKeys(f)
	for _, e := range f.Roles {
		if r, ok := f.RetiredRole(e.Name); ok {
			problems = append(problems, Problem{Rule: RuleActiveAndRetired, Line: e.Line, Role: e.Name,
				Message: fmt.Sprintf("role %q is both active and retired (line %d); delete one of the two entries", e.Name, r.Line)})
		}
		if locks.IsProbeKey(e.Key) {
			problems = append(problems, Problem{Rule: RuleProbeKey, Line: e.Line, Role: e.Name,
				Message: fmt.Sprintf("role %q uses key %d (0x%x), in the range leasectl probe takes its keys from (0x%x–0x%x): a probe could hold the role's lock and keep its workers from leading; pick another key", e.Name, e.Key, e.Key, locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff)})
		}
	}
	return problems
}

// duplicateKeys finds keys used by two active roles, or by an active role
// and a retired one. Both would contend for one lock: only one of two roles
// could ever lead, or a retired role's old binaries would lead the new one.
func duplicateKeys(f *File) []Problem {
	var problems []Problem
	retired := map[int64]Entry{}
	for _, e := range f.Retired {
		if _, ok := retired[e.Key]; !ok {
			retired[e.Key] = e
		}
	}
	active := map[int64]Entry{}
	for _, e := range f.Roles {
		if first, ok := active[e.Key]; ok {
			problems = append(problems, Problem{Rule: RuleDuplicateKey, Line: e.Line, Role: e.Name,
				Message: fmt.Sprintf("roles %q (line %d) and %q share key %d: they contend for one lock, so only one of them can lead; give %q a new key", first.Name, first.Line, e.Name, e.Key, e.Name)})
			continue
		}
		active[e.Key] = e
		if r, ok := retired[e.Key]; ok && r.Name != e.Name {
			problems = append(problems, Problem{Rule: RuleDuplicateKey, Line: e.Line, Role: e.Name,
				Message: fmt.Sprintf("role %q uses key %d, which retired role %q held (line %d): a retired key is never reused, since binaries still running %q would contend with %q; give %q a new key", e.Name, e.Key, r.Name, r.Line, r.Name, e.Name, e.Name)})
		}
	}
	return problems
}

package keys

import (
	"fmt"

	"github.com/leasectl/leasectl/locks"
)

// The lint rules, by their stable names. Problems carry one of these in
// [Problem.Rule]; CI scripts may match on them.
const (
	RuleFile             = "FILE"
	RuleSyntax           = "YAML_SYNTAX"
	RuleAlias            = "YAML_ALIAS"
	RuleStructure        = "STRUCTURE"
	RuleUnknownField     = "UNKNOWN_FIELD"
	RuleDuplicateField   = "DUPLICATE_FIELD"
	RuleInvalidName      = "INVALID_NAME"
	RuleInvalidKey       = "INVALID_KEY"
	RuleDuplicateKey     = "DUPLICATE_KEY"
	RuleActiveAndRetired = "ACTIVE_AND_RETIRED"
	RuleProbeKey         = "PROBE_KEY"
)

// RuleDoc describes one rule for the keys commands' help texts and the
// rules tables of docs/guide/keys.md (whose test holds it complete).
type RuleDoc struct {
	Name     string
	Severity Severity
	Doc      string
}

// LintRules are the rules `keys lint` checks, in the order they apply. Every
// one of them makes the file invalid.
var LintRules = []RuleDoc{
	{RuleFile, SeverityError, fmt.Sprintf("the file cannot be read, or is larger than %d KiB", MaxFileSize>>10)},
	{RuleSyntax, SeverityError, "the YAML does not parse, is empty, or holds more than one document"},
	{RuleAlias, SeverityError, "anchors (&a), aliases (*a) and merge keys (<<) are refused, so an alias bomb is never expanded"},
	{RuleStructure, SeverityError, "the top level is not a mapping with `roles:`, or a section is not a mapping of name to key"},
	{RuleUnknownField, SeverityError, "a top-level field other than `roles` and `retired`"},
	{RuleDuplicateField, SeverityError, "a field or role listed twice in one mapping (YAML readers silently keep the last)"},
	{RuleInvalidName, SeverityError, "a role name not matching `[a-z][a-z0-9_-]*`, or one YAML 1.1 reads as a boolean (`on`, `yes`, …) unless quoted"},
	{RuleInvalidKey, SeverityError, "a key that is not an int64 in plain decimal or `0x` hex: floats, strings, booleans, overflow, and spellings YAML readers disagree on (`017`, `0o17`, `1_000`)"},
	{RuleDuplicateKey, SeverityError, "two roles share a key, or an active role uses a key listed under `retired:`"},
	{RuleActiveAndRetired, SeverityError, "one name is both an active and a retired role"},
	{RuleProbeKey, SeverityError, fmt.Sprintf("a role uses a key from %d to %d (0x%x–0x%x, high half \"leas\"), the range `leasectl probe` takes its keys from", locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff, locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff)},
}

// Lint checks how the roles of a decoded file relate to each other: shared
// keys, retired keys in use again, a name both active and retired, the
// probe's key range. It returns the problems found, in file order.
func (f *File) Lint() []Problem {
	problems := f.duplicateKeys()
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
func (f *File) duplicateKeys() []Problem {
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

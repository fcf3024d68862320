package keyslint

import (
	"fmt"

	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/locks"
)

// Severity says whether a finding breaks compatibility.
type Severity string

// The severities of findings.
const (
	// SeverityError is a change that breaks a rolling deploy: `keys diff`
	// exits 1.
	SeverityError Severity = "error"
	// SeverityInfo is a compatible change worth a note in the pull request.
	SeverityInfo Severity = "info"
)

// The diff rules, by their stable names. DUPLICATE_KEY is shared with the
// lint rules.
const (
	RuleKeyChanged   = "KEY_CHANGED"
	RuleRoleRemoved  = "ROLE_REMOVED"
	RuleKeyReused    = "KEY_REUSED"
	RuleDuplicateKey = keysfile.RuleDuplicateKey
	RuleRoleAdded    = "ROLE_ADDED"
	RuleRoleRetired  = "ROLE_RETIRED"
	RuleRoleRenamed  = "ROLE_RENAMED"
)

// RuleDoc describes one rule for the keys commands' help texts and the
// rules tables of docs/guide/keys.md (whose test holds it complete).
type RuleDoc struct {
	Name     string
	Severity Severity
	Doc      string
}

// LintRules returns the rules the parser applies, which `keys lint` checks,
// in the order they apply ([keysfile.Rules]). Every one of them makes the
// file invalid.
func LintRules() []RuleDoc {
	return []RuleDoc{
		{keysfile.RuleFile, SeverityError, fmt.Sprintf("the file cannot be read, or is larger than %d KiB", keysfile.MaxFileSize>>10)},
		{keysfile.RuleSyntax, SeverityError, "the YAML does not parse, is empty, or holds more than one document"},
		{keysfile.RuleAlias, SeverityError, "anchors (&a), aliases (*a) and merge keys (<<) are refused, so an alias bomb is never expanded"},
		{keysfile.RuleStructure, SeverityError, "the top level is not a mapping with `roles:`, or a section is not a mapping of name to key"},
		{keysfile.RuleUnknownField, SeverityError, "a top-level field other than `roles` and `retired`"},
		{keysfile.RuleDuplicateField, SeverityError, "a field or role listed twice in one mapping (YAML readers silently keep the last)"},
		{keysfile.RuleInvalidName, SeverityError, "a role name not matching `[a-z][a-z0-9_-]*`, or one YAML 1.1 reads as a boolean (`on`, `yes`, …) unless quoted"},
		{keysfile.RuleInvalidKey, SeverityError, "a key that is not an int64 in plain decimal or `0x` hex: floats, strings, booleans, overflow, and spellings YAML readers disagree on (`017`, `0o17`, `1_000`)"},
		{keysfile.RuleDuplicateKey, SeverityError, "two roles share a key, or an active role uses a key listed under `retired:`"},
		{keysfile.RuleActiveAndRetired, SeverityError, "one name is both an active and a retired role"},
		{keysfile.RuleProbeKey, SeverityError, fmt.Sprintf("a role uses a key from %d to %d (0x%x–0x%x, high half \"leas\"), the range `leasectl probe` takes its keys from", locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff, locks.ProbeKeyBase, locks.ProbeKeyBase+0xffffffff)},
	}
}

// DiffRules returns the rules [Diff] applies, with their severities.
func DiffRules() []RuleDoc {
	return []RuleDoc{
		{RuleKeyChanged, SeverityError, "a role's key differs from the base: old and new binaries lock different keys and both lead"},
		{RuleRoleRemoved, SeverityError, "a role is gone without moving to `retired:` with the same key, so nothing keeps its key from being reused"},
		{RuleKeyReused, SeverityError, "a role uses a key that belonged to another role, active or retired, in the base"},
		{RuleDuplicateKey, SeverityError, "two roles of the new file share a key, or an active role uses a retired key"},
		{RuleRoleAdded, SeverityInfo, "a new role with a new key"},
		{RuleRoleRetired, SeverityInfo, "a role moved to `retired:` with its key"},
		{RuleRoleRenamed, SeverityInfo, "same key, new name, old name gone: during the rollout both names contend for the one lock"},
	}
}

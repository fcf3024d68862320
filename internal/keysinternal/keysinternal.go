// Package keysinternal is what package keys shares with internal/keyslint
// without exporting it: the rule names, and the parser applying only some of
// the rules. `keys diff` needs that: the base is history, so only its form
// must be valid, and a key shared in the new file is a finding, not a refusal.
// Package keys is the one parser; keyslint reaches it only through here.
package keysinternal

// The rule names that package keys puts in Problem.Rule. They never change:
// CI scripts, JSON output and annotations carry them.
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

// Rules are every rule package keys applies, in the order they apply; the
// first eight concern the file's form, the last three how its roles relate.
var Rules = []string{
	RuleFile, RuleSyntax, RuleAlias, RuleStructure, RuleUnknownField, RuleDuplicateField, RuleInvalidName, RuleInvalidKey,
	RuleDuplicateKey, RuleActiveAndRetired, RuleProbeKey,
}

// Package keys sets these in its init. Parse and Lint are typed in package
// keys's types, which this package cannot name (keys imports it), so they
// are held as any and keyslint asserts their types once, when it starts.
var (
	// ReadFile reads at most MaxFileSize+1 bytes of the keys file at path.
	ReadFile func(path string) ([]byte, error)

	// Parse is func(path string, data []byte, relations func(rule string)
	// bool) (*keys.File, error): keys.Parse, checking the file's form and,
	// of the rules about how roles relate, those for which relations
	// returns true (nil: none).
	Parse any

	// Lint is func(*keys.File) []keys.Problem: the problems of how the
	// roles of a file relate, in file order.
	Lint any
)

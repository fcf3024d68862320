package keysfile

// The rule names put in Problem.Rule. They never change: CI scripts, JSON
// output and annotations carry them.
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

// Rules returns every rule Parse applies, in the order they apply: the
// first eight concern the file's form, the last three (Lint's) how its
// roles relate.
func Rules() []string {
	return []string{
		RuleFile, RuleSyntax, RuleAlias, RuleStructure, RuleUnknownField, RuleDuplicateField, RuleInvalidName, RuleInvalidKey,
		RuleDuplicateKey, RuleActiveAndRetired, RuleProbeKey,
	}
}

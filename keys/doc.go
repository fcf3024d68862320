// Package keys reads, lints and compares keys.yaml, the map from role names
// to the 64-bit advisory-lock keys that replicas contend for.
//
// The map is a deployment API: during a rolling deploy old and new binaries
// run side by side, and if they compute different keys for one role, both
// lead. [Load] and [Parse] check a file with every lint rule ([LintRules]);
// [Diff] compares a new version with the one the running binaries use, the
// way `buf breaking` compares protobuf schemas, and [LoadFromGit] reads that
// base version from git (a tag, branch or commit; by default the latest tag
// reachable from HEAD). Every problem and finding names file:line.
//
// Input is treated as hostile: files are capped at [MaxFileSize], YAML
// anchors and aliases are refused rather than expanded (an alias bomb is an
// error, not a memory spike), and the YAML parser's own nesting limit bounds
// deep documents.
package keys

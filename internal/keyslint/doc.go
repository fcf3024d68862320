// Package keyslint is what `leasectl keys lint` and `keys diff` add to the
// parser of internal/keysfile: the rules' documentation and severities,
// [Diff] (which compares a new version of keys.yaml with the one the running
// binaries use, the way `buf breaking` compares protobuf schemas), and
// [LoadFromGit], which reads that base version from git (a tag, branch or
// commit; by default the latest tag reachable from HEAD). Every finding
// names file:line.
//
// A base is parsed with the form rules only (it is history), a head with
// every rule but DUPLICATE_KEY, which Diff reports as a finding.
package keyslint

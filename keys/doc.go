// Package keys reads keys.yaml, the map from role names to the 64-bit
// advisory-lock keys that replicas contend for.
//
// The map is a deployment API: during a rolling deploy old and new binaries
// run side by side, and if they compute different keys for one role, both
// lead. The package parses the file with line numbers so that every problem
// it reports can name file:line.
package keys

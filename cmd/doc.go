// Package cmd is leasectl's command line: cobra commands that parse flags,
// call into the probe, locks, keys, lease and lab packages, render what they
// return (lipgloss styles, tables, or JSON) and map errors to the
// documented exit codes in one place (exitcode.go). No SQL lives here.
//
// Like the GitHub CLI, each command has an options struct and a run function
// that tests drive with in-memory streams and a forced terminal flag.
package cmd

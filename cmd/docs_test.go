package cmd_test

import (
	"testing"

	"github.com/leasectl/leasectl/test/refdocs"
)

// TestReferenceDocsAreCurrent fails when docs/reference (markdown) or
// docs/man (man pages), generated from these commands, are stale: a flag,
// a help text or a command changed without `go generate ./cmd`.
func TestReferenceDocsAreCurrent(t *testing.T) {
	stale, err := refdocs.Stale("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range stale {
		t.Error(msg)
	}
}

package refdocs

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestReferenceIsCurrent fails when docs/reference or docs/man differ from
// what the commands say: a flag, a help text or a command changed without
// regenerating them.
func TestReferenceIsCurrent(t *testing.T) {
	stale, err := Stale(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range stale {
		t.Error(msg)
	}
}

// TestGenerationIsDeterministic generates twice, with SOURCE_DATE_EPOCH
// set (which cobra would otherwise use for the man pages' date), and gets
// the same files; no page carries cobra's "Auto generated" line.
func TestGenerationIsDeterministic(t *testing.T) {
	first, err := Pages()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "0")
	second, err := Pages()
	if err != nil {
		t.Fatal(err)
	}
	for kind := range first {
		if diff := Diff(first[kind], second[kind]); len(diff) > 0 {
			t.Errorf("%s pages differ between two runs: %v", kind, diff)
		}
		for name, data := range first[kind] {
			if bytes.Contains(data, []byte("Auto generated")) {
				t.Errorf("%s carries cobra's auto-generated tag", name)
			}
		}
	}
	if got := string(first["man"]["leasectl-probe.1"]); !strings.Contains(got, `.TH "LEASECTL-PROBE" "1" "Jun 2025" "leasectl" "leasectl manual"`) {
		t.Errorf("leasectl-probe.1's header is not the fixed one:\n%.300s", got)
	}
}

// TestEveryCommandHasPages: each command a user can run (every available
// command, recursively) has a markdown page and a man page, and the pages
// link to each other by relative file names.
func TestEveryCommandHasPages(t *testing.T) {
	pages, err := Pages()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() {
			return
		}
		paths = append(paths, c.CommandPath())
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(Root())
	for _, p := range paths {
		md := strings.ReplaceAll(p, " ", "_") + ".md"
		man := strings.ReplaceAll(p, " ", "-") + ".1"
		if _, ok := pages["markdown"][md]; !ok {
			t.Errorf("no markdown page %s for %q", md, p)
		}
		if _, ok := pages["man"][man]; !ok {
			t.Errorf("no man page %s for %q", man, p)
		}
	}
	if len(paths) != len(pages["markdown"]) || len(paths) != len(pages["man"]) {
		t.Errorf("%d commands, %d markdown pages, %d man pages", len(paths), len(pages["markdown"]), len(pages["man"]))
	}
	for _, want := range []string{"probe", "who", "keys lint", "keys diff", "failover", "verify", "run", "lab up", "version", "completion bash"} {
		if !slices.Contains(paths, "leasectl "+want) {
			t.Errorf("no page for leasectl %s among %v", want, paths)
		}
	}
	if !bytes.Contains(pages["markdown"]["leasectl.md"], []byte("(leasectl_probe.md)")) {
		t.Error("leasectl.md does not link to leasectl_probe.md by its relative name")
	}
	if _, ok := pages["markdown"]["leasectl_help.md"]; ok {
		t.Error("cobra's help command got a page")
	}
}

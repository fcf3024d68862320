// Package refdocs generates leasectl's command reference from the cobra
// command tree with cobra's doc package: a markdown page per command and
// subcommand (docs/reference/) and a man page per command, section 1
// (docs/man/). tools/gendocs writes them (`go generate ./cmd`, or
// `make docs`); this package's test fails when the committed pages differ
// from what the commands say.
//
// The output is deterministic: no "auto generated on DATE" line, and a fixed
// date and source in the man pages' header, so the same commands always
// give the same files.
package refdocs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasectl/leasectl/cmd"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// The man pages' header: `.TH "LEASECTL-PROBE" "1" "Jun 2025" "leasectl"
// "leasectl manual"`. The date is a constant, not the time of generation,
// so that regenerating unchanged commands changes nothing; cobra prints only
// its month and year.
var (
	ManDate = time.Date(2025, time.June, 1, 0, 0, 0, 0, time.UTC)
)

const (
	ManSource  = "leasectl"
	ManManual  = "leasectl manual"
	ManSection = "1"
)

// Regenerate is the command that brings the committed pages up to date
// (`make docs` runs it too).
const Regenerate = "go generate ./cmd"

// Dirs are the directories, relative to the repository's root, that hold
// the committed pages of each kind.
var Dirs = map[string]string{
	"markdown": "docs/reference",
	"man":      "docs/man",
}

// header starts every markdown page.
const header = "<!-- Generated from leasectl's commands by tools/gendocs: do not edit; run `go generate ./cmd`. -->\n\n"

// Root returns leasectl's command tree as documentation sees it: an empty
// environment (no flag default depends on it) and no auto-generated
// date tag on any command.
func Root() *cobra.Command {
	app := &cmd.App{
		IO:     &cmd.IOStreams{In: &bytes.Buffer{}, Out: io.Discard, ErrOut: io.Discard},
		Getenv: func(string) string { return "" },
	}
	root := cmd.NewRootCmd(app)
	var disable func(*cobra.Command)
	disable = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			disable(sub)
		}
	}
	disable(root)
	return root
}

// Markdown writes one page per command into dir, which must exist. Pages
// link to each other by their file names (relative to dir).
func Markdown(root *cobra.Command, dir string) error {
	prepend := func(string) string { return header }
	link := func(name string) string { return name }
	return doc.GenMarkdownTreeCustom(root, dir, prepend, link)
}

// Man writes one man page per command (leasectl.1, leasectl-probe.1,
// leasectl-keys-lint.1, ...) into dir, which must exist.
func Man(root *cobra.Command, dir string) error {
	// cobra's man pages write a flag whose value is optional as
	// --flag[=DEFAULT], the value when the flag is absent (who --watch:
	// [=0s]); what a reader needs there is the value of the bare flag.
	var fix func(c *cobra.Command)
	fix = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.NoOptDefVal != "" && f.Value.Type() != "bool" {
				f.DefValue = f.NoOptDefVal
			}
		})
		for _, sub := range c.Commands() {
			fix(sub)
		}
	}
	fix(root)
	date := ManDate
	return doc.GenManTree(root, &doc.GenManHeader{
		Section: ManSection,
		Date:    &date,
		Source:  ManSource,
		Manual:  ManManual,
	}, dir)
}

// Generated reports whether name is a file this package writes into the
// directory of its kind (so that a page of a command that no longer exists
// is removed, and nothing else is).
func Generated(name, kind string) bool {
	switch kind {
	case "markdown":
		return strings.HasPrefix(name, "leasectl") && strings.HasSuffix(name, ".md")
	case "man":
		return strings.HasPrefix(name, "leasectl") && strings.HasSuffix(name, "."+ManSection)
	}
	return false
}

// Pages generates both kinds into memory: file name to content, per kind
// ("markdown", "man").
func Pages() (map[string]map[string][]byte, error) {
	tmp, err := os.MkdirTemp("", "leasectl-refdocs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := map[string]map[string][]byte{}
	for kind, gen := range map[string]func(*cobra.Command, string) error{"markdown": Markdown, "man": Man} {
		dir := filepath.Join(tmp, kind)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		if err := gen(Root(), dir); err != nil {
			return nil, fmt.Errorf("%s pages: %w", kind, err)
		}
		files, err := ReadDir(dir, kind)
		if err != nil {
			return nil, err
		}
		out[kind] = files
	}
	return out, nil
}

// ReadDir reads the generated files of kind in dir (a missing dir is
// empty).
func ReadDir(dir, kind string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || !Generated(e.Name(), kind) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = data
	}
	return files, nil
}

// Diff lists how the files in have differ from want: missing, stale and
// extra files, sorted; empty when they are the same.
func Diff(want, have map[string][]byte) []string {
	var out []string
	for name, data := range want {
		old, ok := have[name]
		switch {
		case !ok:
			out = append(out, name+" is missing")
		case !bytes.Equal(old, data):
			out = append(out, name+" is stale")
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			out = append(out, name+" documents no command (any more)")
		}
	}
	slices.Sort(out)
	return out
}

// Write brings dir up to date with files: writes what differs and removes
// generated files of kind that are no longer wanted. It leaves every other
// file alone.
func Write(dir, kind string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	have, err := ReadDir(dir, kind)
	if err != nil {
		return err
	}
	for name := range have {
		if _, ok := files[name]; !ok {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	for name, data := range files {
		if bytes.Equal(have[name], data) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Stale compares the pages committed under the repository root with what
// the commands say now, and returns one message per directory that
// differs, each naming the files and the command that regenerates them.
func Stale(root string) ([]string, error) {
	pages, err := Pages()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kind := range []string{"markdown", "man"} {
		if len(pages[kind]) == 0 {
			return nil, fmt.Errorf("no %s pages generated", kind)
		}
		have, err := ReadDir(filepath.Join(root, filepath.FromSlash(Dirs[kind])), kind)
		if err != nil {
			return nil, err
		}
		if diff := Diff(pages[kind], have); len(diff) > 0 {
			out = append(out, fmt.Sprintf("%s is stale: run `%s` (or make docs) and commit the result:\n  %s",
				Dirs[kind], Regenerate, strings.Join(diff, "\n  ")))
		}
	}
	return out, nil
}

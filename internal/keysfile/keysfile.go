// Package keysfile is the one parser of keys.yaml: its decoding, the rules
// of `leasectl keys lint`, and the types they work on. Package keys wraps it
// for Go services with every rule applied; internal/keyslint uses it
// directly, since `keys diff` applies only some of the rules (a base is
// history, so only its form must be valid, and a key shared in the new file
// is a finding, not a refusal).
package keysfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
)

// MaxFileSize bounds how much of a keys file is read: a larger one is
// refused (rule FILE). A deployment's role map is a few hundred bytes
// (256 KiB holds thousands of roles), so anything larger is a mistake or an
// attack; the bound also caps the memory the YAML parser may use, which is
// about a hundred times the input size.
const MaxFileSize = 256 << 10

// maxProblems bounds how many problems one file reports: a hostile file can
// hold tens of thousands of them, and nobody reads past the first screen.
const maxProblems = 100

// Entry is one role and its key, with the line it was declared on.
type Entry struct {
	Name string
	Key  int64
	Line int
}

// File is a parsed keys.yaml.
type File struct {
	// Path is the name the file was loaded from, for messages.
	Path string
	// Roles are the active roles in file order.
	Roles []Entry
	// Retired are keys of removed roles that must never be reused.
	Retired []Entry
	// RolesLine is the line of the "roles:" field, where a finding about a
	// role missing from it is reported.
	RolesLine int
}

// Problem is one thing wrong with a keys file, at a line (0 when the problem
// concerns the file as a whole).
type Problem struct {
	// Rule is the name of the rule that found the problem, one of [Rules].
	Rule string
	Line int
	// Role is the role the problem is about, when there is one.
	Role    string
	Message string
}

// Location renders where the problem is, as path:line (or path alone when
// the problem concerns the whole file), the form editors and CI logs link.
func (p Problem) Location(path string) string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d", path, p.Line)
	}
	return path
}

// InvalidError reports a keys file that cannot be used. It lists every
// problem found (up to a bound), not just the first.
type InvalidError struct {
	Path     string
	Problems []Problem
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a valid keys file", e.Path)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Location(e.Path))
		b.WriteString(": ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// NotFoundError reports a keys file that does not exist.
type NotFoundError struct {
	Path string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("keys file %s not found", e.Path)
}

// Role returns the active role called name.
func (f *File) Role(name string) (Entry, bool) {
	return find(f.Roles, name)
}

// RetiredRole returns the retired entry called name.
func (f *File) RetiredRole(name string) (Entry, bool) {
	return find(f.Retired, name)
}

func find(entries []Entry, name string) (Entry, bool) {
	for _, e := range entries {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// Options choose which of the rules about how roles relate (Lint's) Parse
// applies; the rules about the file's form always apply. The zero Options
// applies every rule.
type Options struct {
	// FormOnly skips every rule about how roles relate.
	FormOnly bool
	// Skip names rules about how roles relate not to apply.
	Skip []string
}

// Load reads the keys file at path and parses it with opts: it returns the
// file, or an [*InvalidError] listing every problem (a [*NotFoundError]
// when there is no file at path).
func Load(path string, opts Options) (*File, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, opts)
}

// readFile reads at most [MaxFileSize]+1 bytes of the keys file at path (one
// more than allowed, so that Parse can tell the file is too large). A file
// that does not exist is a [*NotFoundError]; one that cannot be read (a
// directory, no permission) is an [*InvalidError].
func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Path: path}
	}
	if err != nil {
		return nil, unreadable(path, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, unreadable(path, err)
	}
	return data, nil
}

func unreadable(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &InvalidError{Path: path, Problems: []Problem{{Rule: RuleFile, Message: fmt.Sprintf("cannot read the file: %v (pass the path of a readable keys.yaml)", err)}}}
}

// Parse parses data, the content of a keys file, and checks its form and
// the rules of [Lint] that opts apply; path names the file in messages
// only. It returns the file, or an [*InvalidError] listing every problem.
func Parse(path string, data []byte, opts Options) (*File, error) {
	f, problems := decode(path, data)
	if f != nil && !opts.FormOnly {
		for _, p := range Lint(f) {
			if !slices.Contains(opts.Skip, p.Rule) {
				problems = append(problems, p)
			}
		}
	}
	if len(problems) > 0 {
		return nil, invalid(path, problems)
	}
	return f, nil
}

// invalid builds the error for problems, in line order and capped at
// maxProblems.
func invalid(path string, problems []Problem) *InvalidError {
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
	if len(problems) > maxProblems {
		more := len(problems) - maxProblems
		problems = append(problems[:maxProblems:maxProblems], Problem{Rule: RuleFile, Message: fmt.Sprintf("… and %d more problems", more)})
	}
	return &InvalidError{Path: path, Problems: problems}
}

package keys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/leasectl/leasectl/internal/keysinternal"
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
	// Rule is the name of the rule that found the problem, one of those
	// `leasectl keys lint --help` lists (FILE, YAML_SYNTAX, DUPLICATE_KEY,
	// …). Rule names never change.
	Rule string
	Line int
	// Role is the role the problem is about, when there is one.
	Role    string
	Message string
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

// Location renders where the problem is, as path:line (or path alone when
// the problem concerns the whole file), the form editors and CI logs link.
func (p Problem) Location(path string) string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d", path, p.Line)
	}
	return path
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
	return find(f.Roles, func(e Entry) bool { return e.Name == name })
}

// retiredRole returns the retired entry called name.
func (f *File) retiredRole(name string) (Entry, bool) {
	return find(f.Retired, func(e Entry) bool { return e.Name == name })
}

func find(entries []Entry, match func(Entry) bool) (Entry, bool) {
	for _, e := range entries {
		if match(e) {
			return e, true
		}
	}
	return Entry{}, false
}

// NamesByKey maps the key of each active role to its name; a nil File has
// none.
func (f *File) NamesByKey() map[int64]string {
	if f == nil {
		return nil
	}
	m := make(map[int64]string, len(f.Roles))
	for _, e := range f.Roles {
		m[e.Key] = e.Name
	}
	return m
}

func init() {
	keysinternal.ReadFile = readFile
	keysinternal.Parse = parse
	keysinternal.Lint = (*File).lint
}

// Load reads the keys file at path and checks it with every rule of
// `leasectl keys lint`: it returns the file, or an [*InvalidError] listing
// every problem (a [*NotFoundError] when there is no file at path).
func Load(path string) (*File, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readFile reads at most [MaxFileSize]+1 bytes of the keys file at path (one
// more than allowed, so that parse can tell the file is too large). A file
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
	return &InvalidError{Path: path, Problems: []Problem{{Rule: keysinternal.RuleFile, Message: fmt.Sprintf("cannot read the file: %v (pass the path of a readable keys.yaml)", err)}}}
}

// Parse parses data, the content of a keys file, and checks it like [Load];
// path names the file in messages only.
func Parse(path string, data []byte) (*File, error) {
	return parse(path, data, func(string) bool { return true })
}

// parse checks the form of data and, of the rules about how its roles
// relate (lint), those for which relations returns true.
func parse(path string, data []byte, relations func(rule string) bool) (*File, error) {
	f, problems := decode(path, data)
	if f != nil && relations != nil {
		for _, p := range f.lint() {
			if relations(p.Rule) {
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
		problems = append(problems[:maxProblems:maxProblems], Problem{Rule: keysinternal.RuleFile, Message: fmt.Sprintf("… and %d more problems", more)})
	}
	return &InvalidError{Path: path, Problems: problems}
}

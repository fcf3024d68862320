package keys

import (
	"github.com/leasectl/leasectl/internal/keysfile"
)

// MaxFileSize bounds how much of a keys file is read: a larger one is
// refused (rule FILE). A deployment's role map is a few hundred bytes
// (256 KiB holds thousands of roles), so anything larger is a mistake or an
// attack; the bound also caps the memory the YAML parser may use, which is
// about a hundred times the input size.
const MaxFileSize = keysfile.MaxFileSize

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
	inner := &keysfile.InvalidError{Path: e.Path, Problems: make([]keysfile.Problem, len(e.Problems))}
	for i, p := range e.Problems {
		inner.Problems[i] = keysfile.Problem(p)
	}
	return inner.Error()
}

// Location renders where the problem is, as path:line (or path alone when
// the problem concerns the whole file), the form editors and CI logs link.
func (p Problem) Location(path string) string {
	return keysfile.Problem(p).Location(path)
}

// NotFoundError reports a keys file that does not exist.
type NotFoundError struct {
	Path string
}

func (e *NotFoundError) Error() string {
	return (&keysfile.NotFoundError{Path: e.Path}).Error()
}

// Role returns the active role called name.
func (f *File) Role(name string) (Entry, bool) {
	for _, e := range f.Roles {
		if e.Name == name {
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

// Load reads the keys file at path and checks it with every rule of
// `leasectl keys lint`: it returns the file, or an [*InvalidError] listing
// every problem (a [*NotFoundError] when there is no file at path).
func Load(path string) (*File, error) {
	return public(keysfile.Load(path, keysfile.Options{}))
}

// Parse parses data, the content of a keys file, and checks it like [Load];
// path names the file in messages only.
func Parse(path string, data []byte) (*File, error) {
	return public(keysfile.Parse(path, data, keysfile.Options{}))
}

// public turns what package keysfile returns into this package's types.
func public(f *keysfile.File, err error) (*File, error) {
	switch e := err.(type) {
	case nil:
	case *keysfile.InvalidError:
		out := &InvalidError{Path: e.Path, Problems: make([]Problem, len(e.Problems))}
		for i, p := range e.Problems {
			out.Problems[i] = Problem(p)
		}
		return nil, out
	case *keysfile.NotFoundError:
		return nil, &NotFoundError{Path: e.Path}
	default:
		return nil, err
	}
	return &File{Path: f.Path, Roles: entries(f.Roles), Retired: entries(f.Retired), RolesLine: f.RolesLine}, nil
}

func entries(in []keysfile.Entry) []Entry {
	if in == nil {
		return nil
	}
	out := make([]Entry, len(in))
	for i, e := range in {
		out[i] = Entry(e)
	}
	return out
}

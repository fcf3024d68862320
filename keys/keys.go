package keys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds how much of a keys file is read; a deployment's role map
// is a few hundred bytes, so anything larger is a mistake or an attack.
const MaxFileSize = 1 << 20

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
}

// Problem is one thing wrong with a keys file, at a line (0 when the problem
// concerns the file as a whole).
type Problem struct {
	Line    int
	Message string
}

// InvalidError reports a keys file that cannot be used. It lists every
// problem found, not just the first.
type InvalidError struct {
	Path     string
	Problems []Problem
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a valid keys file", e.Path)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		if p.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: ", e.Path, p.Line)
		} else {
			fmt.Fprintf(&b, "%s: ", e.Path)
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// NotFoundError reports a keys file that does not exist.
type NotFoundError struct {
	Path string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("keys file %s not found (pass --keys FILE or set LEASECTL_KEYS)", e.Path)
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

// ByKey returns the active role that uses key.
func (f *File) ByKey(key int64) (Entry, bool) {
	for _, e := range f.Roles {
		if e.Key == key {
			return e, true
		}
	}
	return Entry{}, false
}

// Names returns the active role names in file order.
func (f *File) Names() []string {
	names := make([]string, len(f.Roles))
	for i, e := range f.Roles {
		names[i] = e.Name
	}
	return names
}

// Load reads and parses the keys file at path.
func Load(path string) (*File, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Path: path}
	}
	if err != nil {
		return nil, fmt.Errorf("read keys file: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read keys file %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses the content of a keys file; path is used in messages only.
func Parse(path string, data []byte) (*File, error) {
	f := &File{Path: path}
	var problems []Problem
	if len(data) > MaxFileSize {
		return nil, &InvalidError{Path: path, Problems: []Problem{{Message: fmt.Sprintf("file is larger than %d bytes; a role map is a few lines", MaxFileSize)}}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &InvalidError{Path: path, Problems: []Problem{yamlProblem(err)}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &InvalidError{Path: path, Problems: []Problem{{Message: "file is empty; expected a top-level 'roles:' mapping"}}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &InvalidError{Path: path, Problems: []Problem{{Line: root.Line, Message: "expected a mapping with 'roles:' at the top level"}}}
	}
	seenTop := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if prev, dup := seenTop[k.Value]; dup {
			problems = append(problems, Problem{Line: k.Line, Message: fmt.Sprintf("duplicate top-level field %q (first at line %d)", k.Value, prev)})
			continue
		}
		seenTop[k.Value] = k.Line
		switch k.Value {
		case "roles":
			f.Roles, problems = parseEntries(v, "roles", problems)
		case "retired":
			f.Retired, problems = parseEntries(v, "retired", problems)
		default:
			problems = append(problems, Problem{Line: k.Line, Message: fmt.Sprintf("unknown top-level field %q (allowed: roles, retired)", k.Value)})
		}
	}
	if _, ok := seenTop["roles"]; !ok {
		problems = append(problems, Problem{Line: root.Line, Message: "missing 'roles:' mapping"})
	}
	if len(problems) > 0 {
		return nil, &InvalidError{Path: path, Problems: problems}
	}
	return f, nil
}

func parseEntries(n *yaml.Node, section string, problems []Problem) ([]Entry, []Problem) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, problems
	}
	if n.Kind != yaml.MappingNode {
		return nil, append(problems, Problem{Line: n.Line, Message: fmt.Sprintf("'%s:' must be a mapping of role name to key", section)})
	}
	var out []Entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if prev, dup := seen[k.Value]; dup {
			problems = append(problems, Problem{Line: k.Line, Message: fmt.Sprintf("role %q is listed twice under %s: (first at line %d); YAML would silently keep the last one", k.Value, section, prev)})
			continue
		}
		seen[k.Value] = k.Line
		key, err := parseKey(v)
		if err != nil {
			problems = append(problems, Problem{Line: v.Line, Message: fmt.Sprintf("%s.%s: %v", section, k.Value, err)})
			continue
		}
		out = append(out, Entry{Name: k.Value, Key: key, Line: k.Line})
	}
	return out, problems
}

func parseKey(v *yaml.Node) (int64, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, errors.New("the key must be an integer")
	}
	if v.Tag != "!!int" {
		return 0, fmt.Errorf("the key must be an integer, got %q", v.Value)
	}
	s := strings.ReplaceAll(v.Value, "_", "")
	key, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("the key %s is outside the int64 range of an advisory lock key", v.Value)
	}
	return key, nil
}

func yamlProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if strings.HasPrefix(msg, "line ") {
		rest := msg[len("line "):]
		if i := strings.Index(rest, ":"); i > 0 {
			if n, convErr := strconv.Atoi(rest[:i]); convErr == nil {
				line = n
				msg = strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return Problem{Line: line, Message: "YAML syntax: " + msg}
}

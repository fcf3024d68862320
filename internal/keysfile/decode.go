package keysfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leasectl/leasectl/locks"
	"go.yaml.in/yaml/v3"
)

// The forms below are checked by hand rather than with regular
// expressions: compiling those was most of this package's init, which every
// leasectl command (`leasectl --version` too) paid at start-up.

// isRoleName reports whether s is what a role name looks like,
// [a-z][a-z0-9_-]*: it ends up in flags, log lines, metric labels and
// environment variables, so it stays plain.
func isRoleName(s string) bool {
	if s == "" || !isLower(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// isDecimal ([-+]?(0|[1-9][0-9]*)) and isHex (0x[0-9a-fA-F]+) are the two
// spellings of a key that every YAML reader (1.1 and 1.2, any language)
// reads as the same integer.
func isDecimal(s string) bool {
	s = trimSign(s)
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	return all(s, isDigit)
}

func isHex(s string) bool {
	rest, ok := strings.CutPrefix(s, "0x")
	return ok && rest != "" && all(rest, isHexDigit)
}

// isAmbiguousInt reports integer spellings that YAML readers disagree on
// ([-+]?([0-9][0-9_]*|0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+)): 017
// is 15 to a YAML 1.1 reader and 17 to a YAML 1.2 one, 1_000 is a number
// to some and a string to others, 0o17 and 0b11 exist in one version only.
func isAmbiguousInt(s string) bool {
	s = trimSign(s)
	if len(s) > 2 && s[0] == '0' {
		var digit func(byte) bool
		switch s[1] {
		case 'x', 'X':
			digit = isHexDigit
		case 'o', 'O':
			digit = func(c byte) bool { return '0' <= c && c <= '7' }
		case 'b', 'B':
			digit = func(c byte) bool { return c == '0' || c == '1' }
		}
		if digit != nil {
			return all(s[2:], func(c byte) bool { return digit(c) || c == '_' })
		}
	}
	return s != "" && isDigit(s[0]) && all(s[1:], func(c byte) bool { return isDigit(c) || c == '_' })
}

func trimSign(s string) string {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		return s[1:]
	}
	return s
}

func all(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isLower(c byte) bool    { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isHexDigit(c byte) bool { return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F') }

// isYAML11Boolean reports the plain names that YAML 1.1 readers (PyYAML,
// Ruby's Psych, many others) read as booleans although they are role names
// (isRoleName): a worker in such a language would not find its role.
func isYAML11Boolean(s string) bool {
	switch s {
	case "y", "n", "yes", "no", "on", "off":
		return true
	}
	return false
}

// decoder collects the problems of one file.
type decoder struct {
	problems []Problem
}

func (d *decoder) add(rule string, line int, role, format string, args ...any) {
	d.problems = append(d.problems, Problem{Rule: rule, Line: line, Role: role, Message: fmt.Sprintf(format, args...)})
}

// decode parses data and checks its form. It returns the file (nil when the
// YAML itself cannot be read) and every problem found.
func decode(path string, data []byte) (*File, []Problem) {
	d := &decoder{}
	if len(data) > MaxFileSize {
		d.add(RuleFile, 0, "", "the file is larger than %d bytes; a role map is a few lines", MaxFileSize)
		return nil, d.problems
	}
	root, ok := d.parseYAML(data)
	if !ok {
		return nil, d.problems
	}
	f := &File{Path: path}
	if !d.plain(root) {
		return nil, d.problems
	}
	if root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			d.add(RuleStructure, root.Line, "", "the file holds no 'roles:' mapping; start with a line 'roles:'")
		} else {
			d.add(RuleStructure, root.Line, "", "expected a mapping with 'roles:' at the top level, got %s", kindName(root))
		}
		return nil, d.problems
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !d.plain(k) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.add(RuleUnknownField, k.Line, "", "a top-level field must be a name (roles or retired), got %s", kindName(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(RuleDuplicateField, k.Line, "", "field %q appears twice (first at line %d); YAML readers silently keep the last one, so merge the two", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		switch k.Value {
		case "roles":
			f.RolesLine = k.Line
			f.Roles = d.section(v, "roles")
		case "retired":
			f.Retired = d.section(v, "retired")
		default:
			d.add(RuleUnknownField, k.Line, "", "unknown top-level field %q (allowed: roles, retired)", k.Value)
			d.plain(v)
		}
	}
	if f.RolesLine == 0 {
		d.add(RuleStructure, root.Line, "", "missing 'roles:' mapping of role name to key")
	}
	return f, d.problems
}

// parseYAML reads the one YAML document of data. The parser keeps aliases
// as references instead of expanding them and stops at a nesting depth of
// 10000, so neither an alias bomb nor deep nesting costs more than a bounded
// multiple of the (already bounded) input size.
func (d *decoder) parseYAML(data []byte) (root *yaml.Node, ok bool) {
	defer func() {
		// The parser is third-party code fed hostile input: a panic in it
		// must be an invalid file, not a crash of the command.
		if r := recover(); r != nil {
			d.add(RuleSyntax, 0, "", "the YAML parser failed on this file (%v); simplify it to plain 'name: key' lines", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(RuleSyntax, 0, "", "the file is empty; expected a top-level 'roles:' mapping")
		} else {
			d.yamlError(err)
		}
		return nil, false
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		d.add(RuleSyntax, next.Line, "", "a second YAML document starts here; a keys file holds one document (remove the '---' line)")
		return nil, false
	case !errors.Is(err, io.EOF):
		d.yamlError(err)
		return nil, false
	}
	if len(doc.Content) == 0 {
		d.add(RuleSyntax, 0, "", "the file is empty; expected a top-level 'roles:' mapping")
		return nil, false
	}
	return doc.Content[0], true
}

// yamlError turns a parser error ("yaml: line 3: mapping values are not
// allowed in this context") into a problem at that line.
func (d *decoder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ":"); ok {
			if n, convErr := strconv.Atoi(num); convErr == nil {
				line = n
				msg = strings.TrimSpace(after)
			}
		}
	}
	d.add(RuleSyntax, line, "", "%s", msg)
}

// plain reports whether n is free of anchors, aliases and merge keys, and
// records a problem when it is not. They are refused outright rather than
// resolved: a key map gains nothing from them, and refusing them means an
// alias bomb ("billion laughs") is never expanded.
func (d *decoder) plain(n *yaml.Node) bool {
	const why = "anchors and aliases are not allowed in a keys file; write each role and key out in full"
	switch {
	case n.Kind == yaml.AliasNode:
		d.add(RuleAlias, n.Line, "", "alias *%s: %s", n.Value, why)
	case n.Anchor != "":
		d.add(RuleAlias, n.Line, "", "anchor &%s: %s", n.Anchor, why)
	case n.Tag == "!!merge":
		d.add(RuleAlias, n.Line, "", "merge key '<<': %s", why)
	default:
		return true
	}
	return false
}

// section reads the roles: or retired: mapping.
func (d *decoder) section(n *yaml.Node, name string) []Entry {
	if !d.plain(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "roles:" with nothing under it: no roles yet
	}
	if n.Kind != yaml.MappingNode {
		d.add(RuleStructure, n.Line, "", "'%s:' must be a mapping of role name to key, like '%s: {poller: 1840000001}', got %s", name, name, kindName(n))
		return nil
	}
	var out []Entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.plain(k) || !d.plain(v) {
			continue
		}
		roleName, nameOK := d.roleName(k, name)
		if !nameOK {
			continue
		}
		if first, dup := seen[roleName]; dup {
			d.add(RuleDuplicateField, k.Line, roleName, "role %q is listed twice under %s: (first at line %d); YAML readers silently keep the last one, so delete one", roleName, name, first)
			continue
		}
		seen[roleName] = k.Line
		key, err := parseKey(v)
		if err != nil {
			d.add(RuleInvalidKey, v.Line, roleName, "%s.%s: %v", name, roleName, err)
			continue
		}
		out = append(out, Entry{Name: roleName, Key: key, Line: k.Line})
	}
	return out
}

// roleName checks the name of a role. A name with the wrong form still
// counts as read (true) so that its key is checked too; only a name that is
// not a string at all is skipped.
func (d *decoder) roleName(k *yaml.Node, section string) (string, bool) {
	const form = "a role name matches [a-z][a-z0-9_-]*: lower-case letters, digits, '-' and '_', starting with a letter"
	switch {
	case k.Kind != yaml.ScalarNode:
		d.add(RuleInvalidName, k.Line, "", "a role name under %s: must be a plain name, got %s; %s", section, kindName(k), form)
		return "", false
	case k.Tag != "!!str":
		d.add(RuleInvalidName, k.Line, k.Value, "role name %s under %s: is read as %s by YAML, not as a name; %s", k.Value, section, kindName(k), form)
	case !isRoleName(k.Value):
		d.add(RuleInvalidName, k.Line, k.Value, "role name %q under %s: has the wrong form; %s", k.Value, section, form)
	case k.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 && isYAML11Boolean(k.Value):
		d.add(RuleInvalidName, k.Line, k.Value, "role name %s under %s: is a boolean to YAML 1.1 readers (PyYAML, Ruby), so a worker in such a language would not find it; rename the role or quote it as \"%s\"", k.Value, section, k.Value)
	}
	return k.Value, true
}

// parseKey reads an advisory-lock key: an int64 in plain decimal or in 0x
// hex, the spellings every YAML reader agrees on.
func parseKey(v *yaml.Node) (int64, error) {
	const rangeHint = "a key is a bigint advisory-lock key, from -9223372036854775808 to 9223372036854775807"
	if v.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("the key must be an integer, got %s", kindName(v))
	}
	explicitInt := v.Style&yaml.TaggedStyle != 0 && v.Tag == "!!int"
	switch {
	case v.Tag == "!!null":
		return 0, errors.New("the key is missing; write an integer, e.g. poller: 1840000001")
	case v.Style&yaml.TaggedStyle != 0 && !explicitInt:
		return 0, fmt.Errorf("the key has the tag %s; write a plain integer without a tag", v.Tag)
	case v.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 && !explicitInt:
		return 0, fmt.Errorf("the key is the quoted string %q; write the integer without quotes so that every reader sees a number", v.Value)
	case isDecimal(v.Value):
		key, err := locks.ParseBigint(v.Value)
		if err != nil {
			return 0, fmt.Errorf("%s is outside the int64 range; %s", v.Value, rangeHint)
		}
		return key, nil
	case isHex(v.Value):
		key, err := locks.ParseBigint(v.Value)
		if err != nil {
			// 0x8000000000000000 and above wrap to a negative key in some
			// readers and fail in others: write negative keys in decimal.
			return 0, fmt.Errorf("%s is outside the int64 range (at most 0x7fffffffffffffff; write negative keys in decimal); %s", v.Value, rangeHint)
		}
		return key, nil
	case isAmbiguousInt(v.Value):
		return 0, fmt.Errorf("%s is read as different numbers (or as a string) by different YAML readers: leading zeros, 0o, 0b, 0X and '_' are not portable; write it in plain decimal, or as 0x hex", v.Value)
	case v.Tag == "!!bool":
		return 0, fmt.Errorf("%s is a boolean; a key is an integer", v.Value)
	case v.Tag == "!!float":
		return 0, fmt.Errorf("%s is a floating-point number; a key is an integer", v.Value)
	default:
		return 0, fmt.Errorf("%q is not an integer; a key is a 64-bit integer like 1840000001", v.Value)
	}
}

// kindName says what a node is, in a user's words.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "null"
	case "!!bool":
		return "a boolean"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!str":
		return "a string"
	}
	return "a value tagged " + n.Tag
}

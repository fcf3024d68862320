// Package procfile reads the Procfile that `leasectl run --procfile FILE`
// runs: one line per role, in the format of foreman, honcho and overmind,
//
//	# comments and blank lines are ignored
//	poller:    ./poller --batch 100
//	scheduler: ./scheduler --config 'conf/my schedule.yaml'
//
// A line is a role name (letters, digits, '-' and '_', as foreman accepts),
// a colon and the command. Those tools hand the command to sh; leasectl runs
// it directly, without a shell, so Parse splits it into words the way a
// POSIX shell does for simple commands and refuses what only a shell could
// run:
//
//   - Spaces and tabs separate words.
//   - Single quotes keep everything up to the next single quote as it is.
//   - In double quotes, \" \\ \$ and \` stand for the character after the
//     backslash; any other backslash is kept, as in a shell.
//   - Outside quotes, a backslash keeps the next character as it is.
//   - A word that starts with an unquoted '#' begins a comment that runs to
//     the end of the line, as in a shell: "a #b" is the word a, but "a#b"
//     and "a '#b'" keep their '#'.
//   - Glob characters (* ? [) are passed on as they are, as a shell does
//     when nothing matches: nothing is expanded.
//   - It is an error to use, unquoted, the shell's operators (| || & && ;
//     < > ( )), command substitution ($(...) and backquotes, also in double
//     quotes), parameter expansion ($VAR, ${VAR}, $1, $?, also in double
//     quotes), a leading ~, or a leading VAR=value assignment: the error
//     says to write `sh -c '...'` (or `env VAR=value ...`) explicitly.
//
// Lines may end in \r\n, and a UTF-8 byte order mark at the start of the
// file is ignored. Every error is an *Error that names the file and line.
package procfile

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// MaxSize is the largest Procfile Parse reads, in bytes (1 MiB).
const MaxSize = 1 << 20

// Form is the form of a Procfile line, as errors show it.
const Form = "ROLE: COMMAND ARGS..."

// Entry is one line of a Procfile: the command to run for a role.
type Entry struct {
	Role string
	// Command is the program and its arguments, split into words; the
	// first is the program, looked up in PATH when it has no slash.
	Command []string
	// Line is the entry's line in the file, from 1.
	Line int
}

// File is a parsed Procfile.
type File struct {
	// Path names the file in errors, as it was given to Parse or Load.
	Path string
	// Entries are the roles in file order; at least one, and no role twice.
	Entries []Entry
}

// Roles returns the role names in file order.
func (f *File) Roles() []string {
	roles := make([]string, len(f.Entries))
	for i, e := range f.Entries {
		roles[i] = e.Role
	}
	return roles
}

// Lookup returns the entry of role.
func (f *File) Lookup(role string) (Entry, bool) {
	for _, e := range f.Entries {
		if e.Role == role {
			return e, true
		}
	}
	return Entry{}, false
}

// Error is a problem with a Procfile, at a line of it (Line from 1) or with
// the file as a whole (Line 0).
type Error struct {
	Path string
	Line int
	Msg  string
}

// Error returns "PATH:LINE: MSG", or "PATH: MSG" when Line is 0.
func (e *Error) Error() string {
	switch {
	case e.Path == "" && e.Line == 0:
		return e.Msg
	case e.Path == "":
		return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
	case e.Line == 0:
		return e.Path + ": " + e.Msg
	default:
		return e.Path + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	}
}

// Load reads and parses the Procfile at path. Standard input ("-") is not
// supported: it belongs to the programs. Errors opening or reading the
// file are returned as the os package reports them (an *fs.PathError).
func Load(path string) (*File, error) {
	if path == "-" {
		return nil, &Error{Path: path, Msg: "a Procfile cannot be read from standard input, which the programs inherit; name the file (--procfile Procfile)"}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse parses a Procfile read from r; path names it in errors. It returns
// the first problem it finds, as an *Error (or r's read error).
func Parse(path string, r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("larger than %d bytes (1 MiB); a Procfile has a line %s per role: is this the right file?", MaxSize, Form)}
	}
	text := strings.TrimPrefix(string(data), "\ufeff")
	f := &File{Path: path}
	seen := map[string]int{} // role → line
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		e, ok, msg := parseLine(line)
		if msg != "" {
			return nil, &Error{Path: path, Line: n, Msg: msg}
		}
		if !ok {
			continue
		}
		if first, dup := seen[e.Role]; dup {
			return nil, &Error{Path: path, Line: n, Msg: fmt.Sprintf("role %q again, first on line %d; each role runs one command: remove or rename one of the two lines", e.Role, first)}
		}
		seen[e.Role] = n
		e.Line = n
		f.Entries = append(f.Entries, e)
	}
	if len(f.Entries) == 0 {
		return nil, &Error{Path: path, Msg: "no entries; a Procfile has a line " + Form + " for each role"}
	}
	return f, nil
}

const blanks = " \t"

// parseLine parses one line without its line ending: an entry (ok), or
// nothing (a blank or comment line), or a problem (msg).
func parseLine(line string) (e Entry, ok bool, msg string) {
	trimmed := strings.Trim(line, blanks)
	if trimmed == "" || trimmed[0] == '#' {
		return Entry{}, false, ""
	}
	if strings.IndexByte(line, 0) >= 0 {
		return Entry{}, false, "a NUL byte, which no command line can hold; is this a text file?"
	}
	colon := strings.IndexByte(trimmed, ':')
	if colon < 0 {
		return Entry{}, false, fmt.Sprintf("not a Procfile entry (no colon): want %s, got %s", Form, quote(trimmed))
	}
	role := strings.Trim(trimmed[:colon], blanks)
	command := strings.Trim(trimmed[colon+1:], blanks)
	switch {
	case role == "":
		return Entry{}, false, fmt.Sprintf("no role name before the colon: want %s, got %s", Form, quote(trimmed))
	case !validRole(role):
		return Entry{}, false, fmt.Sprintf("role name %s has the wrong form: use letters, digits, '-' and '_' (want %s)", quote(role), Form)
	case command == "":
		return Entry{}, false, fmt.Sprintf("role %q has no command: want %s", role, Form)
	}
	words, err := split(command)
	if err != nil {
		return Entry{}, false, err.message(role, command)
	}
	if len(words) == 0 { // only a comment after the colon
		return Entry{}, false, fmt.Sprintf("role %q has no command, only a comment: want %s", role, Form)
	}
	if startsWithAssignment(command) {
		return Entry{}, false, fmt.Sprintf("%s sets an environment variable, which needs a shell, but leasectl runs commands without one: write it as %s: env %s",
			quote(words[0]), role, shellQuoteAll(words))
	}
	return Entry{Role: role, Command: words}, true, ""
}

// startsWithAssignment says whether command starts with a shell variable
// assignment (NAME=), which a shell applies to the command's environment.
func startsWithAssignment(command string) bool {
	name, _, ok := strings.Cut(command, "=")
	if !ok || name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func validRole(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// splitError is a problem splitting a command into words.
type splitError struct {
	// shell names the shell syntax found ("a pipe (|)"), if that is the
	// problem.
	shell string
	msg   string // otherwise
}

func (e *splitError) message(role, command string) string {
	if e.shell == "" {
		return e.msg
	}
	hint := role + ": sh -c '...'"
	if !strings.ContainsRune(command, '\'') {
		hint = role + ": sh -c '" + command + "'"
	}
	return e.shell + " needs a shell, but leasectl runs commands without one: to run it in a shell, write it as " + hint + "; to pass it to the program as it is, put it in single quotes"
}

// split splits command into words (see the package documentation).
func split(s string) ([]string, *splitError) {
	var words []string
	var cur strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			end()
			i++
		case c == '#' && !inWord:
			end()
			return words, nil // a comment to the end of the line
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, &splitError{msg: "a single quote (') without its closing quote; a Procfile entry is one line: close the quote on it"}
			}
			cur.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 2
		case c == '"':
			inWord = true
			i++
			closed := false
			for !closed {
				if i >= len(s) {
					return nil, &splitError{msg: `a double quote (") without its closing quote; a Procfile entry is one line: close the quote on it`}
				}
				switch d := s[i]; d {
				case '"':
					closed = true
					i++
				case '\\':
					if i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
						cur.WriteByte(s[i+1])
						i += 2
					} else {
						cur.WriteByte('\\')
						i++
					}
				case '$':
					if what := expansion(s[i+1:], true); what != "" {
						return nil, &splitError{shell: what + ` (also in double quotes)`}
					}
					cur.WriteByte(d)
					i++
				case '`':
					return nil, &splitError{shell: "command substitution (`...`, also in double quotes)"}
				default:
					cur.WriteByte(d)
					i++
				}
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, &splitError{msg: `a backslash at the end of the line; a Procfile entry is one line and cannot be continued on the next: join the lines (or write \\ for a backslash)`}
			}
			cur.WriteByte(s[i+1])
			inWord = true
			i += 2
		case c == '$':
			if what := expansion(s[i+1:], false); what != "" {
				return nil, &splitError{shell: what}
			}
			cur.WriteByte(c)
			inWord = true
			i++
		case c == '`':
			return nil, &splitError{shell: "command substitution (`...`)"}
		case c == '~' && !inWord:
			return nil, &splitError{shell: "a leading ~ (the home directory)"}
		case strings.IndexByte("|&;<>()", c) >= 0:
			return nil, &splitError{shell: operator(s[i:])}
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	end()
	return words, nil
}

// expansion names the shell expansion that "$" followed by rest starts
// (in double quotes when quoted), or returns "" when a shell would keep the
// "$" as it is.
func expansion(rest string, quoted bool) string {
	if rest == "" {
		return ""
	}
	switch c := rest[0]; {
	case c == '(':
		return "command substitution ($(...))"
	case c == '{':
		return "parameter expansion (${...})"
	case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		n := 1
		for n < len(rest) && (rest[n] == '_' || 'a' <= rest[n] && rest[n] <= 'z' || 'A' <= rest[n] && rest[n] <= 'Z' || '0' <= rest[n] && rest[n] <= '9') {
			n++
		}
		return "variable expansion ($" + rest[:n] + ")"
	case '0' <= c && c <= '9' || strings.IndexByte("?$#@*!-", c) >= 0:
		return "parameter expansion ($" + rest[:1] + ")"
	case !quoted && (c == '\'' || c == '"'):
		return "bash's quoting $" + rest[:1] + "..." + rest[:1]
	}
	return ""
}

// operator names the shell operator at the start of s.
func operator(s string) string {
	two := s
	if len(two) > 2 {
		two = two[:2]
	}
	switch {
	case two == "||":
		return "the operator ||"
	case two == "&&":
		return "the operator &&"
	case two == ">>":
		return "a redirection (>>)"
	}
	switch s[0] {
	case '|':
		return "a pipe (|)"
	case '&':
		return "a background job (&)"
	case ';':
		return "a command list (;)"
	case '<', '>':
		return "a redirection (" + s[:1] + ")"
	default: // ( )
		return "a subshell (" + s[:1] + ")"
	}
}

// quote quotes a line for an error message, shortened when long.
func quote(s string) string {
	const limit = 60
	if len(s) > limit {
		cut := limit
		for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// shellQuoteAll writes words as a Procfile command that splits back into
// them.
func shellQuoteAll(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = shellQuote(w)
	}
	return strings.Join(out, " ")
}

func shellQuote(w string) string {
	if w != "" && strings.IndexFunc(w, func(r rune) bool {
		return !(r == '_' || r == '-' || r == '.' || r == '/' || r == '=' || r == ',' || r == ':' || r == '+' || r == '@' || r == '%' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) < 0 {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

package procfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Entry
	}{
		{"one", "web: ./web\n", []Entry{{"web", []string{"./web"}, 1}}},
		{"no final newline", "web: ./web", []Entry{{"web", []string{"./web"}, 1}}},
		{"args", "poller: ./poller --batch 100 -v\n", []Entry{{"poller", []string{"./poller", "--batch", "100", "-v"}, 1}}},
		{"several, comments and blank lines", "# workers\n\npoller: ./poller\n   # indented comment\n\t\nscheduler: ./scheduler --every 1m\n",
			[]Entry{{"poller", []string{"./poller"}, 3}, {"scheduler", []string{"./scheduler", "--every", "1m"}, 6}}},
		{"role characters", "Web_2-x: run\n", []Entry{{"Web_2-x", []string{"run"}, 1}}},
		{"whitespace trimmed", "  web  :   ./web   a\t b  \n", []Entry{{"web", []string{"./web", "a", "b"}, 1}}},
		{"no space after colon", "web:./web\n", []Entry{{"web", []string{"./web"}, 1}}},
		{"colon in the command", "web: ./web --listen :8080 http://x:1/\n", []Entry{{"web", []string{"./web", "--listen", ":8080", "http://x:1/"}, 1}}},
		{"CRLF", "a: x y\r\n\r\nb: z\r\n", []Entry{{"a", []string{"x", "y"}, 1}, {"b", []string{"z"}, 3}}},
		{"BOM", "\ufeffweb: ./web\n", []Entry{{"web", []string{"./web"}, 1}}},
		{"BOM before a comment", "\ufeff# c\nweb: ./web\n", []Entry{{"web", []string{"./web"}, 2}}},
		{"single quotes", `web: echo 'a b' 'it''s' '$HOME | ; > $(x) ` + "`x`" + `' 'x\y'`,
			[]Entry{{"web", []string{"echo", "a b", "its", "$HOME | ; > $(x) `x`", `x\y`}, 1}}},
		{"double quotes", `web: echo "a b" "q\"q" "b\\s" "d\$x" "t\` + "`" + `" "k\n" "'"`,
			[]Entry{{"web", []string{"echo", "a b", `q"q`, `b\s`, "d$x", "t`", `k\n`, "'"}, 1}}},
		{"quotes join words", `web: a"b"'c'd`, []Entry{{"web", []string{"abcd"}, 1}}},
		{"empty quoted word", `web: x '' ""`, []Entry{{"web", []string{"x", "", ""}, 1}}},
		{"backslash outside quotes", `web: a\ b \| \; \$HOME \\ \'`, []Entry{{"web", []string{"a b", "|", ";", "$HOME", `\`, "'"}, 1}}},
		{"operators quoted", `web: grep "a|b" ';' "x > y" '&&'`, []Entry{{"web", []string{"grep", "a|b", ";", "x > y", "&&"}, 1}}},
		{"trailing comment", "web: ./web --x 1 # the web\n", []Entry{{"web", []string{"./web", "--x", "1"}, 1}}},
		{"# inside a word", "web: ./web a#b --color=#fff\n", []Entry{{"web", []string{"./web", "a#b", "--color=#fff"}, 1}}},
		{"# quoted", `web: ./web '#x' "# y" \#z`, []Entry{{"web", []string{"./web", "#x", "# y", "#z"}, 1}}},
		{"# after a quote", `web: ./web ''#x`, []Entry{{"web", []string{"./web", "#x"}, 1}}},
		{"lone dollar", `web: echo $ a$ "$" "x$"`, []Entry{{"web", []string{"echo", "$", "a$", "$", "x$"}, 1}}},
		{"globs kept", `web: ls *.txt a?c [ab]`, []Entry{{"web", []string{"ls", "*.txt", "a?c", "[ab]"}, 1}}},
		{"tilde inside a word", `web: ./web a~b --dir=~/x`, []Entry{{"web", []string{"./web", "a~b", "--dir=~/x"}, 1}}},
		{"sh -c", `web: sh -c 'bundle exec puma | tee log'`, []Entry{{"web", []string{"sh", "-c", "bundle exec puma | tee log"}, 1}}},
		{"env", `web: env PORT=5000 ./web`, []Entry{{"web", []string{"env", "PORT=5000", "./web"}, 1}}},
		{"= later is not an assignment", `web: ./web PORT=5000`, []Entry{{"web", []string{"./web", "PORT=5000"}, 1}}},
		{"UTF-8", "web: echo héllo 'wörld'\n", []Entry{{"web", []string{"echo", "héllo", "wörld"}, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("Procfile", strings.NewReader(tc.in))
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tc.in, err)
			}
			if f.Path != "Procfile" || !reflect.DeepEqual(f.Entries, tc.want) {
				t.Errorf("Parse(%q) = %q %#v, want %#v", tc.in, f.Path, f.Entries, tc.want)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     int
		// want is the whole message when exact, else a part of it.
		want  string
		exact bool
	}{
		{"no colon", "web ./web\n", 1, `Procfile:1: not a Procfile entry (no colon): want ROLE: COMMAND ARGS..., got "web ./web"`, true},
		{"no colon, later line", "# c\nweb: x\n./worker\n", 3, `Procfile:3: not a Procfile entry (no colon): want ROLE: COMMAND ARGS..., got "./worker"`, true},
		{"empty role", ": ./web\n", 1, `Procfile:1: no role name before the colon: want ROLE: COMMAND ARGS..., got ": ./web"`, true},
		{"empty command", "web:\n", 1, `Procfile:1: role "web" has no command: want ROLE: COMMAND ARGS...`, true},
		{"blank command", "web:   \t\r\n", 1, `role "web" has no command`, false},
		{"only a comment", "web: # later\n", 1, `Procfile:1: role "web" has no command, only a comment: want ROLE: COMMAND ARGS...`, true},
		{"bad role", "my role: x\n", 1, `Procfile:1: role name "my role" has the wrong form: use letters, digits, '-' and '_' (want ROLE: COMMAND ARGS...)`, true},
		{"dotted role", "a.b: x\n", 1, `role name "a.b" has the wrong form`, false},
		{"long line shortened", "./" + strings.Repeat("x", 100) + "\n", 1, `got "./xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...`, false},
		{"duplicate", "web: a\nworker: b\n\nweb: c\n", 4, `Procfile:4: role "web" again, first on line 1; each role runs one command: remove or rename one of the two lines`, true},
		{"empty file", "", 0, `Procfile: no entries; a Procfile has a line ROLE: COMMAND ARGS... for each role`, true},
		{"only comments", "# a\n\n  # b\r\n", 0, `Procfile: no entries`, false},
		{"only a BOM", "\ufeff", 0, `Procfile: no entries`, false},
		{"NUL", "web: a\x00b\n", 1, `a NUL byte`, false},

		{"pipe", "web: ./web | tee log\n", 1,
			`Procfile:1: a pipe (|) needs a shell, but leasectl runs commands without one: to run it in a shell, write it as web: sh -c './web | tee log'; to pass it to the program as it is, put it in single quotes`, true},
		{"pipe, command with single quotes", "web: ./web 'a b' | tee log\n", 1,
			`Procfile:1: a pipe (|) needs a shell, but leasectl runs commands without one: to run it in a shell, write it as web: sh -c '...'; to pass it to the program as it is, put it in single quotes`, true},
		{"or", "web: a || b\n", 1, "the operator || needs a shell", false},
		{"and", "web: a && b\n", 1, "the operator && needs a shell", false},
		{"and without spaces", "web: make&&./web\n", 1, "the operator && needs a shell", false},
		{"background", "web: a &\n", 1, "a background job (&) needs a shell", false},
		{"list", "web: a; b\n", 1, "a command list (;) needs a shell", false},
		{"redirect out", "web: a > log\n", 1, "a redirection (>) needs a shell", false},
		{"redirect append", "web: a >>log\n", 1, "a redirection (>>) needs a shell", false},
		{"redirect stderr", "web: a 2>&1\n", 1, "a redirection (>) needs a shell", false},
		{"redirect in", "web: a < in\n", 1, "a redirection (<) needs a shell", false},
		{"subshell", "web: (cd x)\n", 1, "a subshell (() needs a shell", false},
		{"command substitution", "web: ./web --id $(hostname)\n", 1, "command substitution ($(...)) needs a shell", false},
		{"backquotes", "web: ./web --id `hostname`\n", 1, "command substitution (`...`) needs a shell", false},
		{"backquotes in double quotes", "web: ./web \"`hostname`\"\n", 1, "command substitution (`...`, also in double quotes) needs a shell", false},
		{"variable", "web: ./web --port $PORT\n", 1,
			`Procfile:1: variable expansion ($PORT) needs a shell, but leasectl runs commands without one: to run it in a shell, write it as web: sh -c './web --port $PORT'; to pass it to the program as it is, put it in single quotes`, true},
		{"variable in a word", "web: ./web --port=$PORT_1x\n", 1, "variable expansion ($PORT_1x) needs a shell", false},
		{"variable in double quotes", `web: ./web "$HOME/x"`, 1, "variable expansion ($HOME) (also in double quotes) needs a shell", false},
		{"braces", "web: ./web ${PORT:-5000}\n", 1, "parameter expansion (${...}) needs a shell", false},
		{"positional", "web: ./web $1\n", 1, "parameter expansion ($1) needs a shell", false},
		{"special", "web: ./web $$\n", 1, "parameter expansion ($$) needs a shell", false},
		{"bash quoting", "web: ./web $'\\n'\n", 1, "bash's quoting $'...' needs a shell", false},
		{"tilde", "web: ~/bin/web\n", 1, "a leading ~ (the home directory) needs a shell", false},
		{"assignment", "web: PORT=5000 ./web --x 'a b'\n", 1,
			`Procfile:1: "PORT=5000" sets an environment variable, which needs a shell, but leasectl runs commands without one: write it as web: env PORT=5000 ./web --x 'a b'`, true},
		{"unterminated single quote", "web: echo 'a b\n", 1,
			`Procfile:1: a single quote (') without its closing quote; a Procfile entry is one line: close the quote on it`, true},
		{"unterminated double quote", `web: echo "a b`, 1, `a double quote (") without its closing quote`, false},
		{"escaped closing double quote", `web: echo "a\"`, 1, `a double quote (") without its closing quote`, false},
		{"trailing backslash", "web: echo a \\\nb: c\n", 1, "a backslash at the end of the line", false},
		{"first error wins", "web: a | b\nweb: c\n", 1, "a pipe (|)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("Procfile", strings.NewReader(tc.in))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %+v, %v; want an *Error", tc.in, f, err)
			}
			if pe.Path != "Procfile" || pe.Line != tc.line {
				t.Errorf("Parse(%q): error at %s:%d, want Procfile:%d (%v)", tc.in, pe.Path, pe.Line, tc.line, err)
			}
			if got := err.Error(); tc.exact && got != tc.want || !tc.exact && !strings.Contains(got, tc.want) {
				t.Errorf("Parse(%q) error:\n got %s\nwant %s", tc.in, got, tc.want)
			}
			if strings.Contains(tc.name, "pipe") || strings.Contains(tc.name, "variable") {
				if !strings.Contains(err.Error(), "without one") || !strings.Contains(err.Error(), "sh -c '") {
					t.Errorf("the error does not say to use sh -c: %v", err)
				}
			}
		})
	}
}

func TestSizeCap(t *testing.T) {
	line := "web: ./web\n"
	fits := strings.Repeat("#", MaxSize-len(line)-1) + "\n" + line
	if f, err := Parse("Procfile", strings.NewReader(fits)); err != nil || len(f.Entries) != 1 || f.Entries[0].Line != 2 {
		t.Errorf("a file of exactly 1 MiB: %+v, %v", f, err)
	}
	_, err := Parse("big", strings.NewReader(fits+"\n"))
	const want = "big: larger than 1048576 bytes (1 MiB); a Procfile has a line ROLE: COMMAND ARGS... per role: is this the right file?"
	if err == nil || err.Error() != want {
		t.Errorf("a file over 1 MiB: %v, want %s", err, want)
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	if _, err := Parse("Procfile", iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("Parse = %v, want the read error", err)
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{"Procfile", 3, "bad"}, "Procfile:3: bad"},
		{Error{"Procfile", 0, "bad"}, "Procfile: bad"},
		{Error{"", 3, "bad"}, "line 3: bad"},
		{Error{"", 0, "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Procfile")
	if err := os.WriteFile(path, []byte("poller: ./poller\nscheduler: ./scheduler -x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != path || !reflect.DeepEqual(f.Roles(), []string{"poller", "scheduler"}) {
		t.Errorf("Load = %+v", f)
	}
	if e, ok := f.Lookup("scheduler"); !ok || !reflect.DeepEqual(e.Command, []string{"./scheduler", "-x"}) || e.Line != 2 {
		t.Errorf("Lookup(scheduler) = %+v, %v", e, ok)
	}
	if _, ok := f.Lookup("web"); ok {
		t.Error("Lookup(web) found an entry")
	}

	if _, err := Load(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want not exist", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("web: a\nweb b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: not a Procfile entry") {
		t.Errorf("Load(bad) = %v, want an error at %s:2", err, bad)
	}

	_, err = Load("-")
	const want = "-: a Procfile cannot be read from standard input, which the programs inherit; name the file (--procfile Procfile)"
	if err == nil || err.Error() != want {
		t.Errorf(`Load("-") = %v, want %s`, err, want)
	}
}

// FuzzParse: Parse never panics, and what it accepts has entries with a
// valid role, a command and increasing lines.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"web: ./web\n", "a: 'x y' \"z\\\"\" \\q # c\r\nb: c", "web: a | b", "\ufeff# x\n", "web: \"$", "x: '"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		pf, err := Parse("P", strings.NewReader(in))
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		last := 0
		for _, e := range pf.Entries {
			if !validRole(e.Role) || len(e.Command) == 0 || e.Line <= last {
				t.Fatalf("bad entry %+v", e)
			}
			last = e.Line
		}
	})
}

// FuzzStartsWithAssignment holds the plain matcher equal to the pattern it
// replaces.
func FuzzStartsWithAssignment(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	for _, s := range []string{"", "A=1 cmd", "_x=", "1A=2", "=x", "a-b=c", "cmd --x=1", "é=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := startsWithAssignment(s), re.MatchString(s); got != want {
			t.Errorf("startsWithAssignment(%q) = %v, want %v", s, got, want)
		}
	})
}

package cmd

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe returns s with every character that could act on a terminal,
// rather than show on it, replaced by a visible escape, so that text from
// the server or from a file (a role, database or application name, an
// error message) can never move the cursor, clear the screen, set the
// window title, overwrite a line or reorder what follows it:
//
//   - C0 controls and DEL: \a \b \t \n \v \f \r, else \xNN (ESC is \x1b);
//   - C1 controls (U+0080–U+009F): \u0085, \u009b, …;
//   - Unicode format characters (bidi overrides, embeddings and isolates
//     such as U+202E, zero-width characters, the BOM) and the line and
//     paragraph separators U+2028 and U+2029: \u202e, …;
//   - bytes that are not UTF-8 (a lone 0x9b is CSI to some terminals): \xNN.
//
// Everything else, backslashes included, is shown as it is. Every text
// output of leasectl goes through it: writeTable escapes each cell, and
// printError and the other messages escape what they did not write
// themselves. JSON needs none of it: the encoder escapes control characters.
func termSafe(s string) string { return escapeControls(s, false) }

// termSafeLines is termSafe keeping line feeds, for messages of several
// lines such as some errors, except a line feed that would start a line
// with "::" (blanks before it aside): a CI log takes such a line for a
// GitHub Actions workflow command (::error::, ::add-mask::, ...), so a name
// that holds one is shown as \n there too.
func termSafeLines(s string) string { return escapeControls(s, true) }

func escapeControls(s string, keepNewlines bool) string {
	if isTermSafe(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines && !strings.HasPrefix(strings.TrimLeft(s[i+1:], " \t"), "::"):
			b.WriteByte('\n')
		case r < 0x20 || r == 0x7f:
			if e, ok := c0Escapes[r]; ok {
				b.WriteString(e)
			} else {
				fmt.Fprintf(&b, `\x%02x`, r)
			}
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

var c0Escapes = map[rune]string{'\a': `\a`, '\b': `\b`, '\t': `\t`, '\n': `\n`, '\v': `\v`, '\f': `\f`, '\r': `\r`}

// isTermSafe reports whether s needs no escape: the fast path, since nearly
// every string is printable ASCII.
func isTermSafe(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return isTermSafeUnicode(s[i:], keepNewlines)
		}
		if (c < 0x20 && !(c == '\n' && keepNewlines)) || c == 0x7f {
			return false
		}
		if c == '\n' && strings.HasPrefix(strings.TrimLeft(s[i+1:], " \t"), "::") {
			return false
		}
	}
	return true
}

func isTermSafeUnicode(s string, keepNewlines bool) bool {
	for i, r := range s {
		if r == '\n' && keepNewlines && !strings.HasPrefix(strings.TrimLeft(s[i+1:], " \t"), "::") {
			continue
		}
		if (r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")) || r < 0x20 || r == 0x7f || unsafeRune(r) {
			return false
		}
	}
	return true
}

// unsafeRune: C1 controls, format characters (Cf: bidi controls,
// zero-width characters, the BOM, soft hyphen) and the line and paragraph
// separators.
func unsafeRune(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r)
}

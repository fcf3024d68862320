// Package pwtest generates passwords made of the characters that DSN syntax
// reserves, writes them into DSNs the ways users do (escaped and quoted as
// they must be, or as typed), and finds the pieces of a password that an
// output shows. The tests of dbconn (fuzzing) and cmd (the real connect
// path) share it.
package pwtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Alphabet is what generated passwords are made of: the characters that
// URL and key=value syntax reserve (@ : / % ? # & quotes, backslash,
// space) and letters that leasectl's own messages, numbers and timestamps
// do not put side by side, so that a piece of a password in an output is a
// leak and not a coincidence. There is no "=": a password with " k=v" in an
// unquoted key=value DSN is another valid parameter, which no check can
// tell from one the user meant.
const Alphabet = letters + `@:/%?#&'"\ `

// letters are the letters of Alphabet ("Z" would meet the Z of RFC 3339
// timestamps in log lines).
const letters = "qjzQJVK"

// FromBytes maps arbitrary bytes (a fuzzer's) onto Alphabet, one character
// each.
func FromBytes(b string) string {
	out := make([]byte, len(b))
	for i := 0; i < len(b); i++ {
		out[i] = Alphabet[int(b[i])%len(Alphabet)]
	}
	return string(out)
}

// Generate returns n passwords of 6 to 18 characters from a generator seeded
// with seed: half letters, half reserved characters, in random order.
func Generate(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	reserved := Alphabet[len(letters):]
	out := make([]string, n)
	for i := range out {
		b := make([]byte, 6+r.IntN(13))
		for j := range b {
			if r.IntN(2) == 0 {
				b[j] = letters[r.IntN(len(letters))]
			} else {
				b[j] = reserved[r.IntN(len(reserved))]
			}
		}
		out[i] = string(b)
	}
	return out
}

// Form is a password written into a DSN one way.
type Form struct {
	Name string
	DSN  string
	// Written is the password as the DSN spells it (percent-encoded,
	// backslash-escaped, or as typed).
	Written string
	// Correct: written as the syntax requires, so the DSN must parse and
	// carry the password unchanged.
	Correct bool
}

// Rest is the DSN without the password as written: what an output may
// show.
func (f Form) Rest() string { return strings.Replace(f.DSN, f.Written, "", 1) }

// Forms writes password pw into DSNs for user at host:port, database db,
// without TLS: in a URL's user:password and password= parameter, and in
// key=value form, each escaped as it must be and as typed.
func Forms(pw, user, host string, port int, db string) []Form {
	enc, kv := URLEscape(pw), KVEscape(pw)
	url := fmt.Sprintf("postgres://%s:%%s@%s:%d/%s?sslmode=disable", user, host, port, db)
	query := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable&password=%%s", user, host, port, db)
	keyValue := fmt.Sprintf("host=%s port=%d user=%s password=%%s dbname=%s sslmode=disable", host, port, user, db)
	return []Form{
		{"URL user:password, percent-encoded", fmt.Sprintf(url, enc), enc, true},
		{"URL user:password, as typed", fmt.Sprintf(url, pw), pw, false},
		{"URL password=, percent-encoded", fmt.Sprintf(query, enc), enc, true},
		{"URL password=, as typed", fmt.Sprintf(query, pw), pw, false},
		{"key=value, quoted and escaped", fmt.Sprintf(keyValue, "'"+kv+"'"), kv, true},
		{"key=value, as typed", fmt.Sprintf(keyValue, pw), pw, false},
		{"key=value, quoted as typed", fmt.Sprintf(keyValue, "'"+pw+"'"), pw, false},
	}
}

// URLEscape percent-encodes every byte of s but the unreserved ones, as a
// password in a URL DSN must be written.
func URLEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// KVEscape escapes s for a single-quoted key=value value.
func KVEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// Fragments returns the pieces of secret of at least three characters, with
// a letter in them (not counting the hex digits of a %XX escape), that out
// shows although rest does not contain them. rest is the DSN without the
// password, and what leasectl says whatever the password is (see
// Reference): a piece without a letter (": /", "%2F") or one that is a
// piece of leasectl's own words ("ssw" of "password") is no leak.
func Fragments(out, secret, rest string) []string {
	escape := make([]bool, len(secret))
	for i := 0; i+2 < len(secret); i++ {
		if secret[i] == '%' && isHex(secret[i+1]) && isHex(secret[i+2]) {
			escape[i+1], escape[i+2] = true, true
		}
	}
	var found []string
	seen := map[string]bool{}
	for i := 0; i < len(secret); i++ {
		for j := i + 3; j <= len(secret); j++ {
			f := secret[i:j]
			if seen[f] || !hasLetter(secret, escape, i, j) || strings.Contains(rest, f) {
				continue
			}
			seen[f] = true
			if strings.Contains(out, f) {
				found = append(found, f)
			}
		}
	}
	return found
}

func hasLetter(s string, escape []bool, i, j int) bool {
	for k := i; k < j; k++ {
		if c := s[k] | 0x20; 'a' <= c && c <= 'z' && !escape[k] {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}

// Reference is pw with every letter and digit replaced by one letter that
// pw does not contain: the same syntax, none of its words. What leasectl
// shows for a DSN with Reference(pw) in place of pw is what it says whatever
// the password: its own words, which a piece of pw may match without
// leaking.
func Reference(pw string) string {
	var r byte = 'm'
	for _, c := range []byte("mwxyhbcdefgiklnoprstuvaj") {
		if !strings.ContainsRune(strings.ToLower(pw), rune(c)) {
			r = c
			break
		}
	}
	b := []byte(pw)
	for i, c := range b {
		if 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' {
			b[i] = r
		}
	}
	return string(b)
}

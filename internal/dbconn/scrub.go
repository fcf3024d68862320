package dbconn

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file is the one place that knows where a DSN keeps its passwords:
// what a message must not show ([Scrub], [Secrets]), how to show a DSN
// ([Redact]), whether a DSN holds a password at all ([HasPassword]), and
// which DSNs put a piece of their password where it would be shown, as a
// host, a port, a database name or a query parameter (checkURL,
// checkHosts), so that they are refused before anything connects.
//
// libpq, and pgx like it, end a URL's user:password at its first "@" (only
// a "/" stops the search). A password with an unescaped "@" therefore
// leaves its tail in the host part (postgres://app:p@ssw0rd@db/app has the
// host "ssw0rd@db"), one with an unescaped "/" leaves its tail in the path,
// and one with "/" and "?" leaves it in the query. No host, database name
// or query parameter name holds an "@" in a DSN that means what it says, so
// an "@" there is refused, without showing the part that holds it.

// minSecret is the shortest password piece that Scrub replaces in messages:
// replacing one or two letters everywhere would garble every message and
// hide nothing.
const minSecret = 3

// mask replaces a password.
const mask = "xxxxx"

// encodeHint says how to write a URL's reserved characters.
const encodeHint = `write "@" in a user name or password as %40 (and "/" as %2F, "?" as %3F, "%" as %25, a space as %20), or use key=value form with password='...'`

var (
	// queryInUserinfo: what libpq takes for user:password looks like a
	// query ("?name=") whose value held an unescaped "@".
	queryInUserinfo = lazyRegexp(`\?[A-Za-z_]+=`)
	// queryKey finds the start of each query parameter of a URL: its name
	// and "=". Where the query starts is not certain in a malformed URL,
	// so every "?" or "&" is a candidate.
	queryKey = lazyRegexp(`[?&]([^&?=#]*)=`)
	// kvPasswordKey finds password= and sslpassword= in key=value form
	// (libpq's keywords are case-sensitive; matching any case is safe).
	kvPasswordKey = lazyRegexp(`(?i)(?:ssl)?password\s*=[ \t\n\r\v\f]*`)
	// kvHostKey finds host= in key=value form: a host with an "@" in it
	// is someone's user:password@host.
	kvHostKey = lazyRegexp(`(?:^|[ \t\n\r\v\f])host[ \t\n\r\v\f]*=[ \t\n\r\v\f]*`)
	// kvNextKey is the start of the next key=value pair after a value.
	kvNextKey = lazyRegexp(`[ \t\n\r\v\f]+[^ \t\n\r\v\f='\\]+[ \t\n\r\v\f]*=`)
)

// urlScheme matches the start of a URL DSN: pgx takes only postgres:// and
// postgresql:// for one, but the userinfo of any URL is a password.
var urlScheme = lazyRegexp(`^[ \t\n\r\v\f]*[A-Za-z][A-Za-z0-9+.-]*://`)

// urlBody returns what follows the scheme of a URL DSN, where it starts,
// and whether dsn is one.
func urlBody(dsn string) (body string, start int, ok bool) {
	m := urlScheme().FindStringIndex(dsn)
	if m == nil {
		return "", 0, false
	}
	return dsn[m[1]:], m[1], true
}

// checkURL returns why a URL DSN must be refused before it is parsed
// because a piece of its user:password would land in the host, path or
// query, or "" when it need not be. It never quotes the DSN.
func checkURL(dsn string) string {
	p, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		p, ok = strings.CutPrefix(dsn, "postgres://")
	}
	if !ok {
		return ""
	}
	rest := p
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		if queryInUserinfo().MatchString(p[:i]) {
			return `an "@" in a query parameter's value is taken for the end of a user:password (no "/" comes before it): write it as %40`
		}
		rest = p[i+1:]
	}
	authority, tail := rest, ""
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		authority, tail = rest[:j], rest[j:]
	}
	if strings.Contains(authority, "@") {
		return `the host part holds an "@", but the user:password ends at the first "@": ` + encodeHint
	}
	if path, ok := strings.CutPrefix(tail, "/"); ok {
		path, tail, _ = strings.Cut(path, "?")
		if strings.Contains(path, "@") {
			return `the database name holds an "@" (write it as %40), or a password holds a "/" that made the rest of it the path: ` + encodeHint
		}
	} else {
		tail = strings.TrimPrefix(tail, "?")
	}
	for pair := range strings.SplitSeq(tail, "&") {
		name, _, _ := strings.Cut(pair, "=")
		if strings.Contains(name, "@") {
			return `a query parameter's name holds an "@": a password holds a "/" or "?" that made the rest of it the query: ` + encodeHint
		}
	}
	return ""
}

// checkHosts returns why hosts must be refused: a host with an "@" (from
// a percent-encoded %40 in a URL's host, a key=value host=, or $PGHOST) is
// the tail of a user:password or a user name, never a host. "" when none
// has one.
func checkHosts(hosts ...string) string {
	for _, h := range hosts {
		if strings.Contains(h, "@") {
			return `a host holds an "@": a host name never does; give the user name and password as user= and password= (key=value form), or in a URL write "@" in them as %40`
		}
	}
	return ""
}

// span is a byte range of a DSN that may hold a password.
type span struct{ from, to int }

// passwordSpans returns where dsn may keep passwords, generously: a DSN
// whose boundaries are unclear has wider spans, so that a password's
// pieces are inside them whichever way it was meant.
func passwordSpans(dsn string) []span {
	if !mayHoldPassword(dsn) {
		return nil
	}
	return allPasswordSpans(dsn)
}

// allPasswordSpans is passwordSpans without the shortcut.
func allPasswordSpans(dsn string) []span {
	var out []span
	add := func(from, to int) {
		if to > from {
			out = append(out, span{from, to})
		}
	}
	if p, at, ok := urlBody(dsn); ok {
		// The userinfo password as libpq splits it.
		if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
			if c := strings.IndexByte(p[:i], ':'); c >= 0 {
				add(at+c+1, at+i)
			}
		}
		// A URL that checkURL refuses: from the first ":" (or the start)
		// to the last "@", which holds the password whatever the user
		// meant.
		if checkURL(dsn) != "" {
			last := strings.LastIndexByte(p, '@')
			from := 0
			if c := strings.IndexByte(p, ':'); c >= 0 && c < last {
				from = c + 1
			}
			add(at+from, at+last)
		}
		// password= and sslpassword= query parameters, with the pairs
		// after them that have no "=" or more than one: the rest of a
		// password with an unescaped "&".
		for _, m := range queryKey().FindAllStringSubmatchIndex(p, -1) {
			if name := strings.ToLower(lenientDecode(p[m[2]:m[3]])); name != "password" && name != "sslpassword" {
				continue
			}
			end := m[1]
			for {
				next := strings.IndexByte(p[end:], '&')
				if next < 0 {
					end = len(p)
					break
				}
				end += next
				following := p[end+1:]
				if k := strings.IndexByte(following, '&'); k >= 0 {
					following = following[:k]
				}
				if strings.Count(following, "=") == 1 {
					break
				}
				end++
			}
			add(at+m[1], at+end)
		}
		return merge(out)
	}
	for _, m := range kvPasswordKey().FindAllStringIndex(dsn, -1) {
		from := m[1]
		end := kvValueEnd(dsn, from)
		if n := kvNextKey().FindStringIndex(dsn[from:]); n != nil {
			end = max(end, from+n[0])
		} else {
			end = len(dsn)
		}
		add(from, end)
	}
	for _, m := range kvHostKey().FindAllStringIndex(dsn, -1) {
		if end := kvValueEnd(dsn, m[1]); strings.Contains(dsn[m[1]:end], "@") {
			add(m[1], end)
		}
	}
	return merge(out)
}

// mayHoldPassword is false when dsn has none of what every password span
// below starts from: an "@" (userinfo, a host value), a "password" key in
// any case, or a %-escaped URL key. Non-ASCII text is checked in full, as
// case folding reaches it. It spares the common DSN the regexps, which a
// command compiles at its first use.
func mayHoldPassword(dsn string) bool {
	for i := 0; i < len(dsn); i++ {
		if c := dsn[i]; c >= utf8.RuneSelf || c == '@' || c == '%' {
			return true
		}
	}
	return strings.Contains(strings.ToLower(dsn), "password")
}

// kvValueEnd returns where the key=value value that starts at from ends, as
// pgx reads it: a quoted value at its closing quote (the end of dsn when
// there is none), any other at the first unescaped space.
func kvValueEnd(dsn string, from int) int {
	i := from
	if i < len(dsn) && dsn[i] == '\'' {
		for i++; i < len(dsn); i++ {
			switch dsn[i] {
			case '\\':
				i++
			case '\'':
				return i + 1
			}
		}
		return len(dsn)
	}
	for ; i < len(dsn); i++ {
		switch dsn[i] {
		case '\\':
			i++
		case ' ', '\t', '\n', '\r', '\v', '\f':
			return i
		}
	}
	return len(dsn)
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// lenientDecode percent-decodes what it can and keeps the rest as it is.
func lenientDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					b.WriteByte(hi<<4 | lo)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// kvUnquote is a key=value value as pgx reads it: without its quotes, with
// its backslash escapes resolved.
func kvUnquote(s string) string {
	s = strings.TrimPrefix(s, "'")
	if strings.HasSuffix(s, "'") && !strings.HasSuffix(s, `\'`) {
		s = s[:len(s)-1]
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Secrets returns the pieces of dsn that may be passwords, as written and
// as they are read (percent-decoded; unquoted and unescaped), longest
// first. A DSN whose structure is unclear (an unescaped "@" or "/" in a
// password) yields the widest reading too.
func Secrets(dsn string) []string {
	var out []string
	add := func(s string) {
		for _, v := range []string{s, strings.TrimSpace(s)} {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	_, _, isURL := urlBody(dsn)
	for _, s := range passwordSpans(dsn) {
		raw := dsn[s.from:s.to]
		add(raw)
		if !isURL {
			add(kvUnquote(raw))
			continue
		}
		add(lenientDecode(raw))
		// The pieces between separators, which a misparse may show
		// apart: the password's tail after an unescaped "@", "/", "?"
		// or "&".
		for _, part := range strings.FieldsFunc(raw, func(r rune) bool { return strings.ContainsRune("@/?&", r) }) {
			add(part)
			add(lenientDecode(part))
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Scrub replaces every piece of msg that may be a password of dsn (see
// [Secrets]) with "xxxxx". Pieces shorter than three characters are left:
// they would garble the message and hide nothing.
func Scrub(msg, dsn string) string {
	return scrubSecrets(msg, Secrets(dsn))
}

func scrubSecrets(msg string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= minSecret {
			msg = strings.ReplaceAll(msg, s, mask)
		}
	}
	return msg
}

// Redact returns dsn with every part that may hold a password replaced by
// "xxxxx", for display. Where the DSN's structure is unclear, more is
// masked: with an unescaped "@" in the password, everything from the
// first ":" after the scheme to the last "@".
func Redact(dsn string) string {
	var b strings.Builder
	last := 0
	for _, s := range passwordSpans(dsn) {
		b.WriteString(dsn[last:s.from])
		b.WriteString(mask)
		last = s.to
	}
	b.WriteString(dsn[last:])
	return scrubSecrets(b.String(), Secrets(dsn))
}

// HasPassword reports whether dsn itself holds a password (in a URL's
// user:password, a password= or sslpassword= parameter), as opposed to
// leaving it to PGPASSWORD or a pgpass file.
func HasPassword(dsn string) bool {
	return len(passwordSpans(dsn)) > 0
}

// lazyRegexp compiles expr on first use rather than at package init, which
// every command (leasectl --version too) would pay for.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

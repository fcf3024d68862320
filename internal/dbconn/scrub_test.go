package dbconn

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/test/pwtest"
)

// closedAddr is a port nothing listens on (port 1 is privileged and never
// served on the test machines): connecting fails at once.
const closedHost, closedPort = "127.0.0.1", 1

// outputs returns everything leasectl may show of dsn: the redacted DSN,
// and the error of parsing it or of connecting with it (to a closed port:
// connection refused), alone and as a log line in both of run's formats.
func outputs(t *testing.T, dsn string) (out []string, parseErr error) {
	t.Helper()
	out = append(out, Redact(dsn))
	cfg, err := Parse(dsn, 200*time.Millisecond)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		var conn interface{ Close(context.Context) error }
		conn, err = Connect(ctx, cfg)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			t.Fatalf("%q connected to a closed port", dsn)
		}
	} else {
		parseErr = err
	}
	out = append(out, err.Error())
	// Without the time, whose digits would meet a password's.
	noTime := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, noTime) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, noTime) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Warn("cannot connect; retrying", "err", err.Error())
		out = append(out, b.String())
	}
	return out, parseErr
}

// checkPassword writes pw into DSNs every way pwtest knows and fails when
// any output shows a piece of it, as typed or as written.
func checkPassword(t *testing.T, pw string) {
	t.Helper()
	refs := pwtest.Forms(pwtest.Reference(pw), "scrub_user", closedHost, closedPort, "scrub_db")
	for i, f := range pwtest.Forms(pw, "scrub_user", closedHost, closedPort, "scrub_db") {
		outs, parseErr := outputs(t, f.DSN)
		// What leasectl says whatever the password: no leak.
		refOuts, _ := outputs(t, refs[i].DSN)
		rest := f.Rest() + "\n" + strings.Join(refOuts, "\n")
		for _, out := range outs {
			for _, secret := range []string{pw, f.Written} {
				if frags := pwtest.Fragments(out, secret, rest); len(frags) > 0 {
					t.Fatalf("%s: %q shows pieces %q of the password %q:\n%s", f.Name, f.DSN, frags, pw, out)
				}
			}
		}
		var dsnErr *DSNError
		switch {
		case f.Correct && parseErr != nil:
			t.Fatalf("%s: %q, written as it must be, does not parse: %v", f.Name, f.DSN, parseErr)
		case parseErr != nil && !errors.As(parseErr, &dsnErr):
			t.Fatalf("%s: Parse(%q) returned %T, want *DSNError", f.Name, f.DSN, parseErr)
		case f.Name == "URL user:password, as typed" && strings.ContainsAny(pw, "@/") && parseErr == nil:
			t.Fatalf("%s: %q accepted: an unescaped @ or / in the password moves its tail into the host, path or query", f.Name, f.DSN)
		}
		if f.Correct {
			cfg, _ := Parse(f.DSN, time.Second)
			if cfg.Password != pw {
				t.Fatalf("%s: %q carries the password %q, want %q", f.Name, f.DSN, cfg.Password, pw)
			}
		}
	}
}

// FuzzScrub writes passwords made of the characters DSN syntax reserves
// (@ : / % ? # & quotes, backslash, space, letters) into URL and key=value
// DSNs, escaped as they must be and as typed: no error, redacted DSN or
// log line may show the password, its escaped form, or any piece of either
// of three or more characters that the rest of the DSN does not contain.
// The fuzzer's bytes map onto that alphabet one to one.
func FuzzScrub(f *testing.F) {
	for _, seed := range []string{
		"p@ssw0rd", "Zq9S3cr3t@p w0rd", "qj@zQ/JZ", "qjz/QJZ@VK", "qjz?QJZ@VK", "qjz/Q?JZ@VK", "q@j@z@Q",
		"qjz QJZ", "'qjzQJZ", "qjz'QJZ", "qjz' QJZ", `qjz\QJZ`, `qjz\`, "qjz%QJZ", "qjz%4QJZ", "qjz&QJZ", "qjz&QJZ&VK",
		"qjz#QJZ", `"qjz QJZ"`, "qjz:QJZ", "  qjz  ", "@@@qjz", "qjz/", "/qjz", "qjz?", "?qjz=", "qjz@/QJZ?VK",
	} {
		f.Add(seed)
	}
	for _, pw := range pwtest.Generate(15, 64) {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) == 0 || len(s) > 40 {
			return
		}
		// Printable passwords without "=" as they come (see
		// pwtest.Alphabet for why no "="), others mapped onto the
		// alphabet of reserved characters.
		pw := s
		if strings.ContainsAny(s, "=") || !isPrintable(s) {
			pw = pwtest.FromBytes(s)
		}
		checkPassword(t, pw)
	})
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// TestScrubGeneratedPasswords is FuzzScrub's check over many generated
// passwords, deterministic, in every test run.
func TestScrubGeneratedPasswords(t *testing.T) {
	for _, pw := range pwtest.Generate(6, 400) {
		checkPassword(t, pw)
	}
}

// TestRefusedURLsSayHowToWriteThem: each way a URL's password moves its
// tail out of the userinfo is refused before parsing, saying how to write
// it, without the tail.
func TestRefusedURLsSayHowToWriteThem(t *testing.T) {
	for _, tc := range []struct{ dsn, tail, says string }{
		{"postgres://app:p@ssw0rd@127.0.0.1:5432/app", "ssw0rd", `the host part holds an "@"`},
		{"postgres://app:Zq9S3cr3t@p w0rd@127.0.0.1:5432/app", "w0rd", `the host part holds an "@"`},
		{"postgres://me@corp:pw-Secret1@db/app", "Secret1", `the host part holds an "@"`},
		{"postgres://app:Secret/Tail9@db:5432/app", "Tail9", `the database name holds an "@"`},
		{"postgres://app:1234/Tail9@db:5432/app", "Tail9", `the database name holds an "@"`},
		{"postgres://app:Secret/Tail?More9@db:5432/app?sslmode=disable", "More9", `a query parameter's name holds an "@"`},
		{"postgres://app:Secret/Tail?More9@db:5432", "More9", `a query parameter's name holds an "@"`},
		{"postgres://db:5432?password=Secret@Tail9/x", "Tail9", `taken for the end of a user:password`},
		{"postgres://app:pw@db%40Tail9/app", "Tail9", `a host holds an "@"`},
		{"host=app:Secret@Tail9 port=5432", "Tail9", `a host holds an "@"`},
	} {
		_, err := Parse(tc.dsn, time.Second)
		var dsnErr *DSNError
		if !errors.As(err, &dsnErr) {
			t.Errorf("Parse(%q) = %v, want a *DSNError", tc.dsn, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "%40") {
			t.Errorf("Parse(%q): %q does not say %q and %%40", tc.dsn, err, tc.says)
		}
		if strings.Contains(err.Error(), tc.tail) || !strings.Contains(tc.dsn, "%40Tail9") && strings.Contains(Redact(tc.dsn), tc.tail) {
			t.Errorf("Parse(%q) shows %q: %v; Redact: %s", tc.dsn, tc.tail, err, Redact(tc.dsn))
		}
	}
	// What the checks must leave alone: an "@" in a query value (a user
	// name like me@corp, a password), an IPv6 host, several hosts.
	for _, dsn := range []string{
		"postgres://app:pw@db/app?user=me@corp",
		"postgres://db/app?user=me@corp&password=a@b/c",
		"postgres://app:p%40ss%2Fw@[::1]:5432/app",
		"postgres://app:pw@h1:5432,h2:5433/app?target_session_attrs=primary",
		"postgres://app:a?b:c#d&e@db/app",
		"host=db user=me@corp password='p@ss w/rd'",
		"host=db application_name=https://me@x/y?a@b password=pw",
	} {
		if _, err := Parse(dsn, time.Second); err != nil {
			t.Errorf("Parse(%q) refused a DSN that means what it says: %v", dsn, err)
		}
	}
}

func TestHasPassword(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://app:pw@db/app":                        true,
		"postgres://app@db/app?password=pw":               true,
		"postgres://app@db/app?sslpassword=pw":            true,
		"host=db password=pw":                             true,
		"host=db password='two words'":                    true,
		"postgres://app:@db/app":                          false,
		"postgres://app@db/app?passfile=/tmp/pgpass":      false,
		"host=db user=app passfile=/tmp/pgpass":           false,
		"":                                                false,
		"postgres://app:p@ss@db/app":                      true,
		"POSTGRES://app:pw@db/app":                        true,
		"host=db application_name=https://x/ password=pw": true,
	} {
		if got := HasPassword(dsn); got != want {
			t.Errorf("HasPassword(%q) = %v, want %v", dsn, got, want)
		}
	}
}

// TestPasswordShortcutMissesNothing: the DSNs that mayHoldPassword clears
// have no password span by the full rules, however their pieces combine.
func TestPasswordShortcutMissesNothing(t *testing.T) {
	pieces := []string{"postgres://", "postgresql://", "host=", "db", " ", "user=", "app", ":", "/", "?", "&",
		"=", "'", `\`, "pass", "word", "PASSWORD", "ssl", "passfile=", "x", "\t", "#", "+", "@", "%77", "ſ", "K"}
	rng := rand.New(rand.NewPCG(1, 2))
	cleared := 0
	for range 200000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		dsn := b.String()
		if mayHoldPassword(dsn) {
			continue
		}
		cleared++
		if spans := allPasswordSpans(dsn); len(spans) > 0 {
			t.Fatalf("%q: cleared by the shortcut, but the full rules find %v", dsn, spans)
		}
	}
	if cleared < 1000 {
		t.Fatalf("only %d DSNs cleared: the test no longer exercises the shortcut", cleared)
	}
}

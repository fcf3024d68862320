package dbconn

import (
	"strings"
	"testing"
	"time"
)

func TestSecretsAndRedact(t *testing.T) {
	cases := []struct {
		dsn  string
		want string
	}{
		{"postgres://app:pa55word@db:5432/app", "postgres://app:xxxxx@db:5432/app"},
		{"postgresql://app:p%40ss@db/app?sslmode=require", "postgresql://app:xxxxx@db/app?sslmode=require"},
		{"postgres://db/app?user=app&password=qu3ry-secret", "postgres://db/app?user=app&password=xxxxx"},
		{"host=db user=app password=kv-secret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='quoted secret' dbname=app", "host=db password=xxxxx dbname=app"},
		{"host=db user=app", "host=db user=app"},
	}
	for _, tc := range cases {
		if got := Redact(tc.dsn); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}

func TestParseErrorsNeverShowThePassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://user:hunter2-secret@127.0.0.1:notaport/db",
		"postgres://user:hunter2-secret@[::1/db",
		"host=db password=hunter2-secret port=abc",
		"host='db password=hunter2-secret",
		"postgres://user:hunter2-secret@db/app?sslmode=bogus",
		"postgres://user:hunter2%2Dsecret@db:99999/app",
	} {
		_, err := Parse(dsn, time.Second)
		if err == nil {
			t.Errorf("Parse(%q) accepted a malformed DSN", dsn)
			continue
		}
		if _, ok := err.(*DSNError); !ok {
			t.Errorf("Parse(%q): %T, want *DSNError", dsn, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q) error shows the password: %v", dsn, err)
		}
	}
}

// TestParseErrorsNeverShowPasswordFragments: a password with a space (in
// key=value form) or an "&" (in a URL) that was not quoted or escaped splits
// into words, and pgx quotes the word that lacks its "=". That word is the
// password's tail: the error must say how to write the value, not show it.
func TestParseErrorsNeverShowPasswordFragments(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"host=db password=hunter2 tail-Of-Secret port=5432", "must be quoted"},
		{"host=db password=hunter2 tail-Of-Secret", "must be quoted"},
		{"postgres://u@db/app?password=hunter2&tail-Of-Secret&sslmode=disable", `escape "&" as %26`},
		{"postgres://u@db/app?password=hunter2&tail-Of-Secret=x=y", `escape "&" as %26`},
	} {
		_, err := Parse(tc.dsn, time.Second)
		if err == nil {
			t.Errorf("Parse(%q) accepted a malformed DSN", tc.dsn)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "tail-Of-Secret") {
			t.Errorf("Parse(%q) error shows the password: %v", tc.dsn, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) error %q does not say %q", tc.dsn, err, tc.want)
		}
	}
}

func TestParseIsPoolerSafe(t *testing.T) {
	cfg, err := Parse("postgres://u@h:1/d", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StatementCacheCapacity != 0 || cfg.DescriptionCacheCapacity != 0 || cfg.ConnectTimeout != 3*time.Second {
		t.Errorf("config not pooler-safe: cache %d/%d, timeout %s", cfg.StatementCacheCapacity, cfg.DescriptionCacheCapacity, cfg.ConnectTimeout)
	}
	cfg, err = Parse("postgres://u@h:1/d?connect_timeout=9", 3*time.Second)
	if err != nil || cfg.ConnectTimeout != 9*time.Second {
		t.Errorf("an explicit connect_timeout must win: %v %v", cfg.ConnectTimeout, err)
	}
}

// FuzzParse feeds arbitrary DSN text around a known password: Parse must not
// panic, and no error it returns may contain the password.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"db:5432/app", "[::1]:5432/app?sslmode=disable", "db:notaport/app", "h1,h2:5433/app?target_session_attrs=primary",
		"host=db port=5432", "host='db", "%zz", "@@@", "db/app?password=", "?host=/tmp&port=5432",
	} {
		f.Add(seed)
	}
	// tail is the second half of a password that was not quoted (a space in
	// key=value form) or escaped (an "&" in a URL): pgx takes it for a word
	// of its own, but it is still the password.
	const pw, tail = "Zq9xPw7KkSecret", "Tail0fSecretW9"
	f.Fuzz(func(t *testing.T, s string) {
		for _, dsn := range []string{
			"postgres://u:" + pw + "@" + s,
			"password=" + pw + " " + s,
			s + " password=" + pw,
			"postgres://" + s + "?password=" + pw,
			"password=" + pw + " " + tail + " " + s,
			"postgres://" + s + "?password=" + pw + "&" + tail,
			"postgres://u@db/app?password=" + pw + "&" + tail + "&" + s,
		} {
			_, err := Parse(dsn, time.Second)
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("Parse(%q) error shows the password: %v", dsn, err)
			}
			if err != nil && strings.Contains(err.Error(), tail) && !strings.Contains(s, tail) {
				t.Fatalf("Parse(%q) error shows the password's unquoted tail: %v", dsn, err)
			}
			if strings.Contains(Redact(dsn), pw) {
				t.Fatalf("Redact(%q) = %q still shows the password", dsn, Redact(dsn))
			}
		}
	})
}

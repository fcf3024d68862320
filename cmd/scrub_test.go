package cmd

// No password, however odd: passwords with the characters that DSN syntax
// reserves (@ : / % ? # & quotes, spaces, backslashes), written as users
// write them, escaped or not, must never show in any output, error or log
// line, in whole or in part.

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/pwtest"
)

// noFragments fails when out shows any piece of secret that the rest of the
// DSN does not also contain.
func noFragments(t *testing.T, what, out, secret, rest string) {
	t.Helper()
	if f := pwtest.Fragments(out, secret, rest); len(f) > 0 {
		t.Errorf("%s shows pieces %q of the password %q:\n%s", what, f, secret, out)
	}
}

// fieldPasswords are the two passwords of the field report: libpq (and pgx)
// split a URL's userinfo at its first "@", so the rest of the password
// became the host, and the error showed it.
var fieldPasswords = []string{"p@ssw0rd", "Zq9S3cr3t@p w0rd"}

// TestPasswordWithAnUnescapedAt reproduces the field report: every command
// refuses such a DSN before connecting (exit 2, an input error), says that
// an "@" in a password is written %40, and shows no part of the password,
// whichever way the DSN came.
func TestPasswordWithAnUnescapedAt(t *testing.T) {
	keysFile := hostileKeys(t)
	port := closedPort(t)
	for _, pw := range fieldPasswords {
		dsn := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app", pw, port)
		rest := strings.Replace(dsn, pw, "", 1)
		want := func(source string) expect {
			return expect{code: ExitUsage, says: []string{"malformed DSN", `"@"`, "%40", "the DSN came from " + source}}
		}
		t.Run(pw, func(t *testing.T) {
			for _, command := range append(dsnCommands, []string{"who", "--all"}) {
				args := append([]string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile}, command...)
				res := runBounded(t, nil, args...)
				want("--dsn").check(t, args, res)
				noFragments(t, "leasectl "+strings.Join(command, " "), res.Stdout+res.Stderr, pw, rest)
			}
			for _, env := range []string{"LEASECTL_DSN", "DATABASE_URL"} {
				args := []string{"--timeout", "1s", "--keys", keysFile, "who", "--all"}
				res := runBounded(t, map[string]string{env: dsn}, args...)
				want("$"+env).check(t, args, res)
				noFragments(t, "$"+env, res.Stdout+res.Stderr, pw, rest)
			}
			args := []string{"--timeout", "1s", "--keys", keysFile, "probe", dsn}
			res := runBounded(t, nil, args...)
			want("the command line argument").check(t, args, res)
			noFragments(t, "probe DSN", res.Stdout+res.Stderr, pw, rest)

			// run refuses it at once, as every command does: no retry
			// loop logging the host part at every attempt.
			args = []string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile, "run", "--role", "poller", "--retry-interval", "50ms", "--", "true"}
			res = runBounded(t, nil, args...)
			want("--dsn").check(t, args, res)
			if strings.Contains(res.Stderr, "cannot connect") {
				t.Errorf("leasectl run tried to connect:\n%s", res.Stderr)
			}
			noFragments(t, "leasectl run", res.Stdout+res.Stderr, pw, rest)
		})
	}
}

// TestPasswordWithAnUnescapedAtBinary runs the field report's command line
// with the built binary: exit 2, and not a piece of the password.
func TestPasswordWithAnUnescapedAtBinary(t *testing.T) {
	bin, _ := runBinaries(t)
	port := closedPort(t)
	for _, pw := range fieldPasswords {
		dsn := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app", pw, port)
		c := exec.Command(bin, "who", "--all", "--dsn", dsn)
		c.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		out, err := c.CombinedOutput()
		code := c.ProcessState.ExitCode()
		if code != ExitUsage {
			t.Errorf("leasectl who --all --dsn %q: exit %d (%v), want 2\n%s", dsn, code, err, out)
		}
		if !strings.Contains(string(out), "%40") {
			t.Errorf("leasectl who --all --dsn %q does not say to write \"@\" as %%40:\n%s", dsn, out)
		}
		noFragments(t, "leasectl who --all", string(out), pw, strings.Replace(dsn, pw, "", 1))
	}
}

// TestRunRetryLogsShowNoPassword: a DSN with an odd password that parses
// (escaped in a URL, quoted in key=value form) reaches run's retry loop;
// none of its log lines shows a piece of the password, escaped or not.
func TestRunRetryLogsShowNoPassword(t *testing.T) {
	keysFile := hostileKeys(t)
	port := closedPort(t)
	for _, pw := range fieldPasswords {
		escaped := pwtest.URLEscape(pw)
		for _, dsn := range []string{
			fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/app?sslmode=disable", escaped, port),
			fmt.Sprintf("host=127.0.0.1 port=%d user=app password='%s' sslmode=disable", port, pwtest.KVEscape(pw)),
		} {
			for _, format := range []string{"text", "json"} {
				args := []string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile, "run", "--role", "poller", "--retry-interval", "50ms", "--log-format", format, "--", "true"}
				out := runKeepsTrying(t, args, "cannot connect; retrying", "connection refused")
				rest := strings.Replace(strings.Replace(dsn, escaped, "", 1), pwtest.KVEscape(pw), "", 1)
				noFragments(t, "leasectl run's log", out, pw, rest)
				noFragments(t, "leasectl run's log", out, escaped, rest)
			}
		}
	}
}

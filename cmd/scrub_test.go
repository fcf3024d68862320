package cmd

// No password, however odd: passwords with the characters that DSN syntax
// reserves (@ : / % ? # & quotes, spaces, backslashes), written as users
// write them, escaped or not, must never show in any output, error or log
// line, in whole or in part.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/test/pgtest"
	"github.com/leasectl/leasectl/test/pwtest"
)

// noFragments fails when out shows any piece of secret that rest (the DSN
// without the password, and what leasectl says for a password of the same
// syntax, see pwtest.Reference) does not also contain.
func noFragments(t *testing.T, what, out, secret, rest string) {
	t.Helper()
	if f := pwtest.Fragments(out, secret, rest); len(f) > 0 {
		t.Errorf("%s shows pieces %q of the password %q:\n%s", what, f, secret, out)
	}
}

// noLeak runs invoke with dsn, which holds pw, and with the same DSN holding
// pwtest.Reference(pw) instead, and fails when the first shows a piece of
// pw that neither the rest of the DSN nor the reference's output holds. It
// returns what the first showed.
func noLeak(t *testing.T, what, dsn, pw string, invoke func(dsn string) cliResult) cliResult {
	t.Helper()
	res := invoke(dsn)
	ref := invoke(strings.Replace(dsn, pw, pwtest.Reference(pw), 1))
	noFragments(t, what, res.Stdout+res.Stderr, pw, strings.Replace(dsn, pw, "", 1)+"\n"+ref.Stdout+ref.Stderr)
	return res
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
		want := func(source string) expect {
			return expect{code: ExitUsage, says: []string{"malformed DSN", `the host part holds an "@"`, "%40", "the DSN came from " + source}}
		}
		t.Run(pw, func(t *testing.T) {
			for _, command := range append(dsnCommands, []string{"who", "--all"}) {
				var args []string
				res := noLeak(t, "leasectl "+strings.Join(command, " "), dsn, pw, func(dsn string) cliResult {
					args = append([]string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile}, command...)
					return runBounded(t, nil, args...)
				})
				want("--dsn").check(t, args, res)
			}
			for _, env := range []string{"LEASECTL_DSN", "DATABASE_URL"} {
				args := []string{"--timeout", "1s", "--keys", keysFile, "who", "--all"}
				res := noLeak(t, "$"+env, dsn, pw, func(dsn string) cliResult {
					return runBounded(t, map[string]string{env: dsn}, args...)
				})
				want("$"+env).check(t, args, res)
			}
			var args []string
			res := noLeak(t, "probe DSN", dsn, pw, func(dsn string) cliResult {
				args = []string{"--timeout", "1s", "--keys", keysFile, "probe", dsn}
				return runBounded(t, nil, args...)
			})
			want("the command line argument").check(t, args, res)

			// run refuses it at once, as every command does: no retry
			// loop logging the host part at every attempt.
			res = noLeak(t, "leasectl run", dsn, pw, func(dsn string) cliResult {
				args = []string{"--timeout", "1s", "--dsn", dsn, "--keys", keysFile, "run", "--role", "poller", "--retry-interval", "50ms", "--", "true"}
				return runBounded(t, nil, args...)
			})
			want("--dsn").check(t, args, res)
			if strings.Contains(res.Stderr, "cannot connect") {
				t.Errorf("leasectl run tried to connect:\n%s", res.Stderr)
			}
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
		res := noLeak(t, "leasectl who --all", dsn, pw, func(dsn string) cliResult {
			c := exec.Command(bin, "who", "--all", "--dsn", dsn)
			c.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
			var stdout, stderr strings.Builder
			c.Stdout, c.Stderr = &stdout, &stderr
			_ = c.Run()
			return cliResult{Stdout: stdout.String(), Stderr: stderr.String(), Code: c.ProcessState.ExitCode()}
		})
		if res.Code != ExitUsage || !strings.Contains(res.Stderr, "%40") {
			t.Errorf("leasectl who --all --dsn %q: exit %d, want 2 saying to write \"@\" as %%40\n%s", dsn, res.Code, res.Stderr)
		}
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
				rest := strings.Replace(strings.Replace(dsn, escaped, "", 1), pwtest.KVEscape(pw), "", 1) + "\n" + refRunLog
				noFragments(t, "leasectl run's log", out, pw, rest)
				noFragments(t, "leasectl run's log", out, escaped, rest)
				if n := strings.Count(out, "holds a password"); n != 1 {
					t.Errorf("leasectl run logged the warning about the password on the command line %d times, want once:\n%s", n, out)
				}
			}
		}
	}
}

// refRunLog is what leasectl run's log says whatever the password: its own
// words (the field passwords share "ssw" with "password").
const refRunLog = passwordOnCommandLine + " cannot connect; retrying connection refused (is the server running? check the host and port in the DSN)"

// TestPasswordOnTheCommandLineWarns: a DSN with a password given as --dsn,
// as probe's argument or as verify --pooler-dsn is visible in ps; leasectl
// warns once, on stderr (a log record for run), and stdout stays what it
// was (-o json parses). A DSN from the environment, or one without a
// password, gets no warning.
func TestPasswordOnTheCommandLineWarns(t *testing.T) {
	keysFile := hostileKeys(t)
	pw, err := needLab(t).Password()
	if err != nil {
		t.Fatal(err)
	}
	withPW := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", needLab(t).User, pwtest.URLEscape(pw), needLab(t).Primary.Port)
	kvPW := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password='%s' dbname=postgres sslmode=disable", needLab(t).Primary.Port, needLab(t).User, pwtest.KVEscape(pw))
	const warning = "warning: " + passwordOnCommandLine + "\n"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		warn bool
	}{
		{"--dsn, URL", nil, []string{"--dsn", withPW, "who", "--all", "-o", "json"}, true},
		{"--dsn, key=value", nil, []string{"--dsn", kvPW, "who", "--all", "-o", "json"}, true},
		{"probe's argument", nil, []string{"-o", "json", "probe", withPW}, true},
		{"verify --pooler-dsn", nil, []string{"--dsn", needLab(t).DirectDSN(), "verify", "--pooler-dsn", "postgres://app:" + hostilePW + "@127.0.0.1:notaport/app"}, true},
		{"$LEASECTL_DSN", map[string]string{"LEASECTL_DSN": withPW}, []string{"who", "--all", "-o", "json"}, false},
		{"$DATABASE_URL", map[string]string{"DATABASE_URL": kvPW}, []string{"who", "--all", "-o", "json"}, false},
		{"--dsn without a password", nil, []string{"--dsn", needLab(t).DirectDSN(), "who", "--all", "-o", "json"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--keys", keysFile}, tc.args...)
			res := runBounded(t, tc.env, args...)
			if got := strings.Count(res.Stderr, "holds a password"); tc.warn && got != 1 || !tc.warn && got != 0 {
				t.Errorf("leasectl %s: the warning shows %d times, want it %v\nstderr:\n%s", strings.Join(args, " "), got, tc.warn, res.Stderr)
			}
			if tc.warn && !strings.HasPrefix(res.Stderr, warning) {
				t.Errorf("leasectl %s: stderr does not start with the one-line warning %q:\n%s", strings.Join(args, " "), warning, res.Stderr)
			}
			if strings.Contains(res.Stdout+res.Stderr, pw) {
				t.Errorf("the password shows:\n%s%s", res.Stdout, res.Stderr)
			}
			if slices.Contains(tc.args, "json") {
				if res.Code != ExitOK && !tc.warn {
					t.Fatalf("exit %d\n%s", res.Code, res.Stderr)
				}
				if !json.Valid([]byte(res.Stdout)) {
					t.Errorf("stdout is not JSON:\n%s", res.Stdout)
				}
			}
		})
	}
}

// TestGeneratedPasswordsOnTheConnectPath writes generated passwords, made of
// the characters DSN syntax reserves, into every form of DSN (pwtest.Forms:
// URL and key=value, escaped as they must be and as typed), and runs
// leasectl who --all with each against a closed port and against the lab's
// server, first with a wrong password for the role, then with the right
// one. Correctly written DSNs give "connection refused" (3), "authentication
// failed" (3) and success (0); those written as typed are refused as
// malformed (2), fail to connect (3), or work when the password needs no
// escaping there (0). No output shows a piece of the password.
func TestGeneratedPasswordsOnTheConnectPath(t *testing.T) {
	keysFile := hostileKeys(t)
	const role = "scrub_generated"
	pgtest.Login(t, needLab(t), role, "initial-Pw-1")
	admin := pgtest.Conn(t, needLab(t).DirectDSN(), "scrub-admin")
	setPassword := func(pw string) {
		t.Helper()
		var stmt string
		if err := admin.QueryRow(context.Background(), "SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text)", role, pw).Scan(&stmt); err != nil {
			t.Fatal(err)
		}
		pgtest.Exec(t, admin, stmt)
	}
	closed := closedPort(t)
	who := func(dsn string) cliResult {
		return runCLI(t, nil, "--timeout", "5s", "--keys", keysFile, "--dsn", dsn, "who", "--all")
	}
	passwords := pwtest.Generate(2026, 60)
	checked := 0
	outcomes := map[string]int{}
	for _, pw := range passwords {
		for _, stage := range []string{"wrong", "right"} {
			if stage == "wrong" {
				setPassword(pw + "Q")
			} else {
				setPassword(pw)
			}
			for _, port := range []int{closed, needLab(t).Primary.Port} {
				if stage == "right" && port == closed {
					continue
				}
				refForms := pwtest.Forms(pwtest.Reference(pw), role, "127.0.0.1", port, "postgres")
				for i, f := range pwtest.Forms(pw, role, "127.0.0.1", port, "postgres") {
					res := who(f.DSN)
					ref := who(refForms[i].DSN)
					out := res.Stdout + res.Stderr
					rest := f.Rest() + "\n" + ref.Stdout + ref.Stderr
					noFragments(t, fmt.Sprintf("%s, %s password, port %d", f.Name, stage, port), out, pw, rest)
					noFragments(t, fmt.Sprintf("%s, %s password, port %d", f.Name, stage, port), out, f.Written, rest)
					if m := stackTrace.FindString(out); m != "" {
						t.Errorf("%s: a stack trace or panic (%q):\n%s", f.DSN, m, out)
					}
					var want int
					var says string
					switch {
					case !f.Correct:
						switch res.Code {
						case ExitOK, ExitUnavailable:
						case ExitUsage:
							says = "malformed DSN"
						default:
							t.Errorf("%s: %q: exit %d, want 0, 2 or 3\n%s", f.Name, f.DSN, res.Code, out)
						}
						want = res.Code
					case port == closed:
						want, says = ExitUnavailable, "connection refused"
					case stage == "wrong":
						want, says = ExitUnavailable, "authentication failed"
					default:
						want = ExitOK
					}
					if res.Code != want || !strings.Contains(out, says) {
						t.Errorf("%s, %s password, port %d: %q: exit %d, want %d saying %q\n%s", f.Name, stage, port, f.DSN, res.Code, want, says, out)
					}
					checked++
					outcomes[fmt.Sprintf("%s, %s password: exit %d", f.Name, stage, res.Code)]++
				}
			}
		}
	}
	t.Logf("%d passwords, %d invocations checked", len(passwords), checked)
	keys := slices.Sorted(maps.Keys(outcomes))
	for _, k := range keys {
		t.Logf("%4d × %s", outcomes[k], k)
	}
}

// TestTheWarningsAdviceWorks: the places the warning suggests for the
// password work with a DSN on the command line that has none: PGPASSWORD,
// and a pgpass file named by PGPASSFILE. pgx reads both from the process's
// environment, under any DSN.
func TestTheWarningsAdviceWorks(t *testing.T) {
	keysFile := hostileKeys(t)
	pw, err := needLab(t).Password()
	if err != nil {
		t.Fatal(err)
	}
	bare := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", needLab(t).User, needLab(t).Primary.Port)
	for name, env := range map[string][2]string{
		"PGPASSWORD": {"PGPASSWORD", pw},
		"PGPASSFILE": {"PGPASSFILE", needLab(t).PassFile},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("PGPASSFILE", "/nonexistent") // not ~/.pgpass
			t.Setenv(env[0], env[1])
			res := runCLI(t, nil, "--keys", keysFile, "--dsn", bare, "who", "--all")
			if res.Code != ExitOK || strings.Contains(res.Stderr, "Warning") {
				t.Errorf("--dsn without a password, the password in %s: exit %d, want 0 without a warning\n%s", name, res.Code, res.Stderr)
			}
		})
	}
}

// TestRunProgramInheritsTheEnvironment documents what leasectl run's
// program gets: leasectl's whole environment (LEASECTL_DSN, DATABASE_URL,
// PGPASSWORD and PGPASSFILE included, as they are), plus the LEASECTL_*
// variables of the lease; a DSN given with --dsn is not put into it.
// leasectl's own log shows none of those values.
func TestRunProgramInheritsTheEnvironment(t *testing.T) {
	f := newRunFixture(t, "poller", 9200091)
	pw, err := needLab(t).Password()
	if err != nil {
		t.Fatal(err)
	}
	envDSN := "postgres://env_user:Env-Dsn-Secret9@127.0.0.1:1/postgres"
	urlDSN := "postgres://url_user:Database-Url-Secret9@127.0.0.1:1/postgres"
	t.Setenv("LEASECTL_DSN", envDSN)
	t.Setenv("DATABASE_URL", urlDSN)
	t.Setenv("PGPASSWORD", pw)
	flagDSN := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&application_name=flag-dsn-marker", needLab(t).User, needLab(t).Primary.Port)
	res := runCLI(t, map[string]string{"LEASECTL_DSN": envDSN, "DATABASE_URL": urlDSN}, "--keys", f.keys, "--dsn", flagDSN, "run", "--role", "poller", "--", "env")
	if res.Code != ExitOK {
		t.Fatalf("exit %d\n%s", res.Code, res.Stderr)
	}
	for _, v := range []string{"LEASECTL_DSN=" + envDSN, "DATABASE_URL=" + urlDSN, "PGPASSWORD=" + pw, "LEASECTL_ROLE=poller", "LEASECTL_KEY=9200091", "LEASECTL_LEASE_FD=3"} {
		if !strings.Contains(res.Stdout, v+"\n") {
			t.Errorf("the program's environment lacks %s:\n%s", v, res.Stdout)
		}
	}
	if strings.Contains(res.Stdout, "flag-dsn-marker") {
		t.Errorf("the --dsn DSN is in the program's environment:\n%s", res.Stdout)
	}
	for _, secret := range []string{"Env-Dsn-Secret9", "Database-Url-Secret9", pw} {
		if strings.Contains(res.Stderr, secret) {
			t.Errorf("leasectl's log shows %q:\n%s", secret, res.Stderr)
		}
	}
}

// TestKeyValueOddQuoting: key=value DSNs whose password is quoted oddly or
// not at all, and a URL's user:password@ put into host=, are refused before
// connecting (exit 2), saying how to write them, without a piece of the
// password.
func TestKeyValueOddQuoting(t *testing.T) {
	keysFile := hostileKeys(t)
	port := closedPort(t)
	for _, tc := range []struct{ pw, dsn, says string }{
		{"Zq9S3cr3t'p w0rd", "host=127.0.0.1 port=%d user=app password='%s' dbname=app", "must be quoted: password='two words', with ' and \\ inside written \\' and \\\\"},
		{"Zq9S3cr3t p w0rd", "host=127.0.0.1 port=%d user=app password=%s dbname=app", "must be quoted"},
		{"Zq9S3cr3t p w0rd", `host=127.0.0.1 port=%d user=app password="%s" dbname=app`, "must be quoted"},
		{"'Zq9S3cr3t p w0rd", "host=127.0.0.1 port=%d user=app password=%s dbname=app", "unterminated quoted string"},
		{"Zq9S3cr3t@p-w0rd", "host=app:%[2]s@127.0.0.1 port=%[1]d dbname=app", `a host holds an "@"`},
	} {
		dsn := fmt.Sprintf(tc.dsn, port, tc.pw)
		var args []string
		res := noLeak(t, dsn, dsn, tc.pw, func(dsn string) cliResult {
			args = []string{"--timeout", "1s", "--keys", keysFile, "--dsn", dsn, "who", "--all"}
			return runBounded(t, nil, args...)
		})
		expect{code: ExitUsage, says: []string{"malformed DSN", tc.says}}.check(t, args, res)
	}
}

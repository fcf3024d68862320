package cmd

import (
	"strconv"
	"strings"
	"testing"
)

// TestProbeSaysTargetSessionAttrsRefusedTheStandby: a DSN with
// target_session_attrs=read-write or primary that names only the standby,
// sslmode left to its default (prefer: pgx tries TLS, which the lab's
// servers decline, then plain text), fails to connect (exit 3) because the
// server is a standby, and says so, with what to do: not that the server
// refused TLS. With the standby listed twice, the same.
func TestProbeSaysTargetSessionAttrsRefusedTheStandby(t *testing.T) {
	l := needLab(t)
	sb := "127.0.0.1:" + strconv.Itoa(l.Standby.Port)
	base := strings.Replace(l.StandbyDSN(), "sslmode=disable&", "", 1)
	if strings.Contains(base, "sslmode") {
		t.Fatalf("the standby's DSN sets sslmode elsewhere: %s", base)
	}
	for _, tc := range []struct{ name, dsn, says string }{
		{"read-write", base + "&target_session_attrs=read-write",
			"error: connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=read-write refuses it (point the DSN at the primary, or list the primary among its hosts)\n"},
		{"primary", base + "&target_session_attrs=primary",
			"error: connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=primary refuses it (point the DSN at the primary, or list the primary among its hosts)\n"},
		{"the standby twice", strings.Replace(base, sb, sb+","+sb, 1) + "&target_session_attrs=primary",
			"error: connect to " + sb + ": the server is a standby (in recovery), and target_session_attrs=primary refuses it (point the DSN at the primary, or list the primary among its hosts)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, pw := dsnWithPassword(t, tc.dsn)
			if !strings.Contains(dsn, pw) {
				t.Fatalf("no password in the DSN: %s", dsn)
			}
			res := runCLI(t, nil, "probe", dsn)
			// The line before it warns of the password on the command line.
			if res.Code != ExitUnavailable || !strings.HasSuffix(res.Stderr, "\n"+tc.says) || strings.Count(res.Stderr, "error:") != 1 || strings.Contains(res.Stderr, "TLS") {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant:\n%s", res.Code, ExitUnavailable, res.Stderr, tc.says)
			}
			assertNoSecret(t, res, pw)
			t.Logf("exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
		})
	}
}

package cmd

import (
	"strings"
	"testing"

	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
)

// TestResolveRole: the one resolution of ROLE and KEY arguments that who,
// failover, verify and run share, message by message. No database.
func TestResolveRole(t *testing.T) {
	f := &keys.File{Path: "keys.yaml", Roles: []keys.Entry{{Name: "poller", Key: 10}, {Name: "scheduler", Key: 20}}}
	empty := &keys.File{Path: "keys.yaml"}
	for _, tc := range []struct {
		f    *keys.File
		arg  string
		how  keyArgs
		want roleKey
		code int    // the exit code of the error, 0 for none
		says string // in the error
	}{
		// a role is a role, whatever the command takes besides
		{f, "poller", keysAsArgs, roleKey{"poller", locks.BigintKey(10)}, 0, ""},
		{f, "poller", keysByFlag, roleKey{"poller", locks.BigintKey(10)}, 0, ""},
		{f, "scheduler", rolesOnly, roleKey{"scheduler", locks.BigintKey(20)}, 0, ""},
		// who takes KEYs, and names the role of one
		{f, "20", keysAsArgs, roleKey{"scheduler", locks.BigintKey(20)}, 0, ""},
		{f, "0x1e", keysAsArgs, roleKey{"", locks.BigintKey(30)}, 0, ""},
		{f, "-1", keysAsArgs, roleKey{"", locks.BigintKey(-1)}, 0, ""},
		{f, "0,10", keysAsArgs, roleKey{"", locks.PairOf(0, 10)}, 0, ""},
		{f, "99999999999999999999", keysAsArgs, roleKey{}, ExitUsage, `invalid KEY: "99999999999999999999" is outside the range of a 64-bit key`},
		{f, "pollr", keysAsArgs, roleKey{}, ExitUsage, `unknown role "pollr": keys.yaml has poller, scheduler (or give a numeric key: k or k1,k2)`},
		{empty, "pollr", keysAsArgs, roleKey{}, ExitUsage, `unknown role "pollr": keys.yaml has no roles; give a numeric key (k or k1,k2) instead`},
		// failover and run take a bare key only through --key
		{f, "30", keysByFlag, roleKey{}, ExitUsage, `"30" is not a role of keys.yaml: to fail over a bare key, use --key 30`},
		{f, "99999999999999999999", keysByFlag, roleKey{}, ExitUsage, `"99999999999999999999" is not a role of keys.yaml, nor a valid key for --key: "99999999999999999999" is outside the range`},
		{f, "pollr", keysByFlag, roleKey{}, ExitUsage, `unknown role "pollr": keys.yaml has poller, scheduler (or give a bare key with --key N)`},
		{empty, "pollr", keysByFlag, roleKey{}, ExitUsage, `unknown role "pollr": keys.yaml has no roles; give a bare key with --key N instead`},
		// verify checks roles only
		{f, "10", rolesOnly, roleKey{}, ExitUsage, `unknown role "10": keys.yaml has poller, scheduler`},
		{f, "", rolesOnly, roleKey{}, ExitUsage, `unknown role "": keys.yaml has poller, scheduler`},
		{empty, "pollr", rolesOnly, roleKey{}, ExitUsage, `unknown role "pollr": keys.yaml has no roles`},
	} {
		got, err := resolveRole(tc.f, tc.arg, tc.how, "fail over")
		if code := ExitCode(err); code != tc.code || (err != nil && !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%q (%d): exit %d, %v; want %d and %q", tc.arg, tc.how, code, err, tc.code, tc.says)
		}
		if err == nil && got != tc.want {
			t.Errorf("%q (%d): %+v, want %+v", tc.arg, tc.how, got, tc.want)
		}
	}
}

package cmd

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
)

// TestFlagsParseIntoOptions: each command's flags and arguments arrive in
// its options as the user meant them, defaults included; the run function
// is a stub, so nothing connects.
func TestFlagsParseIntoOptions(t *testing.T) {
	key := func(k locks.Key) *locks.Key { return &k }
	id := func(k int64) *int64 { return &k }
	for _, tc := range []struct {
		args  []string
		build func(app *App, got *any) *cobra.Command
		want  any
	}{
		{[]string{"who", "poller", "42", "--stale", "10s", "--watch=5s", "--all"},
			func(app *App, got *any) *cobra.Command {
				return newWhoCmd(app, func(o *whoOptions) error { *got = *o; return nil })
			},
			whoOptions{Args: []string{"poller", "42"}, All: true, Stale: 10 * time.Second, Watch: 5 * time.Second, WatchGiven: true}},
		{[]string{"who", "-w", "--", "-1"},
			func(app *App, got *any) *cobra.Command {
				return newWhoCmd(app, func(o *whoOptions) error { *got = *o; return nil })
			},
			whoOptions{Args: []string{"-1"}, Stale: 45 * time.Second, Watch: defaultWatchInterval, WatchGiven: true}},
		{[]string{"who", "--check"},
			func(app *App, got *any) *cobra.Command {
				return newWhoCmd(app, func(o *whoOptions) error { *got = *o; return nil })
			},
			whoOptions{Args: []string{}, Stale: 45 * time.Second, Check: true}},
		{[]string{"failover", "--key", "0x10", "--yes", "--wait", "30s"},
			func(app *App, got *any) *cobra.Command {
				return newFailoverCmd(app, func(o *failoverOptions) error { *got = *o; return nil })
			},
			failoverOptions{Key: key(locks.BigintKey(16)), Yes: true, Wait: 30 * time.Second}},
		{[]string{"failover", "poller", "--force"},
			func(app *App, got *any) *cobra.Command {
				return newFailoverCmd(app, func(o *failoverOptions) error { *got = *o; return nil })
			},
			failoverOptions{Role: "poller", Force: true, Wait: 15 * time.Second}},
		{[]string{"failover", "--key", "1,2"},
			func(app *App, got *any) *cobra.Command {
				return newFailoverCmd(app, func(o *failoverOptions) error { *got = *o; return nil })
			},
			failoverOptions{Key: key(locks.PairOf(1, 2)), Wait: 15 * time.Second}},
		{[]string{"verify", "poller", "--within", "3s", "--failover", "--yes", "--pooler-dsn", "postgres://pool"},
			func(app *App, got *any) *cobra.Command {
				return newVerifyCmd(app, func(o *verifyOptions) error { *got = *o; return nil })
			},
			verifyOptions{Roles: []string{"poller"}, Failover: true, Yes: true, Within: 3 * time.Second, PoolerDSN: "postgres://pool", Stale: 45 * time.Second}},
		{[]string{"--timeout", "7s", "run", "--key", "5", "--grace", "2s", "./worker", "--batch", "10"},
			func(app *App, got *any) *cobra.Command {
				return newRunCmd(app, func(o *runOptions) error { *got = *o; return nil })
			},
			runOptions{Key: id(5), Grace: 2 * time.Second, RetryInterval: 5 * time.Second, HeartbeatInterval: 15 * time.Second,
				HeartbeatTimeout: 7 * time.Second, Keep: 1000, LogFormat: "text", Command: []string{"./worker", "--batch", "10"}}},
		{[]string{"run", "--role", "poller", "-o", "json", "--heartbeat-timeout", "1s", "--", "./worker"},
			func(app *App, got *any) *cobra.Command {
				return newRunCmd(app, func(o *runOptions) error { *got = *o; return nil })
			},
			runOptions{Role: "poller", Grace: 10 * time.Second, RetryInterval: 5 * time.Second, HeartbeatInterval: 15 * time.Second,
				HeartbeatTimeout: time.Second, Keep: 1000, LogFormat: "json", Command: []string{"./worker"}}},
		{[]string{"probe", "--probe-key", "0x10", "--strict", "--heartbeat", "3s", "postgres://x"},
			func(app *App, got *any) *cobra.Command {
				return newProbeCmd(app, func(o *probeOptions) error { *got = *o; return nil })
			},
			probeOptions{DSNArg: "postgres://x", Key: 16, Strict: true, Contenders: 1, Rounds: 2, Heartbeat: 3 * time.Second, HBTimeout: 5 * time.Second}},
		{[]string{"keys", "lint", "deploy/keys.yaml", "-o", "github-actions"},
			func(app *App, got *any) *cobra.Command {
				return newKeysLintCmd(app, func(o *keysLintOptions) error { *got = *o; return nil })
			},
			keysLintOptions{File: "deploy/keys.yaml", Format: "github-actions"}},
		{[]string{"--keys", "k.yaml", "keys", "diff", "--format", "json", "--base", "v1.0.0"},
			func(app *App, got *any) *cobra.Command {
				return newKeysDiffCmd(app, func(o *keysDiffOptions) error { *got = *o; return nil })
			},
			keysDiffOptions{Base: "v1.0.0", Format: "json"}},
		{[]string{"lab", "up", "--standby", "--pooler", "tx1=transaction:1", "--dir", "/tmp/lab-x"},
			func(app *App, got *any) *cobra.Command {
				return newLabCmd(app, func(o *labOptions) error { *got = *o; return nil })
			},
			labOptions{Dir: "/tmp/lab-x", Standby: true, Poolers: []string{"tx1=transaction:1"}, Shell: "sh", Op: "up"}},
		{[]string{"lab", "revive", "node2", "--dir", "/tmp/lab-x"},
			func(app *App, got *any) *cobra.Command {
				return newLabCmd(app, func(o *labOptions) error { *got = *o; return nil })
			},
			labOptions{Dir: "/tmp/lab-x", Shell: "sh", Node: "node2", Op: "revive"}},
	} {
		var got any
		res := runStubbed(t, nil, func(app *App) []*cobra.Command { return []*cobra.Command{tc.build(app, &got)} }, tc.args...)
		if res.Code != ExitOK || got == nil {
			t.Errorf("leasectl %q: exit %d, ran: %v\n%s", tc.args, res.Code, got != nil, res.Stderr)
			continue
		}
		if g, w := comparable(got), comparable(tc.want); !reflect.DeepEqual(g, w) {
			t.Errorf("leasectl %q:\n got %+v\nwant %+v", tc.args, g, w)
		}
	}
}

// comparable drops what options hold besides the parsed values: the App
// and the flag's own state.
func comparable(o any) any {
	switch o := o.(type) {
	case whoOptions:
		o.app = nil
		return o
	case failoverOptions:
		o.app, o.keyFlag = nil, keyFlag{}
		return o
	case verifyOptions:
		o.app = nil
		return o
	case runOptions:
		o.app, o.keyFlag = nil, keyFlag{}
		return o
	case probeOptions:
		o.app, o.keyFlag = nil, keyFlag{}
		return o
	case keysLintOptions:
		o.app = nil
		return o
	case keysDiffOptions:
		o.app = nil
		return o
	case labOptions:
		o.app = nil
		return o
	}
	return o
}

//go:build linux

package schedule

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/chaos"
	"github.com/leasectl/leasectl/test/pgtest"
)

// The bounded form (a fixed seed, 2 minutes) is what `go test ./...` runs;
// `make chaos-schedule SEED=N DURATION=D` passes its own.
var (
	seedFlag     = flag.Int64("seed", 1, "the schedule's seed: the same seed draws the same faults, targets and delays")
	durationFlag = flag.Duration("duration", 2*time.Minute, "how long the schedule injects faults, before its 20 s of calm")
	historyFlag  = flag.String("history", "", "write the recorded history to this file, as JSON (go run ./test/schedule/recheck FILE checks it again)")
)

// testLab starts only when the schedule runs, so that the checker's own
// tests need no database. The lab server records commit timestamps: the
// checker orders each role's writes by them.
var testLab *pgtest.Lazy

// ns is the network namespace the partitioned replica lives in, made
// before the lab so that the primary can listen on its host address;
// nsErr says why there is none (not root, no ip or nft).
var (
	ns    *chaos.Netns
	nsErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	settings := map[string]string{"track_commit_timestamp": "on"}
	ns, nsErr = chaos.NewNetns()
	if ns != nil {
		settings["listen_addresses"] = "'127.0.0.1," + ns.HostAddr + "'"
	}
	testLab = pgtest.NewLazy(lab.Options{
		// server_login_retry: PgBouncer waits this long after a failed
		// server login (15 s by default) before it tries again, and its
		// clients wait with it; after a restart that wait, not the
		// lease, would be the workers' leaderless time.
		Poolers: []lab.PoolerSpec{{Name: "transaction", Mode: lab.Transaction, PoolSize: 20,
			Settings: map[string]string{"server_login_retry": strconv.Itoa(int(fleetTiming.PoolerRetry.Seconds()))}}},
		Settings: settings,
		HBA:      []string{chaos.HBA},
	})
	code := pgtest.RunMainLazy(m, testLab)
	if ns != nil {
		if err := ns.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "remove the network namespace:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

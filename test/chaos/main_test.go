//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
)

// full selects the full suite; without it the tests run the bounded version
// that `go test ./...` and CI run.
var full = flag.Bool("full", false, "run the full fault suite (200 SIGKILLs, 50 terminations, 3 restarts, 3 partitions with default settings) instead of the bounded one")

// testLab is the suite's own lab: a primary and PgBouncer in transaction
// and in session mode. pg_hba admits the partition's namespace; the primary listens there
// only while a test needs it. The HA failover starts a lab of its own, with
// a standby to promote.
var testLab *lab.Lab

// The test binary runs itself inside the network namespace as a client:
// with dialEnv it connects to that TCP address and exits 0, or 1 when it
// cannot (TestNetns); with holdEnv it holds a session on that DSN (see
// holdSession, TestDeadPeerTime).
const (
	dialEnv       = "CHAOS_TEST_DIAL"
	holdEnv       = "CHAOS_TEST_HOLD_DSN"
	keepalivesEnv = "CHAOS_TEST_KEEPALIVES"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
	if dsn := os.Getenv(holdEnv); dsn != "" {
		if err := holdSession(dsn, strings.Split(os.Getenv(keepalivesEnv), ",")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(pgtest.RunMain(m, lab.Options{
		Poolers: []lab.PoolerSpec{
			{Name: "transaction", Mode: lab.Transaction, PoolSize: 20},
			{Name: "session", Mode: lab.Session, PoolSize: 20},
			// Reloaded to transaction mode by the pooler-reload scenario.
			{Name: "reload", Mode: lab.Session, PoolSize: 20},
		},
		HBA: []string{HBA},
	}, &testLab))
}

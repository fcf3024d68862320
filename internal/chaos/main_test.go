package chaos

import (
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/leasectl/leasectl/lab"
)

// full selects the full suite; without it the tests run the bounded version
// that `go test ./...` and CI run.
var full = flag.Bool("full", false, "run the full fault suite (200 SIGKILLs, 50 terminations, 3 restarts, 3 partitions with default settings) instead of the bounded one")

// testLab is the suite's own lab: a primary, a streaming standby (for the
// HA failover, which promotes it: the suite runs once per test binary) and
// PgBouncer in transaction mode. pg_hba admits the partition's namespace;
// the primary listens there only while the partition scenario runs.
var testLab *lab.Lab

// dialEnv makes the test binary a TCP client (see TestNetns): it connects
// to the address in this variable and exits 0, or 1 when it cannot.
const dialEnv = "CHAOS_TEST_DIAL"

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
	os.Exit(lab.RunMain(m, lab.Options{
		Standby: true,
		Poolers: []lab.PoolerSpec{{Name: "transaction", Mode: lab.Transaction, PoolSize: 20}},
		HBA:     []string{HBA},
	}, &testLab))
}

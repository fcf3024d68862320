package supervisor_test

import (
	"os"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/supervisor"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// testLab is shared by the package's tests: a primary.
var (
	testLab *lab.Lab
	binDir  string
)

func TestMain(m *testing.M) {
	if supervisor.IsObituary() {
		// TestObituary... started this binary as an obituary.
		os.Exit(supervisor.ServeObituary())
	}
	var err error
	if binDir, err = os.MkdirTemp("", "supervisor-test-bin-"); err != nil {
		panic(err)
	}
	code := pgtest.RunMain(m, lab.Options{}, &testLab)
	os.RemoveAll(binDir)
	os.Exit(code)
}

var witness leasetest.WitnessBuild

// witnessBin builds the witness program once per test binary.
func witnessBin(t *testing.T) string { return witness.Get(t, binDir) }

// keyIsFree reports whether another session could take key now.
func keyIsFree(t *testing.T, key int64) bool {
	t.Helper()
	return leasetest.KeyFree(t, testLab.DirectDSN(), key)
}

// baseConfig is a lease on key with fast retries and the real preflight
// (the probe).
func baseConfig(key int64) lease.Config {
	return lease.Config{
		Role: "test", Key: key, DSN: testLab.DirectDSN(),
		RetryInterval: 200 * time.Millisecond, HeartbeatInterval: time.Hour, HeartbeatTimeout: 5 * time.Second,
	}
}

package lease_test

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/leasetest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// testLab is shared by the package's tests: a primary, a hot standby and
// PgBouncer in transaction mode.
var (
	testLab *lab.Lab
	binDir  string
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "lease-test-bin-"); err != nil {
		panic(err)
	}
	code := pgtest.RunMain(m, lab.Options{
		Standby: true,
		Poolers: []lab.PoolerSpec{{Name: "transaction", Mode: lab.Transaction, PoolSize: 20}},
		// The fencing tests order commits by their timestamps.
		Settings: map[string]string{"track_commit_timestamp": "on"},
	}, &testLab)
	os.RemoveAll(binDir)
	os.Exit(code)
}

var witness leasetest.WitnessBuild

// witnessBin builds the witness program once per test binary.
func witnessBin(t *testing.T) string { return witness.Get(t, binDir) }

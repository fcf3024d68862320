package cmd

import (
	"os"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

// testLab is shared by the tests of this package that need a database: the
// primary, a hot standby, PgBouncer in each pool mode (lab.EveryPoolMode),
// and HAProxy in front of the primary cutting sessions idle for 2 s. The
// first test that calls needLab starts it; tests of flags and usage never
// do, so `go test -run 'Usage|Flags' ./cmd` starts no server.
var testLab = pgtest.NewLazy(lab.Options{
	Standby:    true,
	Poolers:    lab.EveryPoolMode,
	Extensions: []lab.Extension{doors},
})

// doors are testLab's front doors.
var doors = labtest.New(labtest.Spec{
	HAProxy: []labtest.HAProxySpec{{Name: "idle", Backends: []string{"primary"}, TimeoutClient: 2 * time.Second}},
})

// needLab returns the package's lab, starting it if no test has yet.
func needLab(t testing.TB) *lab.Lab {
	t.Helper()
	return testLab.Get(t)
}

// needDoors returns the front doors of the package's lab, starting it if
// no test has yet.
func needDoors(t testing.TB) *labtest.FrontDoors {
	t.Helper()
	testLab.Get(t)
	return doors
}

func TestMain(m *testing.M) { os.Exit(pgtest.RunMainLazy(m, testLab)) }

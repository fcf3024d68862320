package cmd

import (
	"os"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/lab"
)

// testLab is shared by every test of this package: the primary, a hot
// standby, PgBouncer in each pool mode (lab.EveryPoolMode), and HAProxy in
// front of the primary cutting sessions idle for 2 s.
var testLab *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(pgtest.RunMain(m, lab.Options{
		Standby: true,
		Poolers: lab.EveryPoolMode,
		HAProxy: []lab.HAProxySpec{{Name: "idle", Backends: []string{"primary"}, TimeoutClient: 2 * time.Second}},
	}, &testLab))
}

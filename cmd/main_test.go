package cmd

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/lab"
)

// testLab is shared by every test of this package: the primary, a hot
// standby, and PgBouncer in each pool mode (lab.EveryPoolMode).
var testLab *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(lab.RunMain(m, lab.Options{
		Standby: true,
		Poolers: lab.EveryPoolMode,
	}, &testLab))
}

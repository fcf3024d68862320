package probe_test

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/lab"
)

var testLab *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(lab.RunMain(m, lab.Options{
		Standby: true,
		Poolers: lab.EveryPoolMode,
	}, &testLab))
}

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
		Poolers: append(lab.EveryPoolMode,
			// PgBouncer in session mode that hands server connections on
			// without resetting them: locks outlive their client.
			lab.PoolerSpec{Name: "noreset", Mode: lab.Session, PoolSize: 5, Settings: map[string]string{"server_reset_query": ""}}),
	}, &testLab))
}

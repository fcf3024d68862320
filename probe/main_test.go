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
		Poolers: []lab.PoolerSpec{
			{Name: "transaction", Mode: lab.Transaction, PoolSize: 20},
			{Name: "tx1", Mode: lab.Transaction, PoolSize: 1},
			{Name: "session", Mode: lab.Session, PoolSize: 20},
			{Name: "session1", Mode: lab.Session, PoolSize: 1},
			{Name: "statement", Mode: lab.Statement, PoolSize: 5},
		},
	}, &testLab))
}

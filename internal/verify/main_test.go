package verify_test

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
)

// testLab has the primary, a hot standby, and PgBouncer in transaction and
// session mode.
var testLab *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(pgtest.RunMain(m, lab.Options{Standby: true}, &testLab))
}

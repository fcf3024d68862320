package locks_test

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/lab"
)

var testLab *lab.Lab

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m, lab.Options{}, &testLab)) }

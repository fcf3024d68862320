package locks_test

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/pgtest"
)

var testLab *lab.Lab

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m, lab.Options{}, &testLab)) }

package lab_test

import (
	"errors"

	"github.com/leasectl/leasectl/internal/dbconn"
)

func asConnectError(err error, target **dbconn.ConnectError) bool { return errors.As(err, target) }

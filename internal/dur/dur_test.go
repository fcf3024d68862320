package dur

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0ms"},
		{600 * time.Microsecond, "0.6ms"},
		{7640 * time.Microsecond, "7.6ms"},
		{14400 * time.Microsecond, "14ms"},
		{412 * time.Millisecond, "412ms"},
		{999600 * time.Microsecond, "1.0s"},
		{4009100 * time.Microsecond, "4.0s"},
		{4012200 * time.Microsecond, "4.0s"},
		{12400 * time.Millisecond, "12.4s"},
		{59990 * time.Millisecond, "1m00s"},
		{125 * time.Second, "2m05s"},
		{62 * time.Minute, "1h02m"},
		{-3 * time.Millisecond, "-3.0ms"},
	} {
		if got := Format(tc.d); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

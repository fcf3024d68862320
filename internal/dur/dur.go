// Package dur writes a measured duration the one way leasectl prints it:
// 0.6ms, 7.6ms, 412ms, 4.0s, 12.4s, 2m05s, 1h02m.
package dur

import (
	"fmt"
	"time"
)

// Format renders d with the precision that matters at its size: a tenth of
// a millisecond below 10 ms, whole milliseconds below a second, a tenth of
// a second below a minute, then minutes and seconds, hours and minutes.
func Format(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%s%.1fms", neg, float64(d.Microseconds())/1000)
	case d < time.Second-500*time.Microsecond:
		return fmt.Sprintf("%s%dms", neg, d.Round(time.Millisecond).Milliseconds())
	case d < time.Minute-50*time.Millisecond:
		return fmt.Sprintf("%s%.1fs", neg, d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%s%dm%02ds", neg, int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%s%dh%02dm", neg, int(d.Hours()), int(d.Minutes())%60)
}

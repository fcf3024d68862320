package cmd

import (
	"regexp"
	"testing"
)

// FuzzPlainMatchers holds the plain matchers equal to the patterns they
// replace (compiled at init, every command paid for them).
func FuzzPlainMatchers(f *testing.F) {
	number := regexp.MustCompile(`^[0-9]+(\.[0-9]*)?$`)
	negative := regexp.MustCompile(`^\d[\d,-]*$`)
	for _, s := range []string{"", "5", "0.5", "5.", ".5", "1.2.3", "1,2", "1-2", "-1", "a", "12x", "1,-2,3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isNumber(s), number.MatchString(s); got != want {
			t.Errorf("isNumber(%q) = %v, want %v", s, got, want)
		}
		if got, want := isNegativeKey(s), negative.MatchString(s); got != want {
			t.Errorf("isNegativeKey(%q) = %v, want %v", s, got, want)
		}
	})
}

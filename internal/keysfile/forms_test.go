package keysfile

import (
	"regexp"
	"testing"
)

// The regular expressions that the hand-written checks of decode.go stand
// for; the checks must agree with them on every input.
var (
	roleNameRe     = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	decimalRe      = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)
	hexRe          = regexp.MustCompile(`^0x[0-9a-fA-F]+$`)
	ambiguousIntRe = regexp.MustCompile(`^[-+]?([0-9][0-9_]*|0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+)$`)
)

var formSeeds = []string{
	"", "-", "+", "0", "00", "-0", "+0", "017", "17", "-17", "1_000", "_1", "1_", "0x", "0x1f", "0X1F", "0x_1", "-0x1",
	"0o", "0o17", "0O18", "0b", "0b101", "0B2", "0b_", "0o_", "0x_", "9223372036854775807", "1e3", "1.0", " 1", "1\n",
	"poller", "Poller", "p", "p-1_x", "1p", "-p", "p.q", "p\n", "yes", "ä", "0xg", "0xG", "+0x1", "0_", "0__1", "00x1",
}

func checkForms(t *testing.T, s string) {
	for _, f := range []struct {
		name string
		re   *regexp.Regexp
		fn   func(string) bool
	}{
		{"isRoleName", roleNameRe, isRoleName},
		{"isDecimal", decimalRe, isDecimal},
		{"isHex", hexRe, isHex},
		{"isAmbiguousInt", ambiguousIntRe, isAmbiguousInt},
	} {
		if got, want := f.fn(s), f.re.MatchString(s); got != want {
			t.Errorf("%s(%q) = %v, want %v (%s)", f.name, s, got, want, f.re)
		}
	}
}

func TestFormsAgreeWithTheirExpressions(t *testing.T) {
	for _, s := range formSeeds {
		checkForms(t, s)
	}
	// Every string of up to three characters from an alphabet that covers
	// each branch.
	const alphabet = "0179_-+xXoObBafAFgz."
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		checkForms(t, prefix)
		if n == 0 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			gen(prefix+alphabet[i:i+1], n-1)
		}
	}
	gen("", 3)
}

func FuzzForms(f *testing.F) {
	for _, s := range formSeeds {
		f.Add(s)
	}
	f.Fuzz(checkForms)
}

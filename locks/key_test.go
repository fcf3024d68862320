package locks

import (
	"math"
	"testing"
)

func TestSplitJoinRoundTrip(t *testing.T) {
	for _, k := range []int64{0, 1, -1, 1840000001, 1 << 31, 1<<32 + 5, -(1 << 32), math.MaxInt64, math.MinInt64, -1840000001} {
		c, o := Split(k)
		if got := Join(c, o); got != k {
			t.Errorf("Join(Split(%d)) = %d (classid %d objid %d)", k, got, c, o)
		}
	}
	if c, o := Split(-1); c != math.MaxUint32 || o != math.MaxUint32 {
		t.Errorf("Split(-1) = %d,%d; want both 4294967295", c, o)
	}
	if c, o := Split(1<<32 + 5); c != 1 || o != 5 {
		t.Errorf("Split(2^32+5) = %d,%d; want 1,5", c, o)
	}
}

func TestPairFromLocks(t *testing.T) {
	if got := PairFromLocks(math.MaxUint32, 7).String(); got != "-1,7" {
		t.Errorf("got %s, want -1,7", got)
	}
}

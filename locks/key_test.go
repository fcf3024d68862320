package locks

import (
	"math"
	"testing"
)

func TestLockTagRoundTrip(t *testing.T) {
	for _, id := range []int64{0, 1, -1, 1840000001, 1 << 31, 1<<32 + 5, -(1 << 32), math.MaxInt64, math.MinInt64, -1840000001} {
		for _, k := range []Key{BigintKey(id), BigintKey(id).Fence()} {
			c, o := k.LockTag()
			if got := KeyFromLockTag(c, o, int16(k.Form)); got != k {
				t.Errorf("KeyFromLockTag(%v.LockTag()) = %v (classid %d objid %d)", k, got, c, o)
			}
			if back, err := ParseKey(k.String()); err != nil || back != k {
				t.Errorf("ParseKey(%q) = %v, %v; want %v", k.String(), back, err, k)
			}
		}
	}
	if c, o := BigintKey(-1).LockTag(); c != math.MaxUint32 || o != math.MaxUint32 {
		t.Errorf("LockTag(-1) = %d,%d; want both 4294967295", c, o)
	}
	if c, o := BigintKey(1<<32 + 5).LockTag(); c != 1 || o != 5 {
		t.Errorf("LockTag(2^32+5) = %d,%d; want 1,5", c, o)
	}
}

func TestPairFromLockTag(t *testing.T) {
	k := KeyFromLockTag(math.MaxUint32, 7, int16(Pair))
	if got := k.String(); got != "-1,7" {
		t.Errorf("got %s, want -1,7", got)
	}
	if k != PairOf(-1, 7) {
		t.Errorf("KeyFromLockTag gives %v, PairOf(-1, 7) gives %v", k, PairOf(-1, 7))
	}
	if k1, k2 := k.Int4s(); k1 != -1 || k2 != 7 {
		t.Errorf("Int4s = %d,%d", k1, k2)
	}
}

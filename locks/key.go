package locks

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
)

// Split returns the classid and objid under which pg_locks shows the bigint
// advisory key k (objsubid 1).
func Split(k int64) (classid, objid uint32) {
	return uint32(uint64(k) >> 32), uint32(uint64(k))
}

// Join rebuilds a bigint advisory key from pg_locks' classid and objid; it is
// the inverse of Split for every int64, negative ones included.
func Join(classid, objid uint32) int64 {
	return int64(uint64(classid)<<32 | uint64(objid))
}

// PairKey is the two-int4 form of an advisory key, pg_advisory_lock(k1, k2),
// which pg_locks shows with objsubid 2.
type PairKey struct {
	K1, K2 int32
}

// PairFromLocks rebuilds the two-int4 key from pg_locks' classid and objid.
func PairFromLocks(classid, objid uint32) PairKey {
	return PairKey{K1: int32(classid), K2: int32(objid)}
}

// String renders the pair as "k1,k2", the way leasectl prints it.
func (p PairKey) String() string {
	return strconv.Itoa(int(p.K1)) + "," + strconv.Itoa(int(p.K2))
}

// ParseKey parses a bigint advisory key. It is the one parser of the keys
// leasectl reads, on the command line and in keys.yaml: an int64 in plain
// decimal (1840000001, -42) or in 0x hex (0x6d6b000000000001, at most
// 0x7fffffffffffffff; negative keys are written in decimal). Other
// spellings (017, 0o17, 0b101, 1_000, 0X1F) are refused: YAML readers and
// people disagree on what number they are.
func ParseKey(s string) (int64, error) {
	switch {
	case decimalKey.MatchString(s):
		if k, err := strconv.ParseInt(s, 10, 64); err == nil {
			return k, nil
		}
	case hexKey.MatchString(s):
		if u, err := strconv.ParseUint(s[2:], 16, 64); err == nil && u <= math.MaxInt64 {
			return int64(u), nil
		}
	default:
		return 0, fmt.Errorf("%q is not a key: write a 64-bit integer in decimal (1840000001, -42) or in 0x hex (0x6d6b000000000001)", s)
	}
	return 0, fmt.Errorf("%q is outside the range of a 64-bit key (-9223372036854775808 to 9223372036854775807, or 0x7fffffffffffffff in hex; write negative keys in decimal)", s)
}

// The two spellings of a key (see ParseKey).
var (
	decimalKey = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)
	hexKey     = regexp.MustCompile(`^0x[0-9a-fA-F]+$`)
)

// DefaultProbeKey is the advisory key `leasectl probe` takes by default:
// the bytes of "leasectl" read as a big-endian int64 (0x6c6561736563746c).
// No role in keys.yaml may use it (keys lint enforces that).
const DefaultProbeKey int64 = 0x6c6561736563746c

// ProbeKeyBase is the high half of every probe key: the bytes "leas". The
// probe picks the low half at random for each run, so that probes running
// at the same time never contend, and a key an interrupted probe left on a
// pooled server connection never meets a later one. The whole range, from
// ProbeKeyBase to ProbeKeyBase + 0xffffffff, is the probe's: keys lint
// rejects a role in it.
const ProbeKeyBase int64 = DefaultProbeKey &^ 0xffffffff

// IsProbeKey reports whether k is in the probe's range (see ProbeKeyBase).
func IsProbeKey(k int64) bool { return k&^0xffffffff == ProbeKeyBase }

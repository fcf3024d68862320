package locks

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KeyForm says which of the two advisory key forms a [Key] is.
type KeyForm uint8

const (
	// Bigint is pg_advisory_lock(bigint): pg_locks objsubid 1.
	Bigint KeyForm = 1
	// Pair is pg_advisory_lock(int4, int4): pg_locks objsubid 2.
	Pair KeyForm = 2
)

// Key is an advisory key in either form; it is the one type leasectl uses
// for a key. For the bigint form ID is the key itself; for the two-int4 form
// ID is the same 64 bits, k1 high and k2 low, so that a Key is comparable
// and can index a map. Build one with [BigintKey], [PairOf], [ParseKey] or
// [KeyFromLockTag].
type Key struct {
	Form KeyForm
	ID   int64
}

// BigintKey is the key of pg_advisory_lock(k).
func BigintKey(k int64) Key { return Key{Form: Bigint, ID: k} }

// PairOf is the key of pg_advisory_lock(k1, k2).
func PairOf(k1, k2 int32) Key {
	return Key{Form: Pair, ID: int64(uint64(uint32(k1))<<32 | uint64(uint32(k2)))}
}

// KeyFromLockTag rebuilds a key from the pg_locks columns that show it:
// classid, objid and objsubid (1 for the bigint form, 2 for the pair).
// It is the inverse of [Key.LockTag] for every key, negative ones included.
func KeyFromLockTag(classid, objid uint32, objsubid int16) Key {
	return Key{Form: KeyForm(objsubid), ID: int64(uint64(classid)<<32 | uint64(objid))}
}

// LockTag returns the classid and objid under which pg_locks shows k; its
// objsubid is k.Form.
func (k Key) LockTag() (classid, objid uint32) {
	return uint32(uint64(k.ID) >> 32), uint32(uint64(k.ID))
}

// Int4s returns the two halves of k as signed int4s: the arguments of
// pg_advisory_lock(k1, k2) for the pair form.
func (k Key) Int4s() (k1, k2 int32) {
	c, o := k.LockTag()
	return int32(c), int32(o)
}

// Fence is the stop fence of the bigint key k: the same 64 bits in the
// two-int4 form (pg_advisory_lock(k1, k2), objsubid 2), a lock of its own
// that no bigint role key can collide with. A leader holds it on a second
// session from before its work starts until that work has stopped, so that
// a new leader, which must take it too, never starts while the old work
// still runs, even when the server ends the old leader's lease session at
// once (pg_terminate_backend).
func (k Key) Fence() Key { return Key{Form: Pair, ID: k.ID} }

// PresenceMask is what Presence XORs into a key's high half: the bytes
// "pres".
const PresenceMask int64 = 0x70726573 << 32

// Presence is the presence lock of the bigint key k: a two-int4 key, k
// with PresenceMask XORed in, that every replica of a group run serving
// k's role holds in shared mode (pg_advisory_lock_shared) for as long as it
// stands by or leads. Shared holders never block each other; pg_locks then
// shows which replicas wait for a role that nobody queues for, how many
// replicas share the roles, and whom to spread them over.
func (k Key) Presence() Key { return Key{Form: Pair, ID: k.ID ^ PresenceMask} }

// PresenceOf returns the bigint role key whose presence lock p is, and
// whether p is of that form at all (a shared two-int4 lock is not
// necessarily one).
func PresenceOf(p Key) (Key, bool) {
	if p.Form != Pair {
		return Key{}, false
	}
	return Key{Form: Bigint, ID: p.ID ^ PresenceMask}, true
}

// String renders k the way leasectl prints and parses it: "k" for the
// bigint form, "k1,k2" for the pair form.
// RoleName is how leasectl names a role in messages, logs and metrics:
// its name, else "key K" for a lease that has only a key.
func RoleName(role string, k Key) string {
	if role != "" {
		return role
	}
	return "key " + k.String()
}

func (k Key) String() string {
	if k.Form == Pair {
		k1, k2 := k.Int4s()
		return strconv.Itoa(int(k1)) + "," + strconv.Itoa(int(k2))
	}
	return strconv.FormatInt(k.ID, 10)
}

// ParseKey parses a key as leasectl reads it on the command line: "k" (a
// bigint key, spelled as [ParseBigint] reads it) or "k1,k2" (a two-int4
// key, each half in decimal or 0x hex within the int4 range).
func ParseKey(s string) (Key, error) {
	if a, b, ok := strings.Cut(s, ","); ok {
		k1, err1 := ParseBigint(strings.TrimSpace(a))
		k2, err2 := ParseBigint(strings.TrimSpace(b))
		if err1 != nil || err2 != nil || int64(int32(k1)) != k1 || int64(int32(k2)) != k2 {
			return Key{}, fmt.Errorf("%q is not a two-int4 key: use k1,k2 with both in the int4 range", s)
		}
		return PairOf(int32(k1), int32(k2)), nil
	}
	k, err := ParseBigint(s)
	if err != nil {
		return Key{}, err
	}
	return BigintKey(k), nil
}

// ParseBigint parses a bigint advisory key. It is the one spelling rule of
// the keys leasectl reads, on the command line and in keys.yaml: an int64
// in plain decimal (1840000001, -42) or in 0x hex (0x6d6b000000000001, at
// most 0x7fffffffffffffff; negative keys are written in decimal). Other
// spellings (017, 0o17, 0b101, 1_000, 0X1F) are refused: YAML readers and
// people disagree on what number they are.
func ParseBigint(s string) (int64, error) {
	switch {
	case isDecimalKey(s):
		if k, err := strconv.ParseInt(s, 10, 64); err == nil {
			return k, nil
		}
	case isHexKey(s):
		if u, err := strconv.ParseUint(s[2:], 16, 64); err == nil && u <= math.MaxInt64 {
			return int64(u), nil
		}
	default:
		return 0, fmt.Errorf("%q is not a key: write a 64-bit integer in decimal (1840000001, -42) or in 0x hex (0x6d6b000000000001)", s)
	}
	return 0, fmt.Errorf("%q is outside the range of a 64-bit key (-9223372036854775808 to 9223372036854775807, or 0x7fffffffffffffff in hex; write negative keys in decimal)", s)
}

// isDecimalKey reports whether s is an optional sign and a decimal integer
// without leading zeros (^[-+]?(0|[1-9][0-9]*)$), checked by hand rather
// than with a regular expression compiled at start-up.
func isDecimalKey(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isHexKey reports whether s is 0x and at least one hex digit
// (^0x[0-9a-fA-F]+$).
func isHexKey(s string) bool {
	if len(s) < 3 || s[:2] != "0x" {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// DefaultProbeKey is the bytes of "leasectl" read as a big-endian int64
// (0x6c6561736563746c): the key earlier probes took, which a session
// stranded on a pooled server connection may still hold. It is in the
// probe's range (IsProbeKey), where no role may be; the probe now takes a
// random key of that range, never this one.
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

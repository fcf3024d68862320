package locks

import (
	"strconv"
	"testing"
)

// TestMarkClassSQL: the statement that reads pg_locks spells the marks'
// high half as markClass is.
func TestMarkClassSQL(t *testing.T) {
	if got := strconv.FormatUint(uint64(markClass), 10); got != markClassSQL {
		t.Errorf("markClassSQL is %s, want %s", markClassSQL, got)
	}
}

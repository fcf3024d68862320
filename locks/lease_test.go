package locks

import (
	"testing"
	"time"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Key
		ok   bool
	}{
		{"42", BigintKey(42), true},
		{"-9223372036854775808", BigintKey(-1 << 63), true},
		{"1,2", PairOf(1, 2), true},
		{"-1, -2", PairOf(-1, -2), true},
		{"2147483648,1", Key{}, false},
		{"1,x", Key{}, false},
		{"poller", Key{}, false},
		{"9223372036854775808", Key{}, false},
		{"0x6d6b000000000001", BigintKey(0x6d6b000000000001), true},
		{"0x7fffffffffffffff", BigintKey(1<<63 - 1), true},
		{"0x8000000000000000", Key{}, false},
		{"+7", BigintKey(7), true},
		{"0x1,0x2", PairOf(1, 2), true},
		{"017", Key{}, false},
		{"0o17", Key{}, false},
		{"0b101", Key{}, false},
		{"1_000", Key{}, false},
		{"0X1F", Key{}, false},
		{"", Key{}, false},
	} {
		got, err := ParseKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKey(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if s := PairOf(-1, 7).String(); s != "-1,7" {
		t.Errorf("pair renders as %q", s)
	}
}

func TestStaleness(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const after = 45 * time.Second
	for _, tc := range []struct {
		name  string
		s     Session
		stale bool
	}{
		{"idle past the threshold", Session{PID: 1, State: "idle", StateChange: ago(time.Minute)}, true},
		{"idle within the threshold", Session{PID: 1, State: "idle", StateChange: ago(10 * time.Second)}, false},
		{"idle in transaction past it", Session{PID: 1, State: "idle in transaction", StateChange: ago(time.Hour)}, true},
		{"active for long is working, not hung", Session{PID: 1, State: "active", StateChange: ago(time.Hour)}, false},
		{"hidden state is unknown, not stale", Session{PID: 1, Hidden: true}, false},
		{"old prepared transaction", Session{Prepared: &PreparedXact{GID: "x", PreparedAt: ago(time.Hour)}}, true},
		{"fresh prepared transaction", Session{Prepared: &PreparedXact{GID: "x", PreparedAt: ago(time.Second)}}, false},
	} {
		if got := tc.s.Stale(now, after); got != tc.stale {
			t.Errorf("%s: stale = %v, want %v", tc.name, got, tc.stale)
		}
	}
}

func TestLeaseHealth(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	fresh := Session{PID: 1, Granted: true, State: "idle", StateChange: now.Add(-time.Second)}
	stale := Session{PID: 2, Granted: true, State: "idle", StateChange: now.Add(-time.Hour)}
	shared := func(s Session) Session { s.Shared = true; return s }
	for _, tc := range []struct {
		name    string
		holders []Session
		want    Health
	}{
		{"free", nil, NoHolder},
		{"fresh holder", []Session{fresh}, Healthy},
		{"stale holder", []Session{stale}, StaleHolder},
		{"shared holders, one of them live, are no leader", []Session{shared(stale), shared(fresh)}, SharedHolders},
		{"one shared holder is no leader", []Session{shared(fresh)}, SharedHolders},
		{"a prepared transaction is no leader", []Session{{Granted: true, Prepared: &PreparedXact{GID: "x", PreparedAt: now}}}, PreparedHolder},
		{"hidden holder passes", []Session{{PID: 3, Granted: true, Hidden: true}}, Healthy},
	} {
		l := Lease{KeyLocks: KeyLocks{Key: BigintKey(1), Holders: tc.holders}}
		if got := l.Health(now, 45*time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLeasesLayout(t *testing.T) {
	roles := map[int64]string{10: "poller", 20: "scheduler", 30: "reconciler"}
	held := func(k Key) KeyLocks { return KeyLocks{Key: k, Holders: []Session{{PID: 1, Granted: true}}} }
	snap := &Snapshot{Keys: []KeyLocks{
		held(BigintKey(-5)), held(BigintKey(10)), held(BigintKey(30)), held(BigintKey(99)),
		held(PairOf(0, 10)),
	}}
	type row struct {
		role      string
		key       string
		held      bool
		requested bool
	}
	got := func(ls []Lease) []row {
		var out []row
		for _, l := range ls {
			out = append(out, row{l.Role, l.Key.String(), l.Held(), l.Requested})
		}
		return out
	}
	all := []Key{BigintKey(10), BigintKey(20), BigintKey(30)}
	for _, tc := range []struct {
		name   string
		want   []Key
		others bool
		rows   []row
	}{
		{"every role, free ones too", all, false, []row{{"poller", "10", true, true}, {"scheduler", "20", false, true}, {"reconciler", "30", true, true}}},
		{"others after the roles, bigint before pair; the pair with a role's bits is not that role",
			all, true, []row{{"poller", "10", true, true}, {"scheduler", "20", false, true}, {"reconciler", "30", true, true},
				{"", "-5", true, false}, {"", "99", true, false}, {"", "0,10", true, false}}},
		{"narrowed, with a bare key named after its role, given twice", []Key{BigintKey(30), BigintKey(30), BigintKey(20)}, false,
			[]row{{"reconciler", "30", true, true}, {"scheduler", "20", false, true}}},
		{"narrowed with others: other roles' keys stay out", []Key{BigintKey(20)}, true,
			[]row{{"scheduler", "20", false, true}, {"", "-5", true, false}, {"", "99", true, false}, {"", "0,10", true, false}}},
	} {
		rows := got(snap.ByRole(roles, tc.want, tc.others))
		if len(rows) != len(tc.rows) {
			t.Errorf("%s: got %v, want %v", tc.name, rows, tc.rows)
			continue
		}
		for i := range rows {
			if rows[i] != tc.rows[i] {
				t.Errorf("%s: got %v, want %v", tc.name, rows, tc.rows)
				break
			}
		}
	}
}

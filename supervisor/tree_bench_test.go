package supervisor

import "testing"

// BenchmarkMembers is the cost of one look at a program's tree: as a
// subreaper (the children lists of /proc) and by scanning every process.
func BenchmarkMembers(b *testing.B) {
	for _, sub := range []bool{true, false} {
		t := &programTree{pid: 1 << 30, id: "x", descendants: sub}
		name := map[bool]string{true: "subreaper", false: "scan"}[sub]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				t.members()
			}
		})
	}
}

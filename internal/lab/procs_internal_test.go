package lab

import (
	"encoding/binary"
	"maps"
	"slices"
	"testing"
)

// TestProcArgs reads a buffer as macOS's sysctl kern.procargs2 gives it:
// argc, the executable's path, padding, the arguments, the environment.
func TestProcArgs(t *testing.T) {
	buf := binary.NativeEndian.AppendUint32(nil, 3)
	buf = append(buf, "/opt/homebrew/opt/postgresql@15/bin/postgres\x00\x00\x00\x00"...)
	buf = append(buf, "postgres\x00-D\x00/var/folders/x/T/leasectl-lab-1/primary\x00"...)
	buf = append(buf, "HOME=/var/folders/x/T/leasectl-lab-1\x00PATH=/usr/bin\x00"...)
	want := []string{"postgres", "-D", "/var/folders/x/T/leasectl-lab-1/primary"}
	if got := procArgs(buf); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if !argsMention(procArgs(buf), "/var/folders/x/T/leasectl-lab-1") {
		t.Error("the data directory's lab is not mentioned")
	}
	// The environment does not count (PATH=/usr/bin), nor a directory
	// named with no path under it, as on Linux.
	for _, dir := range []string{"/usr", "/var/folders/x/T/leasectl-lab-1/primary"} {
		if argsMention(procArgs(buf), dir) {
			t.Errorf("%s is mentioned", dir)
		}
	}
	for _, short := range [][]byte{nil, {1, 0}, binary.NativeEndian.AppendUint32(nil, 1)} {
		if got := procArgs(short); len(got) != 0 {
			t.Errorf("%q: got %q", short, got)
		}
	}
	// Fewer arguments than argc says: as many as there are.
	trunc := append(binary.NativeEndian.AppendUint32(nil, 5), "/bin/sh\x00sh\x00-c"...)
	if got := procArgs(trunc); !slices.Equal(got, []string{"sh", "-c"}) {
		t.Errorf("truncated: got %q", got)
	}
}

// TestParseLsofCwd reads `lsof -d cwd -F pn`.
func TestParseLsofCwd(t *testing.T) {
	out := "p1\nfcwd\nn/\np4242\nfcwd\nn/private/var/folders/x/T/leasectl-lab-1/primary\np77\nfcwd\nn/Users/me/a dir\n"
	want := map[int]string{1: "/", 4242: "/private/var/folders/x/T/leasectl-lab-1/primary", 77: "/Users/me/a dir"}
	if got := parseLsofCwd([]byte(out)); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, tc := range []struct {
		path string
		in   bool
	}{
		{"/tmp/lab", true}, {"/tmp/lab/primary", true}, {"/tmp/lab2", false}, {"/tmp", false},
	} {
		if within(tc.path, "/tmp/lab") != tc.in {
			t.Errorf("within(%q, /tmp/lab) = %v", tc.path, !tc.in)
		}
	}
}

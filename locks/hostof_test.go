package locks_test

import (
	"testing"

	"github.com/leasectl/leasectl/locks"
)

// TestHostOfReadsTheDefaultName: the host of an application_name is the
// text after its last '@', without the process id that ends the default
// name of leasectl run and the lease package (NAME@HOST#PID); a replica
// matches its whole name, HOST#PID, and HOST.
func TestHostOfReadsTheDefaultName(t *testing.T) {
	for _, tc := range []struct{ app, host, pid string }{
		{"leasectl run poller@vm1#4242", "vm1", "4242"},
		{"leasectl run poller@vm1", "vm1", ""},
		{"leasectl run a@b@vm1.example.com#7", "vm1.example.com", "7"},
		{"poller-7f9c", "", ""},
		{"x@vm#", "vm#", ""},       // no digits: not a process id
		{"x@vm#12a", "vm#12a", ""}, // not only digits
		{"x@vm#1 fence", "vm#1 fence", ""},
	} {
		if host, pid := locks.HostOf(tc.app); host != tc.host || pid != tc.pid {
			t.Errorf("HostOf(%q) = %q, %q; want %q, %q", tc.app, host, pid, tc.host, tc.pid)
		}
	}
	r := locks.Replica{Session: locks.Session{Application: "leasectl run poller@vm1#4242"}}
	for name, want := range map[string]bool{
		"leasectl run poller@vm1#4242": true, "vm1#4242": true, "vm1": true,
		"vm1#4243": false, "vm": false, "leasectl run poller@vm1": false, "": false, "#4242": false,
	} {
		if got := r.Matches(name); got != want {
			t.Errorf("Matches(%q) = %v, want %v", name, got, want)
		}
	}
	if h := r.Host(); h != "vm1" {
		t.Errorf("Host() = %q, want vm1", h)
	}
}

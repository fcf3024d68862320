package errkind

import (
	"errors"
	"fmt"
	"testing"
)

func TestKindsMatchThroughWrapping(t *testing.T) {
	errGone := New(CheckFailed, "gone")
	wrapped := fmt.Errorf("failover: %w", errGone)
	if !errors.Is(wrapped, CheckFailed) || !errors.Is(wrapped, errGone) {
		t.Fatalf("a wrapped sentinel lost its kind or identity")
	}
	if errors.Is(wrapped, Input) || errors.Is(wrapped, Unavailable) {
		t.Fatalf("a sentinel matched a kind it is not")
	}
	if wrapped.Error() != "failover: gone" {
		t.Fatalf("text changed: %q", wrapped.Error())
	}
	base := errors.New("connection refused")
	m := fmt.Errorf("connect: %w", Mark(base, Unavailable))
	if !errors.Is(m, Unavailable) || !errors.Is(m, base) || m.Error() != "connect: connection refused" {
		t.Fatalf("Mark changed the error or lost the kind: %v", m)
	}
	if Mark(nil, Input) != nil {
		t.Fatal("Mark(nil) is not nil")
	}
	if New(Input, "a") == New(Input, "a") {
		t.Fatal("two sentinels are the same error")
	}
}

package shard

import (
	"testing"
	"unsafe"
)

// Every partition a shard holds is an owned, so its size is memory every
// idle replica pays (issue 33). With the move driver's state behind a
// pointer (moveState) and replicated's flags side by side, it fits the
// allocator's 448-byte class (504 bytes before, in the 512-byte class).
func TestOwnedSize(t *testing.T) {
	if got := unsafe.Sizeof(owned{}); got > 448 {
		t.Fatalf("an owned is %d bytes, want at most 448", got)
	}
}

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

// Handing a group its Handler allocates nothing: the handler lives in the
// owned, and the groups.Member is a pointer to it. Boxing a copy instead
// cost an object per replica that every garbage collection marks, and an
// idle process still collects every two minutes (issue 33).
func TestHandlerOfAllocatesNothing(t *testing.T) {
	rg := &raftGroups{}
	many := make([]owned, 200)
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		_ = rg.handlerOf(&many[i])
		i++
	})
	if allocs != 0 {
		t.Fatalf("handlerOf allocated %v objects per new group, want 0", allocs)
	}
	if h := rg.handlerOf(&many[0]); h != rg.handlerOf(&many[0]) {
		t.Fatal("handlerOf gave one group two handlers")
	}
}

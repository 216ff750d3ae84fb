package replica

import (
	"testing"
	"unsafe"
)

// Every idle replica holds a Group: at 320 bytes it is in the allocator's
// 320-byte size class, a field more (or a field order that pads) puts it
// in the 384-byte class, 64 bytes more per replica. Widening it is a
// choice to make knowingly, with BenchmarkIdleReplicaMemory's figure.
func TestGroupSize(t *testing.T) {
	if got := unsafe.Sizeof(Group{}); got > 320 {
		t.Fatalf("a Group is %d bytes, want at most 320", got)
	}
}

package partition

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page with 4 KiB base pages
// (x86-64; arm64 as most distributions build it). Where huge pages are
// larger the advice covers less of a chunk, or nothing.
const hugePage = 2 << 20

// newChunk returns an empty slice of capacity size for a partition's
// chunk. A chunk of at least two huge pages is asked to be backed by
// transparent huge pages, so that its first writes fault once per 2 MiB
// rather than once per 4 KiB page; the kernel backs only the
// huge-page-aligned parts of advised memory, and the runtime aligns a
// large allocation to its own 8 KiB pages, so such a chunk is cut from an
// allocation a huge page larger, starting at its first huge-page
// boundary: the whole chunk is huge pages rather than, for an 8 MiB
// chunk at a random offset, three of its four. The allocation's bytes
// before the boundary and after the chunk are never written by the
// partition, so they cost address space, not memory (unless the runtime
// clears a reused span). Advice: a kernel with transparent huge pages
// off, or a refusal, leaves the memory as it was.
func newChunk(size int) []byte {
	if size < 2*hugePage {
		return make([]byte, 0, size)
	}
	buf := make([]byte, 0, size+hugePage)
	off := 0
	if r := uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % hugePage; r != 0 {
		off = int(hugePage - r)
	}
	c := buf[off : off : off+size]
	_ = syscall.Madvise(c[:size], syscall.MADV_HUGEPAGE)
	return c
}

package partition

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page with 4 KiB base pages
// (x86-64; arm64 as most distributions build it). Where huge pages are
// larger the advice covers less of a chunk, or nothing.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the huge-page-aligned part of b,
// memory not yet written, with transparent huge pages, so that its first
// writes fault once per 2 MiB rather than once per 4 KiB page. Only
// chunks of at least two huge pages are advised (smaller ones have
// little or no aligned part). Advice: a kernel with transparent huge
// pages off, or a refusal, leaves the memory as it was.
func adviseHuge(b []byte) {
	if len(b) < 2*hugePage {
		return
	}
	from := 0
	if r := uintptr(unsafe.Pointer(unsafe.SliceData(b))) % hugePage; r != 0 {
		from = int(hugePage - r)
	}
	n := (len(b) - from) &^ (hugePage - 1)
	if n > 0 {
		_ = syscall.Madvise(b[from:from+n], syscall.MADV_HUGEPAGE)
	}
}

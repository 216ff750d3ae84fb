//go:build !linux

package partition

// adviseHuge does nothing where transparent huge pages are not asked
// for by madvise.
func adviseHuge([]byte) {}

//go:build !linux

package partition

// newChunk returns an empty slice of capacity size for a partition's
// chunk: where transparent huge pages are not asked for by madvise, an
// allocation of its own.
func newChunk(size int) []byte { return make([]byte, 0, size) }

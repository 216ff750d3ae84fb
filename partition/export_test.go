package partition

import "testing"

// AllowSmallSegments lets FileConfig.SegmentSize go down to n until the
// test ends, so tests can roll segments cheaply. Not for parallel tests.
func AllowSmallSegments(t testing.TB, n int64) {
	old := minSegmentSize
	minSegmentSize = n
	t.Cleanup(func() { minSegmentSize = old })
}

package partition

import "testing"

// AllowSmallSegments lets FileConfig.SegmentSize go down to n until the
// test ends, so tests can roll segments cheaply. Not for parallel tests.
func AllowSmallSegments(t testing.TB, n int64) {
	old := minSegmentSize
	minSegmentSize = n
	t.Cleanup(func() { minSegmentSize = old })
}

// AppendCopiedBytes is the number of bytes Append copies into its encode
// buffer for msgs appended to a partition that does not stash: the records
// as encoded there, less the payloads it writes from the caller's slice
// (lendPayload). TestAppendLendsLargePayloads checks that it does.
func AppendCopiedBytes(msgs []Message) int {
	var n int
	for i := range msgs {
		s, _ := recordSize(&msgs[i])
		if len(msgs[i].Payload) >= lendPayload {
			s -= len(msgs[i].Payload)
		}
		n += s
	}
	return n
}

package partition

import "fmt"

// The wire form of a batch is the same checksummed records the segments
// hold (each with its Offset field as given), so a batch shipped through a consensus log is
// verified on decode exactly as it is on disk.

// EncodeBatch appends the wire form of msgs to dst.
func EncodeBatch(dst []byte, msgs []Message) ([]byte, error) {
	for i := range msgs {
		if _, ok := recordSize(&msgs[i]); !ok {
			return dst, fmt.Errorf("%w: message %d", ErrTooLarge, i)
		}
	}
	for i := range msgs {
		dst = appendRecord(dst, &msgs[i], msgs[i].Offset, msgs[i].AppendTime)
	}
	return dst, nil
}

// DecodeBatch decodes a batch encoded by EncodeBatch. Damaged or trailing
// bytes are a *CorruptError; it never panics on any input.
func DecodeBatch(b []byte) ([]Message, error) {
	msgs, used, err := decodeRecords(b, "batch", 0)
	if err != nil {
		return nil, err
	}
	if used != len(b) {
		return nil, corruptf("batch", int64(used), "%d trailing bytes", len(b)-used)
	}
	return msgs, nil
}

// AppendDecodedBatch is DecodeBatch appending the messages to dst, for a
// caller that gathers several batches into a slice it reuses (a replica
// applying committed entries). On error it returns dst as it was.
func AppendDecodedBatch(dst []Message, b []byte) ([]Message, error) {
	out, used, err := appendRecords(dst, b, "batch", 0)
	if err == nil && used != len(b) {
		err = corruptf("batch", int64(used), "%d trailing bytes", len(b)-used)
	}
	if err != nil {
		clear(out[len(dst):])
		return dst, err
	}
	return out, nil
}

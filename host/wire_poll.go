package host

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/shard"
)

// The forwarded-request fields of long polls, start positions and
// partition offsets: a poll carries its start kind, reset policy,
// timestamp, maximum wait, minimum count and byte budget behind flagPoll;
// every successful reply carries the partition's start and end offsets,
// its term and its leader's in-sync replicas (OpOffsets answers them;
// other ops send zeros and none).

// flagPoll marks a forwarded request that carries the poll fields.
const flagPoll byte = 1 << 2

// pollFieldsSize is the encoded size of the poll fields: start kind u8,
// reset u8, timestamp i64 (µs), max wait i64 (ns), min count u32, max
// bytes u32, little endian.
const pollFieldsSize = 1 + 1 + 8 + 8 + 4 + 4

// codeTooManyWaiters is the reply code proposed for ErrTooManyWaiters
// (after codeNoSpace).
const codeTooManyWaiters byte = 8

// appendPollFields appends r's poll fields.
func appendPollFields(b []byte, r *shard.Request) []byte {
	b = append(b, byte(r.Start), byte(r.Reset))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Timestamp))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.MaxWait))
	b = binary.LittleEndian.AppendUint32(b, uint32(min(max(r.MinCount, 0), 1<<31-1)))
	return binary.LittleEndian.AppendUint32(b, uint32(min(max(r.MaxBytes, 0), 1<<31-1)))
}

// readPollFields reads the poll fields at the start of b into r and
// returns the rest. Every value is checked: an unknown start kind or
// reset policy, or a count or budget past 2^31−1, is errWire; a wait
// outside [0, MaxPollWait] is clamped into it (the shard clamps too).
func readPollFields(b []byte, r *shard.Request) ([]byte, error) {
	if len(b) < pollFieldsSize {
		return nil, fmt.Errorf("%w: poll fields of %d bytes", errWire, len(b))
	}
	kind, reset := shard.StartKind(b[0]), shard.Reset(b[1])
	if kind > shard.StartTimestamp || reset > shard.ResetError {
		return nil, fmt.Errorf("%w: start %d, reset %d", errWire, kind, reset)
	}
	minCount, maxBytes := binary.LittleEndian.Uint32(b[18:]), binary.LittleEndian.Uint32(b[22:])
	if minCount > 1<<31-1 || maxBytes > 1<<31-1 {
		return nil, fmt.Errorf("%w: min count %d, max bytes %d", errWire, minCount, maxBytes)
	}
	r.Start, r.Reset = kind, reset
	r.Timestamp = int64(binary.LittleEndian.Uint64(b[2:]))
	r.MaxWait = min(max(time.Duration(binary.LittleEndian.Uint64(b[10:])), 0), shard.MaxPollWait)
	r.MinCount, r.MaxBytes = int(minCount), int(maxBytes)
	return b[pollFieldsSize:], nil
}

// maxWireInSync bounds the in-sync replicas a reply carries: a count
// byte (a raft group has far fewer voters).
const maxWireInSync = 255

// appendOffsetsFields appends an OpOffsets answer's start, end and term,
// and the leader's in-sync replicas: a count u8 and each node u64 (at
// most maxWireInSync are sent).
func appendOffsetsFields(b []byte, r shard.Response) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Start)
	b = binary.LittleEndian.AppendUint64(b, r.End)
	b = binary.LittleEndian.AppendUint64(b, r.Term)
	isr := r.InSync[:min(len(r.InSync), maxWireInSync)]
	b = append(b, byte(len(isr)))
	for _, id := range isr {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return b
}

// readOffsetsFields reads an OpOffsets answer's start, end, term and
// in-sync replicas into r; an end below the start, or fewer bytes than
// the count of in-sync replicas needs (checked before anything is
// allocated), is errWire.
func readOffsetsFields(b []byte, r *shard.Response) ([]byte, error) {
	if len(b) < 25 {
		return nil, fmt.Errorf("%w: offsets of %d bytes", errWire, len(b))
	}
	r.Start, r.End = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	if r.End < r.Start {
		return nil, fmt.Errorf("%w: end %d below start %d", errWire, r.End, r.Start)
	}
	r.Term = binary.LittleEndian.Uint64(b[16:])
	n := int(b[24])
	b = b[25:]
	if len(b) < 8*n {
		return nil, fmt.Errorf("%w: %d in-sync replicas in %d bytes", errWire, n, len(b))
	}
	if n > 0 {
		r.InSync = make([]uint64, n)
		for i := range r.InSync {
			r.InSync[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	}
	return b[8*n:], nil
}

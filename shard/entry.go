package shard

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/partition"
)

// The replicated entry format. A partition group's raft entry carries the
// writes one flushProposals batched: a u32 count, then that many
// operations, each a kind byte and its fields (little endian). appendOp
// writes an operation and decodeOp, the one decoder, reads it back; every
// byte of an entry is hostile (a peer's log, or a damaged disk), so
// decodeOp checks each length against what remains.

// Kinds of the operations a replicated entry carries.
const (
	entryProduce      byte = 1 // producer u64, seq u64, len u32, batch
	entryStoreOffset  byte = 2 // offset u64, len u8, consumer
	entryTruncate     byte = 3 // offset u64
	entryPurge        byte = 4
	entryDeleteOffset byte = 5 // len u8, consumer
)

// appendOp encodes f's operation into an entry.
func appendOp(data []byte, f Frame) ([]byte, error) {
	r := f.Req
	switch r.Op {
	case OpProduce:
		data = append(data, entryProduce)
		data = binary.LittleEndian.AppendUint64(data, r.Producer)
		data = binary.LittleEndian.AppendUint64(data, r.Seq)
		lenAt := len(data)
		data = append(data, 0, 0, 0, 0)
		data, err := partition.EncodeBatch(data, r.Messages)
		if err != nil {
			return data, err
		}
		binary.LittleEndian.PutUint32(data[lenAt:], uint32(len(data)-lenAt-4))
		return data, nil
	case OpStoreOffset:
		if len(r.Consumer) > 255 {
			return data, errors.New("parkway: consumer name longer than 255 bytes")
		}
		data = append(data, entryStoreOffset)
		data = binary.LittleEndian.AppendUint64(data, r.Offset)
		data = append(data, byte(len(r.Consumer)))
		return append(data, r.Consumer...), nil
	case OpDeleteOffset:
		if len(r.Consumer) > 255 {
			return data, errors.New("parkway: consumer name longer than 255 bytes")
		}
		data = append(data, entryDeleteOffset, byte(len(r.Consumer)))
		return append(data, r.Consumer...), nil
	case OpTruncate:
		data = append(data, entryTruncate)
		return binary.LittleEndian.AppendUint64(data, r.Offset), nil
	case OpPurge:
		return append(data, entryPurge), nil
	}
	return data, fmt.Errorf("parkway: op %v is not replicated", r.Op)
}

// entryOp is one decoded operation of a replicated entry. Its slices
// alias the entry.
type entryOp struct {
	kind     byte
	key      produceKey // entryProduce
	batch    []byte     // entryProduce: the encoded batch
	offset   uint64     // entryStoreOffset, entryTruncate
	consumer []byte     // entryStoreOffset, entryDeleteOffset
}

// decodeOp decodes the operation at the head of b, the entry at index,
// and returns what follows it.
func decodeOp(index uint64, b []byte) (op entryOp, rest []byte, err error) {
	if len(b) < 1 {
		return op, nil, errTruncatedOp(index)
	}
	op.kind, b = b[0], b[1:]
	switch op.kind {
	case entryProduce:
		if len(b) < 20 {
			return op, nil, errTruncatedOp(index)
		}
		op.key = produceKey{Producer: binary.LittleEndian.Uint64(b), Seq: binary.LittleEndian.Uint64(b[8:])}
		size := binary.LittleEndian.Uint32(b[16:])
		if uint64(len(b)-20) < uint64(size) {
			return op, nil, errTruncatedOp(index)
		}
		op.batch = b[20 : 20+int(size)]
		return op, b[20+int(size):], nil
	case entryStoreOffset:
		if len(b) < 9 || len(b)-9 < int(b[8]) {
			return op, nil, errTruncatedOp(index)
		}
		op.offset = binary.LittleEndian.Uint64(b)
		op.consumer = b[9 : 9+int(b[8])]
		return op, b[9+int(b[8]):], nil
	case entryTruncate:
		if len(b) < 8 {
			return op, nil, errTruncatedOp(index)
		}
		op.offset = binary.LittleEndian.Uint64(b)
		return op, b[8:], nil
	case entryPurge:
		return op, b, nil
	case entryDeleteOffset:
		if len(b) < 1 || len(b)-1 < int(b[0]) {
			return op, nil, errTruncatedOp(index)
		}
		op.consumer = b[1 : 1+int(b[0])]
		return op, b[1+int(b[0]):], nil
	}
	return op, nil, fmt.Errorf("apply index %d: unknown operation %d", index, op.kind)
}

// errTruncatedOp reports an entry whose operation is cut short. Built
// only on that path: applyOp runs for every replicated write.
func errTruncatedOp(index uint64) error {
	return fmt.Errorf("apply index %d: operation truncated", index)
}

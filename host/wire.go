package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// The wire form of forwarded requests and their replies. Requests carry
// what a shard needs; replies carry the outcome with the error reduced to
// a code, so errors.Is keeps working on the client side for every error a
// caller can act on.

var errWire = errors.New("parkway: malformed forwarded message")

// Flags of a forwarded request.
const (
	flagUseConsumer byte = 1 << iota
	flagFromLeader
)

// EncodeRequest is the wire form of a forwarded request (the partition
// request a follower sends its leader), with its deadline as time left
// from now. DecodeRequest validates every field and refuses replication
// ops; EncodeResponse and DecodeResponse carry the answer with its error
// reduced to a code that keeps the root sentinels.
func EncodeRequest(r *shard.Request, now time.Time) ([]byte, error) {
	b := make([]byte, 0, 64)
	b = append(b, byte(r.Op))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.NS))
	b = binary.LittleEndian.AppendUint64(b, r.Epoch)
	b = binary.LittleEndian.AppendUint64(b, r.Offset)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Count))
	b = binary.LittleEndian.AppendUint64(b, r.Producer)
	b = binary.LittleEndian.AppendUint64(b, r.Seq)
	// The deadline travels as the time left, since the nodes' clocks
	// differ: 0 is none, at least 1 ns otherwise.
	var left int64
	if !r.Deadline.IsZero() {
		left = max(int64(r.Deadline.Sub(now)), 1)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(left))
	b = appendString(b, r.Consumer)
	var flags byte
	if r.UseConsumer {
		flags |= flagUseConsumer
	}
	if r.FromLeader {
		flags |= flagFromLeader
	}
	poll := r.Op == shard.OpPoll
	if poll {
		flags |= flagPoll
	}
	b = append(b, flags)
	if poll {
		b = appendPollFields(b, r)
	}
	return partition.EncodeBatch(b, r.Messages)
}

func DecodeRequest(b []byte, now time.Time) (*shard.Request, error) {
	const fixed = 1 + 8 + 8 + 8 + 4 + 8 + 8 + 8
	if len(b) < fixed {
		return nil, errWire
	}
	r := &shard.Request{
		Op:     shard.Op(b[0]),
		NS:     metadata.Namespace(binary.LittleEndian.Uint64(b[1:])),
		Epoch:  binary.LittleEndian.Uint64(b[9:]),
		Offset: binary.LittleEndian.Uint64(b[17:]),
		Count:  int(binary.LittleEndian.Uint32(b[25:])),
	}
	r.Producer = binary.LittleEndian.Uint64(b[29:])
	r.Seq = binary.LittleEndian.Uint64(b[37:])
	if left := int64(binary.LittleEndian.Uint64(b[45:])); left < 0 {
		return nil, fmt.Errorf("%w: negative deadline", errWire)
	} else if left > 0 {
		r.Deadline = now.Add(time.Duration(left))
	}
	b = b[fixed:]
	var ok bool
	if r.Consumer, b, ok = readString(b); !ok || len(b) < 1 {
		return nil, errWire
	}
	flags := b[0]
	if flags&^(flagUseConsumer|flagFromLeader|flagPoll) != 0 {
		return nil, fmt.Errorf("%w: flags %#x", errWire, flags)
	}
	r.UseConsumer, r.FromLeader = flags&flagUseConsumer != 0, flags&flagFromLeader != 0
	switch r.Op {
	case shard.OpProduce, shard.OpPoll, shard.OpStoreOffset, shard.OpGetOffset,
		shard.OpTruncate, shard.OpPurge, shard.OpOffsets, shard.OpDeleteOffset:
	default:
		// Replication traffic (OpRaft, OpCatchUp) has its own message
		// kinds; a client request never carries it.
		return nil, fmt.Errorf("%w: op %d", errWire, r.Op)
	}
	b = b[1:]
	if flags&flagPoll != 0 {
		if r.Op != shard.OpPoll {
			return nil, fmt.Errorf("%w: poll fields on op %d", errWire, r.Op)
		}
		var err error
		if b, err = readPollFields(b, r); err != nil {
			return nil, err
		}
	}
	msgs, err := partition.DecodeBatch(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errWire, err)
	}
	r.Messages = msgs
	return r, nil
}

// Error codes of a forwarded reply.
const (
	codeOK byte = iota
	codeRetry
	codeNotLeader
	codeOutcomeUnknown
	codeOffsetOutOfRange
	codeStale
	codeOther
	codeNoSpace
	_            // codeTooManyWaiters (wire_poll.go)
	codeSentinel // one of wireSentinels, by index, then the message
)

// wireSentinels are the further errors a forwarded request's answer
// keeps across the wire, so the caller can match them with errors.Is:
// the index is the wire's, so entries are only ever appended.
var wireSentinels = []error{
	partition.ErrTooLarge,
	partition.ErrEmptyBatch,
	partition.ErrCorrupt,
	partition.ErrUnusable,
	shard.ErrPartitionFailed,
	shard.ErrClosed,
}

func EncodeResponse(r shard.Response) []byte {
	b := make([]byte, 0, 64)
	var nl *shard.NotLeaderError
	switch {
	case r.Err == nil:
		b = append(b, codeOK)
	case errors.Is(r.Err, shard.ErrOutcomeUnknown):
		// First: an unknown outcome promises nothing, whatever else its
		// cause says (shard.OutcomeUnknown).
		b = append(b, codeOutcomeUnknown)
	case errors.As(r.Err, &nl):
		b = binary.LittleEndian.AppendUint64(append(b, codeNotLeader), nl.Leader)
	case errors.Is(r.Err, shard.ErrStaleIncarnation):
		b = append(b, codeStale)
	case errors.Is(r.Err, shard.ErrRetry):
		b = append(b, codeRetry)
	case errors.Is(r.Err, partition.ErrOffsetOutOfRange):
		b = append(b, codeOffsetOutOfRange)
	case errors.Is(r.Err, shard.ErrTooManyWaiters):
		b = append(b, codeTooManyWaiters)
	case errors.Is(partition.ClassifyNoSpace(r.Err), partition.ErrNoSpace):
		b = appendString(append(b, codeNoSpace), r.Err.Error())
	default:
		code := []byte{codeOther}
		for i, sentinel := range wireSentinels {
			if errors.Is(r.Err, sentinel) {
				code = []byte{codeSentinel, byte(i)}
				break
			}
		}
		b = appendString(append(b, code...), r.Err.Error())
	}
	if r.Err != nil {
		return b
	}
	b = binary.LittleEndian.AppendUint64(b, r.Offset)
	if r.Found {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendOffsetsFields(b, r)
	out, err := partition.EncodeBatch(b, r.Messages)
	if err != nil {
		return appendString([]byte{codeOther}, err.Error())
	}
	return out
}

func DecodeResponse(b []byte) (shard.Response, error) {
	if len(b) < 1 {
		return shard.Response{}, errWire
	}
	code, b := b[0], b[1:]
	switch code {
	case codeOK:
	case codeNotLeader:
		if len(b) < 8 {
			return shard.Response{}, errWire
		}
		return shard.Response{Err: &shard.NotLeaderError{Leader: binary.LittleEndian.Uint64(b)}}, nil
	case codeRetry:
		return shard.Response{Err: fmt.Errorf("%w (at the leader)", shard.ErrRetry)}, nil
	case codeStale:
		return shard.Response{Err: shard.ErrStaleIncarnation}, nil
	case codeOutcomeUnknown:
		return shard.Response{Err: shard.ErrOutcomeUnknown}, nil
	case codeOffsetOutOfRange:
		return shard.Response{Err: partition.ErrOffsetOutOfRange}, nil
	case codeTooManyWaiters:
		return shard.Response{Err: shard.ErrTooManyWaiters}, nil
	case codeSentinel:
		if len(b) < 1 || int(b[0]) >= len(wireSentinels) {
			return shard.Response{}, errWire
		}
		sentinel := wireSentinels[b[0]]
		msg, _, ok := readString(b[1:])
		if !ok {
			return shard.Response{}, errWire
		}
		return shard.Response{Err: fmt.Errorf("%w (at the leader: %s)", sentinel, msg)}, nil
	case codeOther, codeNoSpace:
		msg, _, ok := readString(b)
		if !ok {
			return shard.Response{}, errWire
		}
		if code == codeNoSpace {
			return shard.Response{Err: fmt.Errorf("%w (at the leader: %s)", partition.ErrNoSpace, msg)}, nil
		}
		return shard.Response{Err: errors.New(msg)}, nil
	default:
		return shard.Response{}, errWire
	}
	if len(b) < 9 {
		return shard.Response{}, errWire
	}
	if b[8] > 1 {
		return shard.Response{}, fmt.Errorf("%w: found %d", errWire, b[8])
	}
	r := shard.Response{Offset: binary.LittleEndian.Uint64(b), Found: b[8] == 1}
	b, err := readOffsetsFields(b[9:], &r)
	if err != nil {
		return shard.Response{}, err
	}
	msgs, err := partition.DecodeBatch(b)
	if err != nil {
		return shard.Response{}, fmt.Errorf("%w: %w", errWire, err)
	}
	r.Messages = msgs
	return r, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func readString(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return "", b, false
	}
	return string(b[4 : 4+n]), b[4+n:], true
}

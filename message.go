package parkway

import (
	"unsafe"

	"github.com/parkway-io/parkway/partition"
)

// Message is one message of a partition log. Producers set ID, Key,
// Timestamp, Headers and Payload; Offset and AppendTime are assigned when
// it is appended (values passed to Produce are ignored).
type Message struct {
	// Offset is the message's position in its partition.
	Offset uint64
	// ID is a 128-bit message id chosen by the producer (zero is allowed).
	ID [16]byte
	// Timestamp is microseconds since the Unix epoch, set by the producer
	// (Kafka's CreateTime); Produce sets it to the node clock's now when
	// it is 0. Retention by age compares against it.
	Timestamp int64
	// AppendTime is microseconds since the Unix epoch at which the
	// partition appended the message (Kafka's LogAppendTime),
	// non-decreasing along a partition; AtTime searches it.
	AppendTime int64
	// Key is the message key, kept with the message (nil for none). A
	// produce with Key partitioning stores its key in every message of
	// the batch that has none.
	Key []byte
	// Headers are optional user headers.
	Headers []Header
	// Payload is the message body. Produce copies it; messages returned
	// by Poll or a Consumer must be treated as read-only.
	Payload []byte
}

// Header is a message's user header.
type Header struct {
	Key   string
	Value []byte
}

// Message and Header have the layout of the partition package's types,
// so a batch crosses between the client API and the engine without a copy
// on the produce and poll paths. TestMessageLayout fails the build's tests
// if the two ever diverge.

// engineMessages is msgs as the engine's messages (the same memory).
func engineMessages(msgs []Message) []partition.Message {
	return unsafe.Slice((*partition.Message)(unsafe.Pointer(unsafe.SliceData(msgs))), len(msgs))
}

// clientMessages is msgs as the client's messages (the same memory).
func clientMessages(msgs []partition.Message) []Message {
	return unsafe.Slice((*Message)(unsafe.Pointer(unsafe.SliceData(msgs))), len(msgs))
}

// MessageSize is the bytes m counts against MaxMessageSize and
// MaxBatchBytes: its key, payload and headers, header framing included.
func MessageSize(m *Message) int { return messageSize(m) }

// messageSize is partition.MessageSize of m.
func messageSize(m *Message) int {
	return partition.MessageSize((*partition.Message)(unsafe.Pointer(m)))
}

// Package bus is parkway's node-to-node message transport: raft messages for
// the metadata group and the partition groups, plus forwarded client
// requests and their replies, all carried as opaque Messages.
//
// Two implementations share the Bus interface:
//
//   - Network (in memory) for tests and the simulator, with deterministic
//     fault injection (cuts, partitions, drop, duplicate, reorder, delay)
//     driven by a seeded PCG and an injected clock;
//   - TCPBus, length-prefixed frames over one outbound TCP connection per
//     peer, modelled on hashicorp/raft's NetworkTransport.
//
// Both are lossy by design: a full queue or inbox drops the message rather
// than blocking the sender (raft re-sends), and both copy the payload on
// Send so callers may reuse their buffers.
//
// Recv returns a channel that stays open while the endpoint is open and is
// closed by Close; messages already queued in it remain readable before the
// close is observed.
//
// The From field of a sent Message is always overwritten with the sending
// endpoint's ID: the receiver can trust it only as far as it trusts the
// transport (see TCPBus: unauthenticated, for trusted networks only).
package transport

import "errors"

// NodeID identifies a node (raft node ids: non-zero).
type NodeID uint64

// Message is one unit on the bus: an opaque payload with its routing header.
type Message struct {
	From, To NodeID
	// Kind lets the receiver dispatch without decoding the payload (e.g. 1 =
	// raft for a group, 2 = client request, 3 = client reply); opaque to the
	// bus.
	Kind uint8
	// Group is the raft group / namespace the payload belongs to; opaque to
	// the bus.
	Group   uint64
	Payload []byte
}

// Bus is one node's endpoint.
type Bus interface {
	// Send queues m for m.To without blocking. It sets m.From to ID() and
	// copies the payload. It returns ErrQueueFull when the bounded per-peer
	// queue is full (the message is dropped: raft re-sends), ErrUnknownPeer
	// for an address it cannot route, ErrTooLarge for a message that exceeds
	// the frame limit, and ErrClosed once the endpoint is closed. A nil
	// error means queued, not delivered.
	Send(m Message) error
	// Recv is the channel of messages addressed to this node. It is never
	// closed while the endpoint is open and is closed by Close.
	Recv() <-chan Message
	// ID is this endpoint's node id.
	ID() NodeID
	// Close stops the endpoint; it is idempotent and waits for the
	// endpoint's goroutines.
	Close() error
}

// Errors returned by Send.
var (
	ErrQueueFull   = errors.New("bus: send queue full")
	ErrUnknownPeer = errors.New("bus: unknown peer")
	ErrClosed      = errors.New("bus: closed")
	ErrTooLarge    = errors.New("bus: message exceeds the frame limit")
)

// DefaultQueueSize bounds per-peer send queues and inboxes (the reference
// inbox size).
const DefaultQueueSize = 1024

func clonePayload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return append(make([]byte, 0, len(p)), p...)
}

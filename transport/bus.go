// Package transport is parkway's node-to-node message bus: raft messages
// for the metadata group and the partition groups, plus forwarded client
// requests and their replies, all carried as opaque Messages.
//
// Two implementations share the Bus interface:
//
//   - Network (in memory) for tests and the simulator, with deterministic
//     fault injection (cuts, partitions, drop, duplicate, reorder, delay)
//     driven by a seeded PCG and an injected clock;
//   - TCPBus, length-prefixed frames over one outbound TCP connection per
//     peer, modelled on hashicorp/raft's NetworkTransport, with TLS 1.3
//     and mutual authentication.
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
// endpoint's ID; what a receiver may conclude from it depends on the
// transport (below).
//
// # Security model (TCPBus)
//
// With TCPOptions.TLS, every connection is TLS 1.3 with both sides
// presenting a certificate. A certificate is accepted only if it chains to
// the cluster's CAs (TLSConfig.CAs, never the system roots), is valid now,
// allows the direction's key usage, and carries exactly one identity URI
// parkway://<cluster-id>/node/<id> for this bus's cluster (IdentityURI).
// The dialling side also requires that id to be the peer it meant to
// reach; the accepting side binds the id to the connection and drops (and
// counts) any frame whose From differs, closing the connection.
//
// What that protects: frames cannot be read or altered on the network; a
// process without a member's key cannot deliver a frame (a stranger, a
// member of another cluster, an expired certificate are refused at the
// handshake); and a member cannot send frames in another member's name.
// Refusals are counted in TCPStats (RejectedHandshakes, ForgedFrames).
//
// What it does not: an authenticated member is trusted to follow the
// protocol. A member — or whoever holds its key — can still send any raft
// message in its own name for the groups it belongs to (votes, appends,
// snapshots, forwarded requests), so a compromised member can disturb or
// corrupt those groups; validating what a member sends is the job of the
// layers above. The transport's membership is whatever the CAs sign, not
// the raft configuration: a node removed from its groups but holding a
// valid certificate can still connect, until TCPBus.RemovePeer is called
// for it (its connections are then closed, new ones refused once
// authenticated, counted as RejectedHandshakes, until AddPeer admits it
// again). There is no CRL or OCSP checking; revoking a key means
// restarting every bus with CAs that no longer sign it, or letting its
// certificate expire. Addresses are not authenticated
// — a peer is known by its id, not its host name. TLS hides payloads, not
// traffic volume or timing.
//
// Whatever the mode, no peer can make the bus hold more than its budgets:
// each inbound frame is charged to MaxConnBytes and MaxTotalBytes — and,
// with TLS, to its authenticated sender's MaxPeerBytes across all its
// connections — before its payload is allocated, until the consumer of
// Recv takes it; inbound connections are bounded by MaxConns, those not
// yet authenticated apart by MaxHandshakes (and MaxAddrHandshakes from
// one address), and one member's by MaxPeerConns; a
// handshake must finish within HandshakeTimeout, a frame within
// FrameTimeout, and each 64 KiB of a frame within StallTimeout. A
// connection over a budget or a deadline is closed and counted. So one
// member stalling near-complete frames on many connections holds at most
// its MaxPeerBytes share, for at most StallTimeout per stall (or
// FrameTimeout if it trickles), and the other members' frames are
// delivered meanwhile; several members acting together can still fill
// MaxTotalBytes. What the consumer holds after taking a message (a
// forwarded request being served, say) is the consumer's to bound.
// Connections that never finish a handshake hold at most MaxHandshakes
// slots, never those of the members' authenticated connections, and at
// most MaxAddrHandshakes from one address, so members redialling from
// other addresses are admitted; an outsider from many addresses can
// still hold every handshake slot for up to HandshakeTimeout at a time,
// delaying the members' redials, a denial of service the listener's
// network placement must prevent.
//
// With TCPOptions.InsecurePlaintext nothing is authenticated: a receiver
// takes From on trust, so anyone who can reach the listener can send
// frames as any node. ListenTCP refuses to start unless one of the two
// modes is chosen (ErrTLSRequired).
package transport

import "errors"

// NodeID identifies a node (raft node ids: non-zero).
type NodeID uint64

// Message is one unit on the bus: an opaque payload with its routing header.
type Message struct {
	From, To NodeID
	// Kind lets the receiver dispatch without decoding the payload; opaque
	// to the bus, which never reads it. The node engine's kinds (host's
	// Kind* constants) are the wire protocol between nodes.
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
	// ErrInvalidNodeID reports node id 0, which names no node: as a
	// bus's own id (ListenTCP, Network.Endpoint's endpoint for it) or a
	// peer's (AddPeer, RemovePeer).
	ErrInvalidNodeID = errors.New("bus: node id 0 names no node")
)

// DefaultQueueSize bounds per-peer send queues and inboxes (the reference
// inbox size).
const DefaultQueueSize = 1024

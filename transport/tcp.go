package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/internal/inbound"
	"github.com/parkway-io/parkway/internal/run"
	"github.com/parkway-io/parkway/internal/slots"
)

// TCPOptions configure a TCPBus. Zero values take the defaults, except that
// exactly one of TLS and InsecurePlaintext must be set.
type TCPOptions struct {
	// TLS authenticates and encrypts every connection with TLS 1.3 and
	// mutual certificate authentication bound to node ids (see TLSConfig
	// and the package documentation).
	TLS *TLSConfig
	// InsecurePlaintext runs the bus without TLS: frames travel in clear
	// and a receiver believes the sender named in each frame, so anyone
	// who can reach the listener can impersonate any node. Only for tests
	// and networks where every process that can connect is trusted.
	InsecurePlaintext bool

	// QueueSize bounds each peer's send queue and the inbox behind Recv
	// (default DefaultQueueSize).
	QueueSize int
	// MaxFrame bounds a frame's length field, header included (default
	// DefaultMaxFrame, at most math.MaxUint32). Send refuses a larger
	// message with ErrTooLarge; a peer announcing a larger frame has its
	// connection closed.
	MaxFrame int
	// MaxConnBytes bounds the frame bytes one inbound connection has in
	// flight: the frame being read plus its frames received and not yet
	// taken from Recv. A frame that would pass it closes the connection
	// (counted as OverBudget) before its payload is allocated. Default
	// 2×MaxFrame, lowered to MaxTotalBytes; it must be at least MaxFrame.
	MaxConnBytes int64
	// MaxTotalBytes bounds the same sum over all inbound connections
	// (default 4×MaxFrame); it must be at least MaxConnBytes. With
	// MaxConns and the fixed per-connection buffers (about 64 KiB, plus
	// TLS's) it bounds the memory remote peers can make the bus hold.
	MaxTotalBytes int64
	// MaxPeerBytes bounds the same sum over all the inbound connections
	// of one authenticated peer (TLS only: without it a sender is whoever
	// a frame names). A frame that would pass it closes its connection
	// (counted as OverBudget), so no one peer — opening many connections
	// and stalling a near-complete frame on each — holds more than this
	// share of MaxTotalBytes, and the other peers keep MaxTotalBytes −
	// MaxPeerBytes. Default min(MaxConnBytes, max(MaxFrame,
	// MaxTotalBytes/2)); it must be at least MaxFrame and at most
	// MaxTotalBytes.
	MaxPeerBytes int64
	// MaxConns bounds the open inbound connections, handshaking ones
	// included (default DefaultMaxConns); one more is closed at once and
	// counted as RejectedConns. A cluster of n nodes needs n-1, plus
	// slack for reconnections that race the old connection's close.
	// Size it at least MaxHandshakes + (n-1)×MaxPeerConns, so that the
	// members' authenticated connections always find a slot whatever
	// holds the handshaking ones.
	MaxConns int
	// MaxHandshakes bounds the inbound connections that have not yet
	// completed their TLS handshake (TLS only: in plaintext a connection
	// carries frames at once), and MaxAddrHandshakes those of them from
	// one remote IP address. A connection past either bound is closed at
	// once and counted as RejectedConns; those already handshaking are
	// kept. So connections that never finish a handshake — an outsider
	// without a valid certificate, a slowloris — hold at most
	// MaxHandshakes of the MaxConns slots, never the ones members'
	// authenticated connections hold, and those from one address at most
	// MaxAddrHandshakes, so a member redialling from another address is
	// admitted while one address floods. Defaults MaxConns/4 (but at
	// least min(MaxConns, 8), so that a small MaxConns still takes a few
	// redials at once) and min(DefaultMaxAddrHandshakes, MaxHandshakes); it must hold
	// that MaxAddrHandshakes ≤ MaxHandshakes ≤ MaxConns. Members sharing
	// an address (one host, a NAT) share its MaxAddrHandshakes: a
	// handshake refused is retried with the dialler's backoff.
	MaxHandshakes, MaxAddrHandshakes int
	// MaxPeerConns bounds the open inbound connections of one
	// authenticated peer (TLS only: without it a sender is whoever a frame
	// names, so a forger could close another peer's connections). When a
	// peer's connection past the bound completes its handshake, the
	// peer's oldest inbound connection is closed (counted as
	// PeerConnsClosed): a sender writes to its newest connection, and an
	// old one a partition cut without a FIN would otherwise hold its slot
	// until TCP keepalive notices. So no one member, however many
	// connections it opens, holds more than MaxPeerConns of the MaxConns
	// slots, and the others' redials are accepted. Default
	// min(DefaultMaxPeerConns, MaxConns); it must be at most MaxConns.
	MaxPeerConns int
	// HandshakeTimeout bounds a TLS handshake, inbound (from the
	// connection's accept) and outbound (default 10 s), so a connection
	// that never completes one (a slowloris) does not hold a
	// MaxHandshakes slot for long.
	HandshakeTimeout time.Duration
	// FrameTimeout bounds the reading of one frame once its length field
	// has arrived (default 30 s), so a peer cannot hold budget by sending
	// a frame slowly.
	FrameTimeout time.Duration
	// StallTimeout bounds a stall inside a frame: once its length field
	// has arrived, each further 64 KiB of it (or its rest) must arrive
	// within StallTimeout (default 5 s, at most FrameTimeout), so a frame
	// that stops short of its end releases its budget well before
	// FrameTimeout.
	StallTimeout time.Duration
	// IdleTimeout, when positive, closes an inbound connection on which no
	// frame starts for that long (default 0: never). Set it above the
	// longest silence of a healthy peer (several raft election timeouts):
	// frames a sender writes into a connection the receiver has just
	// closed are lost, though raft re-sends them.
	IdleTimeout time.Duration

	// Clock drives the reconnect backoff timers (default clock.Real). Dial
	// timeouts, handshake, read and write deadlines are enforced by the
	// net package on the wall clock whatever the Clock.
	Clock clock.Clock
	// BackoffMin and BackoffMax bound the exponential reconnect backoff
	// (defaults 10 ms and 1 s). The backoff doubles per failed dial and
	// resets after a successful one.
	BackoffMin, BackoffMax time.Duration
	// DialTimeout bounds one connection attempt, TLS handshake excluded
	// (default 1 s).
	DialTimeout time.Duration
	// WriteTimeout bounds a stalled write to a peer (default 10 s); past
	// it the connection is dropped and redialled.
	WriteTimeout time.Duration
}

// DefaultMaxConns is the default bound on open inbound connections.
const DefaultMaxConns = 256

// DefaultMaxAddrHandshakes is the default bound on the inbound
// connections handshaking from one remote address.
const DefaultMaxAddrHandshakes = 16

// DefaultMaxPeerConns is the default bound on one authenticated peer's
// open inbound connections: one in use, and room for redials that race
// the close of connections the peer gave up on.
const DefaultMaxPeerConns = 8

// maxFrameLen is the largest frame the 4-byte length field can name. A
// variable, not a constant, so that the conversion to int compiles on
// 32-bit platforms, where no int exceeds it and the clamp never runs.
var maxFrameLen uint64 = math.MaxUint32

// Errors returned by ListenTCP for its options.
var (
	// ErrTLSRequired: neither TLS nor InsecurePlaintext is set. A bus is
	// never plaintext by omission.
	ErrTLSRequired = errors.New("bus: TCPOptions.TLS is not set (set InsecurePlaintext to run without TLS)")
	// ErrInvalidOptions: options that contradict each other or a TLS
	// configuration that cannot work (wrapped with the reason).
	ErrInvalidOptions = errors.New("bus: invalid TCP options")
)

// setDefaults fills the zero fields and checks the options.
func (o *TCPOptions) setDefaults(id NodeID) error {
	switch {
	case o.TLS == nil && !o.InsecurePlaintext:
		return ErrTLSRequired
	case o.TLS != nil && o.InsecurePlaintext:
		return fmt.Errorf("%w: both TLS and InsecurePlaintext set", ErrInvalidOptions)
	case o.TLS != nil:
		if !validClusterID(o.TLS.ClusterID) {
			return fmt.Errorf("%w: cluster id %q (letters, digits, '-' and '.' only)", ErrInvalidOptions, o.TLS.ClusterID)
		}
		if o.TLS.CAs == nil {
			return fmt.Errorf("%w: TLS.CAs not set", ErrInvalidOptions)
		}
		if o.TLS.GetCertificate == nil {
			if err := checkOwnCertificate(o.TLS, id); err != nil {
				return err
			}
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MaxFrame < headerLen {
		o.MaxFrame = headerLen
	}
	if uint64(o.MaxFrame) > maxFrameLen {
		o.MaxFrame = int(maxFrameLen)
	}
	frame := int64(o.MaxFrame)
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = 4 * frame
	}
	if o.MaxConnBytes <= 0 {
		o.MaxConnBytes = min(2*frame, o.MaxTotalBytes)
	}
	if o.MaxConnBytes < frame {
		return fmt.Errorf("%w: MaxConnBytes %d below MaxFrame %d", ErrInvalidOptions, o.MaxConnBytes, frame)
	}
	if o.MaxTotalBytes < o.MaxConnBytes {
		return fmt.Errorf("%w: MaxTotalBytes %d below MaxConnBytes %d", ErrInvalidOptions, o.MaxTotalBytes, o.MaxConnBytes)
	}
	if o.MaxPeerBytes <= 0 {
		o.MaxPeerBytes = min(o.MaxConnBytes, max(frame, o.MaxTotalBytes/2))
	}
	if o.MaxPeerBytes < frame || o.MaxPeerBytes > o.MaxTotalBytes {
		return fmt.Errorf("%w: MaxPeerBytes %d outside [MaxFrame %d, MaxTotalBytes %d]", ErrInvalidOptions, o.MaxPeerBytes, frame, o.MaxTotalBytes)
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxPeerConns <= 0 {
		o.MaxPeerConns = min(DefaultMaxPeerConns, o.MaxConns)
	}
	if o.MaxPeerConns > o.MaxConns {
		return fmt.Errorf("%w: MaxPeerConns %d above MaxConns %d", ErrInvalidOptions, o.MaxPeerConns, o.MaxConns)
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = max(o.MaxConns/4, min(o.MaxConns, 8))
	}
	if o.MaxAddrHandshakes <= 0 {
		o.MaxAddrHandshakes = min(DefaultMaxAddrHandshakes, o.MaxHandshakes)
	}
	if o.MaxHandshakes > o.MaxConns || o.MaxAddrHandshakes > o.MaxHandshakes {
		return fmt.Errorf("%w: MaxAddrHandshakes %d, MaxHandshakes %d, MaxConns %d not in order", ErrInvalidOptions, o.MaxAddrHandshakes, o.MaxHandshakes, o.MaxConns)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.FrameTimeout <= 0 {
		o.FrameTimeout = 30 * time.Second
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 5 * time.Second
	}
	o.StallTimeout = min(o.StallTimeout, o.FrameTimeout)
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 10 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(time.Second, o.BackoffMin)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	return nil
}

// TCPStats count a TCPBus's traffic and failures. The counters only grow;
// InboundConns and InFlightBytes are gauges.
type TCPStats struct {
	// Sent counts messages accepted by Send (queued, not yet written).
	Sent uint64
	// Received counts messages put into the inbox.
	Received uint64
	// QueueFull counts Sends refused with ErrQueueFull.
	QueueFull uint64
	// PeerRemoved counts accepted messages dropped unsent because
	// RemovePeer removed their peer.
	PeerRemoved uint64
	// InboxFull counts received messages dropped because the inbox held
	// QueueSize messages.
	InboxFull uint64
	// BadFrames counts inbound connections closed for a malformed frame
	// (length out of bounds, sender 0, or addressed to another node).
	BadFrames uint64
	// ForgedFrames counts inbound connections closed for a frame whose
	// sender differs from the node the connection authenticated as (TLS
	// only); the frame is dropped.
	ForgedFrames uint64
	// RejectedHandshakes counts TLS handshakes that failed or were
	// refused, in either direction: no certificate, one not signed by the
	// cluster's CAs, expired, of another cluster, naming another node than
	// the one dialled or one RemovePeer removed, or not finished within
	// HandshakeTimeout.
	RejectedHandshakes uint64
	// RemovedSender counts inbound connections closed for a frame whose
	// sender RemovePeer removed (with TLS such a peer is refused at the
	// handshake instead, so this counts only frames that were on their way
	// while RemovePeer ran); the frame is dropped.
	RemovedSender uint64
	// RejectedConns counts inbound connections closed on accept because
	// MaxConns were open, or MaxHandshakes were handshaking, or
	// MaxAddrHandshakes from the connection's address.
	RejectedConns uint64
	// PeerConnsClosed counts inbound connections closed because their
	// peer opened more than MaxPeerConns (its oldest go first).
	PeerConnsClosed uint64
	// OverBudget counts inbound connections closed because a frame would
	// have passed MaxConnBytes, MaxPeerBytes or MaxTotalBytes.
	OverBudget uint64
	// ReadTimeouts counts inbound connections closed by FrameTimeout,
	// StallTimeout or IdleTimeout.
	ReadTimeouts uint64
	// Dials and DialErrors count outbound connection attempts and failures
	// (a refused handshake included).
	Dials, DialErrors uint64
	// WriteErrors counts outbound connections dropped on a write error;
	// the frames buffered for that connection are lost.
	WriteErrors uint64
	// FramesWritten and BytesWritten count the frames (and their bytes,
	// length prefix and header included) written to outbound connections;
	// those buffered on a connection that then fails are counted too.
	FramesWritten, BytesWritten uint64
	// FramesRead and BytesRead count the well-formed frames (and their
	// bytes, as above) read from inbound connections, whether or not the
	// inbox had room for them.
	FramesRead, BytesRead uint64
	// InboundConns is the number of open inbound connections.
	InboundConns uint64
	// InFlightBytes is the frame bytes inbound connections hold now
	// (being read, or received and not yet taken from Recv);
	// PeakInFlightBytes is its high-water mark. Neither passes
	// MaxTotalBytes.
	InFlightBytes, PeakInFlightBytes uint64
}

type tcpStats struct {
	sent, received, queueFull, inboxFull, badFrames atomic.Uint64
	forged, rejectedHS, rejectedConns, overBudget   atomic.Uint64
	peerConnsClosed                                 atomic.Uint64
	readTimeouts, peerRemoved, removedSender        atomic.Uint64
	dials, dialErrors, writeErrors                  atomic.Uint64
	framesWritten, bytesWritten                     atomic.Uint64
	framesRead, bytesRead                           atomic.Uint64
}

// TCPBus is a Bus over TCP, with TLS (see TLSConfig) or, explicitly,
// without. Each peer gets one outbound connection, dialled lazily by that
// peer's writer goroutine when it has something to send and redialled with
// exponential backoff after a failure; frames go out through a
// bufio.Writer flushed whenever the peer's queue is momentarily empty. An
// accept loop starts a goroutine per inbound connection that completes the
// handshake and then reads frames into the inbox, charging each frame to
// the connection's and the bus's byte budgets before allocating it; the
// bytes are released once Recv's consumer has taken the message. All
// goroutines belong to one run.Group, stopped by Close.
//
// The writer keeps the message it holds while dialling fails, so a dead
// peer's queue fills and Send reports ErrQueueFull; messages buffered on a
// connection that breaks are lost (raft re-sends).
//
// RemovePeer stops a peer's writer and takes the peer's admission back:
// its connections are closed and it cannot deliver frames until AddPeer
// admits it again.
type TCPBus struct {
	id        NodeID
	bufs      *bufPool // payload buffers: sent ones come back after their write, received ones by Recycle
	ln        net.Listener
	opts      TCPOptions
	maxFrame  uint32
	serverTLS *tls.Config // nil in plaintext
	clientTLS *tls.Config // template, cloned per dial
	in        *inbox
	group     *run.Group
	stats     tcpStats

	closed    atomic.Bool
	closeOnce sync.Once

	peers atomic.Pointer[map[NodeID]*tcpPeer] // copy-on-write under mu
	// removed holds the ids RemovePeer took out and AddPeer has not put
	// back: their handshakes and frames are refused. Copy-on-write under
	// mu; it grows by one id per removed node.
	removed atomic.Pointer[map[NodeID]struct{}]
	// removing serialises RemovePeer calls, so a second call for an id
	// returns only once the first has stopped the writer.
	removing sync.Mutex

	mu    sync.Mutex
	conns map[net.Conn]NodeID // every open connection, both directions, with its peer (0: not known yet)
	// slots decides which inbound connections are admitted, until when
	// they may handshake, and which of a member's to close past
	// MaxPeerConns (internal/slots: the same core the simulator drives);
	// slotConn maps its connections back to the sockets. Both under mu.
	slots    *slots.Table
	slotConn map[*slots.Conn]net.Conn

	// budget decides what the inbound connections may hold and until
	// when (internal/inbound: the same core the simulator drives). bmu
	// serialises the calls that touch its shared counts (Open, Admit,
	// Close, Release, Used); a connection's own timing calls (Begin,
	// Next, Complete) are its reader's alone. bmu is never held while
	// taking another lock.
	bmu    sync.Mutex
	budget *inbound.Budget
}

type tcpPeer struct {
	id   NodeID
	addr atomic.Pointer[string]
	q    chan Message
	// ctx ends the writer, with the bus or by RemovePeer (cancel); done
	// is closed once the writer has returned.
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	removed atomic.Bool // set by RemovePeer before it cancels
}

var _ Bus = (*TCPBus)(nil)

// ListenTCP listens on addr as node id and returns a bus that can send to
// peers (id → "host:port"); an entry for id itself is ignored. More peers
// can be added later with AddPeer. It returns ErrTLSRequired unless
// opts.TLS or opts.InsecurePlaintext is set, and an error wrapping
// ErrInvalidOptions for inconsistent options or a static certificate that
// does not authenticate as id.
func ListenTCP(id NodeID, addr string, peers map[NodeID]string, opts TCPOptions) (*TCPBus, error) {
	if id == 0 {
		return nil, fmt.Errorf("%w: the bus's own", ErrInvalidNodeID)
	}
	for pid := range peers {
		if pid == 0 {
			return nil, fmt.Errorf("%w: a peer's (at %q)", ErrInvalidNodeID, peers[pid])
		}
	}
	if err := opts.setDefaults(id); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &TCPBus{
		id:       id,
		ln:       ln,
		opts:     opts,
		maxFrame: uint32(opts.MaxFrame),
		group:    run.NewGroup(),
		conns:    make(map[net.Conn]NodeID),
		slots: slots.New(slots.Limits{
			MaxConns: opts.MaxConns, MaxHandshakes: opts.MaxHandshakes, MaxAddrHandshakes: opts.MaxAddrHandshakes,
			MaxPeerConns: opts.MaxPeerConns, HandshakeTimeout: opts.HandshakeTimeout,
		}),
		slotConn: make(map[*slots.Conn]net.Conn),
		bufs:     newBufPool(),
		budget: inbound.New(inbound.Limits{
			MaxConn: opts.MaxConnBytes, MaxPeer: opts.MaxPeerBytes, MaxTotal: opts.MaxTotalBytes,
			FrameTimeout: opts.FrameTimeout, StallTimeout: opts.StallTimeout,
		}),
	}
	b.in = newInbox(opts.QueueSize, b.release)
	if opts.TLS != nil {
		b.serverTLS, b.clientTLS = tlsConfigs(opts.TLS)
	}
	empty := map[NodeID]*tcpPeer{}
	b.peers.Store(&empty)
	none := map[NodeID]struct{}{}
	b.removed.Store(&none)
	b.group.Go(b.acceptLoop)
	for pid, paddr := range peers {
		if err := b.AddPeer(pid, paddr); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// AddPeer adds a peer, or changes the address of a known one (used from
// the next dial on). An entry for the bus's own id is ignored. A peer
// RemovePeer removed is admitted again.
func (b *TCPBus) AddPeer(id NodeID, addr string) error {
	if id == 0 {
		return fmt.Errorf("%w: a peer's", ErrInvalidNodeID)
	}
	if id == b.id {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	if removed := *b.removed.Load(); len(removed) > 0 {
		if _, ok := removed[id]; ok {
			next := maps.Clone(removed)
			delete(next, id)
			b.removed.Store(&next)
		}
	}
	old := *b.peers.Load()
	if p, ok := old[id]; ok {
		p.addr.Store(&addr)
		return nil
	}
	// The writer's context is the group's, so Close ends it too; Close
	// sets closed before taking mu, so the group is not stopping yet.
	ctx, cancel := context.WithCancel(b.group.Context())
	p := &tcpPeer{id: id, q: make(chan Message, b.opts.QueueSize), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	p.addr.Store(&addr)
	next := maps.Clone(old)
	next[id] = p
	b.peers.Store(&next)
	b.group.Go(func(context.Context) {
		defer close(p.done)
		defer cancel()
		b.writeLoop(p.ctx, p)
	})
	return nil
}

// RemovePeer takes a peer out, typically a node removed from the cluster
// (after Cluster.RemoveNode, on every remaining member's bus). When it
// returns, the peer's writer has stopped and the messages queued for it
// are dropped (counted as PeerRemoved); its connections, both directions,
// are closed; Send to it fails with ErrUnknownPeer; and the id is refused
// as a sender: with TLS a connection that authenticates as it is closed
// when its handshake completes (counted as RejectedHandshakes), and a
// frame from it closes the connection it came on (counted as
// RemovedSender). The refusal holds whether or not the id was a peer,
// until AddPeer admits it again. Without TLS it only holds against a
// process that names itself truthfully.
//
// Removing an id that is not a peer, or the bus's own id, is a no-op
// beyond that; it returns ErrClosed once the bus is closed. A Send racing
// with RemovePeer may be accepted; its message is then dropped.
func (b *TCPBus) RemovePeer(id NodeID) error {
	if id == 0 {
		return fmt.Errorf("%w: a peer's", ErrInvalidNodeID)
	}
	if id == b.id {
		return nil
	}
	b.removing.Lock()
	defer b.removing.Unlock()
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return ErrClosed
	}
	if removed := *b.removed.Load(); !has(removed, id) {
		next := maps.Clone(removed)
		next[id] = struct{}{}
		b.removed.Store(&next)
	}
	old := *b.peers.Load()
	p := old[id]
	if p != nil {
		// removed first: a Send that loaded the old map sees it.
		p.removed.Store(true)
		next := maps.Clone(old)
		delete(next, id)
		b.peers.Store(&next)
		p.cancel()
	}
	// Under mu, so a connection this id opens after an AddPeer that
	// follows is not closed here. The connections' owners untrack them.
	for c, peer := range b.conns {
		if peer == id {
			c.Close()
		}
	}
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	// The writer returns promptly: its context is done and its connection
	// closed, so neither a dial, a backoff nor a stalled write holds it.
	<-p.done
	b.dropQueued(p)
	return nil
}

// dropQueued empties a removed peer's queue, counting the drops.
func (b *TCPBus) dropQueued(p *tcpPeer) {
	for {
		select {
		case m := <-p.q:
			b.bufs.put(m.Payload)
			b.stats.peerRemoved.Add(1)
		default:
			return
		}
	}
}

func has(set map[NodeID]struct{}, id NodeID) bool {
	_, ok := set[id]
	return ok
}

// isRemoved reports whether RemovePeer took id out (and AddPeer has not
// put it back).
func (b *TCPBus) isRemoved(id NodeID) bool {
	removed := *b.removed.Load()
	return len(removed) > 0 && has(removed, id)
}

// bind records that inbound connection c carries frames from peer, so
// RemovePeer can close it; false when peer was removed (c is left for
// its owner to close). Under mu, so either RemovePeer sees the binding
// or bind sees the removal.
func (b *TCPBus) bind(c net.Conn, peer NodeID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isRemoved(peer) {
		return false
	}
	if b.conns != nil {
		if _, ok := b.conns[c]; ok {
			b.conns[c] = peer
		}
	}
	return true
}

// ID is this endpoint's node id.
func (b *TCPBus) ID() NodeID { return b.id }

// Addr is the bound listen address.
func (b *TCPBus) Addr() net.Addr { return b.ln.Addr() }

// Recv is the inbox; Close closes it.
func (b *TCPBus) Recv() <-chan Message { return b.in.ch }

// Stats returns a snapshot of the counters.
func (b *TCPBus) Stats() TCPStats {
	b.in.reclaim()
	b.bmu.Lock()
	used, peak := b.budget.Used(), b.budget.Peak()
	b.bmu.Unlock()
	b.mu.Lock()
	open := b.slots.Open()
	b.mu.Unlock()
	s := &b.stats
	return TCPStats{
		Sent: s.sent.Load(), Received: s.received.Load(),
		QueueFull: s.queueFull.Load(), InboxFull: s.inboxFull.Load(),
		BadFrames: s.badFrames.Load(), ForgedFrames: s.forged.Load(),
		RejectedHandshakes: s.rejectedHS.Load(), RejectedConns: s.rejectedConns.Load(),
		PeerConnsClosed: s.peerConnsClosed.Load(),
		OverBudget:      s.overBudget.Load(), ReadTimeouts: s.readTimeouts.Load(),
		PeerRemoved: s.peerRemoved.Load(), RemovedSender: s.removedSender.Load(),
		Dials: s.dials.Load(), DialErrors: s.dialErrors.Load(),
		WriteErrors:   s.writeErrors.Load(),
		FramesWritten: s.framesWritten.Load(), BytesWritten: s.bytesWritten.Load(),
		FramesRead: s.framesRead.Load(), BytesRead: s.bytesRead.Load(),
		InboundConns:      uint64(max(open, 0)),
		InFlightBytes:     uint64(max(used, 0)),
		PeakInFlightBytes: uint64(max(peak, 0)),
	}
}

// Recycle takes back a delivered payload its receiver is done with
// (Recycler); frames read later may be read into it.
func (b *TCPBus) Recycle(payload []byte) { b.bufs.put(payload) }

// Send queues m for m.To's writer without blocking. A message to the bus's
// own id goes straight into its inbox (dropped, counted as InboxFull, when
// full).
func (b *TCPBus) Send(m Message) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if headerLen+len(m.Payload) > int(b.maxFrame) {
		return ErrTooLarge
	}
	m.From = b.id
	m.Payload = b.bufs.clone(m.Payload)
	if m.To == b.id {
		b.stats.sent.Add(1)
		if !b.deliver(m, inbound.Charge{}) && b.closed.Load() {
			return ErrClosed
		}
		return nil
	}
	p, ok := (*b.peers.Load())[m.To]
	if !ok || p.removed.Load() {
		return ErrUnknownPeer
	}
	select {
	case p.q <- m:
		b.stats.sent.Add(1)
		if p.removed.Load() {
			// RemovePeer ran since the check and may have emptied the
			// queue already: nothing else will.
			b.dropQueued(p)
		}
		return nil
	default:
		b.stats.queueFull.Add(1)
		return ErrQueueFull
	}
}

// Close closes the listener and every connection, stops every goroutine,
// waits for them, and then closes Recv's channel; messages already queued
// in it remain readable. It is idempotent; a concurrent second call waits for the
// first.
func (b *TCPBus) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.mu.Lock()
		conns := b.conns
		b.conns = nil
		b.mu.Unlock()
		b.ln.Close()
		for c := range conns {
			c.Close()
		}
		b.group.Stop()
		b.in.close()
	})
	return nil
}

// track registers c, a connection to or from peer (0: not known yet), so
// Close and RemovePeer can close it; false (and c closed) once the bus is
// closing or the outbound peer p (nil for an inbound connection) removed.
func (b *TCPBus) track(c net.Conn, peer NodeID, p *tcpPeer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() || (p != nil && p.removed.Load()) {
		c.Close()
		return false
	}
	b.conns[c] = peer
	return true
}

func (b *TCPBus) untrack(c net.Conn) {
	b.mu.Lock()
	if b.conns != nil {
		delete(b.conns, c)
	}
	b.mu.Unlock()
	c.Close()
}

// deliver puts m into the inbox; false (its charge released, counted as
// InboxFull) when the inbox is full or closed.
func (b *TCPBus) deliver(m Message, c inbound.Charge) bool {
	if b.in.push(m, c) {
		b.stats.received.Add(1)
		return true
	}
	b.release(c)
	b.stats.inboxFull.Add(1)
	return false
}

// release returns the charges' bytes to their connections', their peers'
// and the bus's budgets.
func (b *TCPBus) release(cs ...inbound.Charge) {
	b.bmu.Lock()
	for _, c := range cs {
		b.budget.Release(c)
	}
	b.bmu.Unlock()
}

// locked runs f on the inbound budget under bmu.
func (b *TCPBus) locked(f func()) {
	b.bmu.Lock()
	defer b.bmu.Unlock()
	f()
}

// admit charges a frame of n bytes to ic, its peer and the total, all or
// nothing. When a budget is short it first reclaims what the consumer
// has taken.
func (b *TCPBus) admit(ic *inbound.Conn, n int64) bool {
	for try := 0; try < 2; try++ {
		ok := false
		b.locked(func() { ok = ic.Admit(n) })
		if ok {
			return true
		}
		if try == 0 {
			b.in.reclaim()
		}
	}
	return false
}

// sleep waits d on the injected clock; false when ctx ended first.
func (b *TCPBus) sleep(ctx context.Context, d time.Duration) bool {
	t := b.opts.Clock.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C():
		return true
	}
}

func (b *TCPBus) acceptLoop(ctx context.Context) {
	bo := backoff.New(b.opts.BackoffMin, b.opts.BackoffMax)
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if b.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. out of file descriptors): back off.
			if !b.sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		bo.Reset()
		sc, ok := b.admitConn(c)
		if !ok {
			return
		}
		if sc == nil {
			b.stats.rejectedConns.Add(1)
			c.Close()
			continue
		}
		// The accept loop is itself in the group, so Go cannot race Stop's
		// Wait with a zero counter.
		b.group.Go(func(ctx context.Context) { b.serve(ctx, c, sc) })
	}
}

// admitConn asks the slots whether c, just accepted, is admitted; if so
// it tracks c and returns its slot (a plaintext connection's established
// at once: it has no handshake). It returns nil for a connection
// refused (for the caller to close), and false, c closed, once the bus
// is closing.
func (b *TCPBus) admitConn(c net.Conn) (*slots.Conn, bool) {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		c.Close()
		return nil, false
	}
	sc, v := b.slots.Accept(addr, time.Now())
	if v != slots.Admitted {
		return nil, true
	}
	if b.serverTLS == nil {
		sc.Establish(0)
	}
	b.conns[c] = 0
	b.slotConn[sc] = c
	return sc, true
}

// serve runs one inbound connection: the TLS handshake (if any), which
// authenticates the peer's node id, then the frames. sc is its slot.
func (b *TCPBus) serve(ctx context.Context, c net.Conn, sc *slots.Conn) {
	defer func() {
		b.mu.Lock()
		sc.Close()
		delete(b.slotConn, sc)
		b.mu.Unlock()
		b.untrack(c)
	}()
	rw, peer := c, NodeID(0)
	if b.serverTLS != nil {
		tc := tls.Server(c, b.serverTLS)
		id, err := b.handshake(ctx, c, tc, sc.Deadline())
		if err != nil {
			return
		}
		if !b.bind(c, id) {
			// A removed peer is refused once authenticated, like a
			// certificate the handshake refuses.
			b.stats.rejectedHS.Add(1)
			return
		}
		if old := b.joinPeer(sc, id); old != nil {
			b.stats.peerConnsClosed.Add(1)
			old.Close() // its reader returns and untracks it
		}
		rw, peer = tc, id
	}
	b.readLoop(c, rw, peer)
}

// joinPeer ends sc's handshake, authenticated as peer, and returns the
// socket of peer's oldest inbound connection to close if peer now has
// more than MaxPeerConns (nil if not).
func (b *TCPBus) joinPeer(sc *slots.Conn, peer NodeID) net.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old := sc.Establish(uint64(peer)); old != nil {
		return b.slotConn[old]
	}
	return nil
}

// handshake completes tc's handshake by deadline and returns the peer's
// authenticated node id (already checked by VerifyConnection). A failure
// is counted unless the bus is closing.
func (b *TCPBus) handshake(ctx context.Context, raw net.Conn, tc *tls.Conn, deadline time.Time) (NodeID, error) {
	// The deadline covers the reads and writes of the handshake; the
	// context only makes Close interrupt it.
	err := raw.SetDeadline(deadline)
	if err == nil {
		err = tc.HandshakeContext(ctx)
	}
	var id NodeID
	if err == nil {
		// Verified in VerifyConnection; re-read for the id.
		id, err = identityOf(tc.ConnectionState().PeerCertificates[0], b.opts.TLS.ClusterID)
	}
	if err == nil {
		err = raw.SetDeadline(time.Time{})
	}
	if err != nil && ctx.Err() == nil {
		b.stats.rejectedHS.Add(1)
	}
	return id, err
}

// errForged marks a frame whose sender is not the connection's
// authenticated peer.
var errForged = errors.New("bus: frame sender differs from the authenticated peer")

// errRemoved marks a frame whose sender RemovePeer removed.
var errRemoved = errors.New("bus: frame from a removed peer")

// readLoop reads frames from an inbound connection until it fails, breaks
// a rule (format, budget, deadline, sender), or Close or RemovePeer closes
// it. raw is the TCP connection, c what frames are read from (raw or TLS
// over it); peer is the authenticated sender, 0 in plaintext.
func (b *TCPBus) readLoop(raw, c net.Conn, peer NodeID) {
	bound := peer // the sender raw is bound to for RemovePeer
	// ic is the connection's part of the inbound budget, charged to the
	// authenticated peer's share across its connections (none in
	// plaintext). Closing it gives back the frame being read, if any.
	var ic *inbound.Conn
	b.locked(func() { ic = b.budget.Open(uint64(peer)) })
	defer b.locked(ic.Close)
	r := bufio.NewReaderSize(c, 64<<10)
	var h [frameOverhead]byte
	// A deadline is set only before a read that may block: what is
	// already buffered needs none, and a stale deadline is harmless to it.
	for {
		if r.Buffered() < prefixLen {
			var idle time.Time // zero: no deadline
			if b.opts.IdleTimeout > 0 {
				idle = time.Now().Add(b.opts.IdleTimeout)
			}
			if err := c.SetReadDeadline(idle); err != nil {
				return
			}
		}
		n, err := readLength(r, &h, b.maxFrame)
		if err != nil {
			b.countReadError(err)
			return
		}
		// Begin, Next and Complete touch ic alone: no lock.
		deadline := ic.Begin(time.Now())
		if r.Buffered() < int(n) {
			err = c.SetReadDeadline(deadline)
		}
		// The header names the sender, which is checked before anything
		// is charged or allocated for the payload.
		var m Message
		if err == nil {
			m, err = readHeader(r, &h)
		}
		if err == nil {
			err = b.checkInbound(&m, peer)
		}
		if err == nil && (b.isRemoved(m.From) || (m.From != bound && !b.bind(raw, m.From))) {
			// Without TLS the sender is known only from its frames: the
			// connection is bound to the latest one's.
			err = errRemoved
		}
		if err != nil {
			b.countReadError(err)
			return
		}
		bound = m.From
		// Charge the frame before its payload is allocated.
		if !b.admit(ic, int64(n)) {
			b.stats.overBudget.Add(1)
			return
		}
		if p := int(n) - headerLen; p > 0 {
			m.Payload = b.bufs.get(p)
			err = b.readPayload(c, r, m.Payload, ic)
		}
		if err != nil {
			b.countReadError(err) // the deferred Close releases the frame
			return
		}
		b.stats.framesRead.Add(1)
		b.stats.bytesRead.Add(prefixLen + uint64(n))
		b.deliver(m, ic.Complete())
	}
}

// readPayload reads p from r, each inbound.StallChunk within
// StallTimeout and the whole by the frame's FrameTimeout (the deadlines
// ic gives): a peer that stops inside a frame releases its budget after
// StallTimeout, one that trickles it after FrameTimeout.
func (b *TCPBus) readPayload(c net.Conn, r *bufio.Reader, p []byte, ic *inbound.Conn) error {
	for len(p) > 0 {
		k := min(len(p), inbound.StallChunk)
		if r.Buffered() < k {
			if err := c.SetReadDeadline(ic.Next(time.Now())); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(r, p[:k]); err != nil {
			return noEOF(err)
		}
		p = p[k:]
	}
	return nil
}

func (b *TCPBus) countReadError(err error) {
	switch {
	case errors.Is(err, errBadFrame):
		b.stats.badFrames.Add(1)
	case errors.Is(err, errForged):
		b.stats.forged.Add(1)
	case errors.Is(err, errRemoved):
		b.stats.removedSender.Add(1)
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.stats.readTimeouts.Add(1)
	}
}

func (b *TCPBus) checkInbound(m *Message, peer NodeID) error {
	if m.From == 0 {
		return fmt.Errorf("%w: sender 0", errBadFrame)
	}
	if m.To != b.id {
		return fmt.Errorf("%w: addressed to %d, this is %d", errBadFrame, m.To, b.id)
	}
	if peer != 0 && m.From != peer {
		return fmt.Errorf("%w: frame from %d on node %d's connection", errForged, m.From, peer)
	}
	return nil
}

// writeLoop owns p's outbound connection: it takes messages off p.q, dials
// when it has one to send and no connection, and writes batches, flushing
// when the queue is momentarily empty. ctx ends with the bus or when
// RemovePeer removes p.
func (b *TCPBus) writeLoop(ctx context.Context, p *tcpPeer) {
	var (
		c    net.Conn // the TCP connection (tracked, closed)
		rw   net.Conn // what frames are written to: c or TLS over it
		w    = bufio.NewWriterSize(nil, 64<<10)
		h    [frameOverhead]byte
		bo   = backoff.New(b.opts.BackoffMin, b.opts.BackoffMax)
		held *Message // taken off p.q, not yet written
	)
	defer func() {
		if c != nil {
			b.untrack(c)
		}
		if held != nil && p.removed.Load() {
			b.bufs.put(held.Payload)
			b.stats.peerRemoved.Add(1)
		}
	}()
	for {
		var m Message
		select {
		case <-ctx.Done():
			return
		case m = <-p.q:
		}
		held = &m
		for c == nil {
			if c, rw = b.dial(ctx, p); c != nil {
				bo.Reset()
				w.Reset(rw)
				break
			}
			if ctx.Err() != nil || b.closed.Load() {
				return
			}
			if !b.sleep(ctx, bo.Next()) {
				return
			}
		}
		held = nil
		if err := b.writeBatch(rw, w, &h, p, m); err != nil {
			if p.removed.Load() {
				return // RemovePeer closed the connection
			}
			b.stats.writeErrors.Add(1)
			b.untrack(c)
			c, rw = nil, nil
		}
	}
}

// writeBatch writes m and whatever else is queued, then flushes.
func (b *TCPBus) writeBatch(c net.Conn, w *bufio.Writer, h *[frameOverhead]byte, p *tcpPeer, m Message) error {
	const refresh = 64 // frames between write-deadline refreshes
	for n := 0; ; n++ {
		if n%refresh == 0 {
			if err := c.SetWriteDeadline(time.Now().Add(b.opts.WriteTimeout)); err != nil {
				return err
			}
		}
		err := writeFrame(w, h, &m)
		// The frame is in w or on the wire: nothing refers to the
		// payload, which Send copied from the bus's buffers.
		b.bufs.put(m.Payload)
		if err != nil {
			return err
		}
		b.stats.framesWritten.Add(1)
		b.stats.bytesWritten.Add(uint64(frameOverhead + len(m.Payload)))
		select {
		case m = <-p.q:
			continue
		default:
		}
		return w.Flush()
	}
}

// dial connects to p and, with TLS, completes a handshake that
// authenticates the peer as p's node id. It returns the TCP connection
// (tracked) and the connection to write frames to, or nils.
func (b *TCPBus) dial(ctx context.Context, p *tcpPeer) (net.Conn, net.Conn) {
	b.stats.dials.Add(1)
	d := net.Dialer{Timeout: b.opts.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", *p.addr.Load())
	if err != nil {
		b.stats.dialErrors.Add(1)
		return nil, nil
	}
	if !b.track(c, p.id, p) {
		return nil, nil
	}
	if b.clientTLS == nil {
		return c, c
	}
	tc := tls.Client(c, dialConfig(b.clientTLS, b.opts.TLS, p.id))
	if _, err := b.handshake(ctx, c, tc, time.Now().Add(b.opts.HandshakeTimeout)); err != nil {
		b.stats.dialErrors.Add(1)
		b.untrack(c)
		return nil, nil
	}
	return c, tc
}

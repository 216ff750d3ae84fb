package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/run"
)

// TCPOptions configure a TCPBus. Zero values take the defaults.
type TCPOptions struct {
	// QueueSize bounds each peer's send queue and the inbox behind Recv
	// (default DefaultQueueSize).
	QueueSize int
	// MaxFrame bounds a frame's length field, header included (default
	// DefaultMaxFrame, at most math.MaxUint32). Send refuses a larger
	// message with ErrTooLarge; a peer announcing a larger frame has its
	// connection closed.
	MaxFrame int
	// Clock drives the reconnect backoff timers (default clock.Real). Dial
	// timeouts and write deadlines are enforced by the net package on the
	// wall clock whatever the Clock.
	Clock clock.Clock
	// BackoffMin and BackoffMax bound the exponential reconnect backoff
	// (defaults 10 ms and 1 s). The backoff doubles per failed dial and
	// resets after a successful one.
	BackoffMin, BackoffMax time.Duration
	// DialTimeout bounds one connection attempt (default 1 s).
	DialTimeout time.Duration
	// WriteTimeout bounds a stalled write to a peer (default 10 s); past
	// it the connection is dropped and redialled.
	WriteTimeout time.Duration
}

func (o *TCPOptions) setDefaults() {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MaxFrame < headerLen {
		o.MaxFrame = headerLen
	}
	if uint64(o.MaxFrame) > math.MaxUint32 {
		o.MaxFrame = math.MaxUint32
	}
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
}

// TCPStats count a TCPBus's traffic and failures.
type TCPStats struct {
	// Sent counts messages accepted by Send (queued, not yet written).
	Sent uint64
	// Received counts messages put into the inbox.
	Received uint64
	// QueueFull counts Sends refused with ErrQueueFull.
	QueueFull uint64
	// InboxFull counts received messages dropped because Recv's buffer was
	// full.
	InboxFull uint64
	// BadFrames counts inbound connections closed for a malformed frame
	// (length out of bounds, sender 0, or addressed to another node).
	BadFrames uint64
	// Dials and DialErrors count outbound connection attempts and failures.
	Dials, DialErrors uint64
	// WriteErrors counts outbound connections dropped on a write error;
	// the frames buffered for that connection are lost.
	WriteErrors uint64
}

type tcpStats struct {
	sent, received, queueFull, inboxFull, badFrames atomic.Uint64
	dials, dialErrors, writeErrors                  atomic.Uint64
}

// TCPBus is a Bus over TCP. Each peer gets one outbound connection, dialled
// lazily by that peer's writer goroutine when it has something to send and
// redialled with exponential backoff after a failure; frames go out through
// a bufio.Writer flushed whenever the peer's queue is momentarily empty. An
// accept loop starts a reader goroutine per inbound connection; a reader
// delivers into the inbox behind Recv, dropping (and counting) when it is
// full. All goroutines belong to one run.Group, stopped by Close.
//
// The transport is unauthenticated and unencrypted: a receiver learns the
// sender from the frame header alone, so anyone who can reach the listener
// can impersonate any node. Use it only on a trusted network.
//
// The writer keeps the message it holds while dialling fails, so a dead
// peer's queue fills and Send reports ErrQueueFull; messages buffered on a
// connection that breaks are lost (raft re-sends).
type TCPBus struct {
	id       NodeID
	ln       net.Listener
	opts     TCPOptions
	maxFrame uint32
	inbox    chan Message
	group    *run.Group
	stats    tcpStats

	closed    atomic.Bool
	closeOnce sync.Once
	selfMu    sync.RWMutex // orders self-sends against close(inbox)

	peers atomic.Pointer[map[NodeID]*tcpPeer] // copy-on-write under mu

	mu    sync.Mutex
	conns map[net.Conn]struct{} // every open connection, both directions
}

type tcpPeer struct {
	id   NodeID
	addr atomic.Pointer[string]
	q    chan Message
}

var _ Bus = (*TCPBus)(nil)

// ListenTCP listens on addr as node id and returns a bus that can send to
// peers (id → "host:port"); an entry for id itself is ignored. More peers
// can be added later with AddPeer.
func ListenTCP(id NodeID, addr string, peers map[NodeID]string, opts TCPOptions) (*TCPBus, error) {
	if id == 0 {
		return nil, errors.New("bus: node id 0")
	}
	for pid := range peers {
		if pid == 0 {
			return nil, errors.New("bus: peer id 0")
		}
	}
	opts.setDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &TCPBus{
		id:       id,
		ln:       ln,
		opts:     opts,
		maxFrame: uint32(opts.MaxFrame),
		inbox:    make(chan Message, opts.QueueSize),
		group:    run.NewGroup(),
		conns:    make(map[net.Conn]struct{}),
	}
	empty := map[NodeID]*tcpPeer{}
	b.peers.Store(&empty)
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
// the next dial on). An entry for the bus's own id is ignored.
func (b *TCPBus) AddPeer(id NodeID, addr string) error {
	if id == 0 {
		return errors.New("bus: peer id 0")
	}
	if id == b.id {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	old := *b.peers.Load()
	if p, ok := old[id]; ok {
		p.addr.Store(&addr)
		return nil
	}
	p := &tcpPeer{id: id, q: make(chan Message, b.opts.QueueSize)}
	p.addr.Store(&addr)
	next := maps.Clone(old)
	next[id] = p
	b.peers.Store(&next)
	// Close sets closed before taking mu, so the group is not stopping yet.
	b.group.Go(func(ctx context.Context) { b.writeLoop(ctx, p) })
	return nil
}

// ID is this endpoint's node id.
func (b *TCPBus) ID() NodeID { return b.id }

// Addr is the bound listen address.
func (b *TCPBus) Addr() net.Addr { return b.ln.Addr() }

// Recv is the inbox; Close closes it.
func (b *TCPBus) Recv() <-chan Message { return b.inbox }

// Stats returns a snapshot of the counters.
func (b *TCPBus) Stats() TCPStats {
	s := &b.stats
	return TCPStats{
		Sent: s.sent.Load(), Received: s.received.Load(),
		QueueFull: s.queueFull.Load(), InboxFull: s.inboxFull.Load(),
		BadFrames: s.badFrames.Load(),
		Dials:     s.dials.Load(), DialErrors: s.dialErrors.Load(),
		WriteErrors: s.writeErrors.Load(),
	}
}

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
	m.Payload = clonePayload(m.Payload)
	if m.To == b.id {
		b.selfMu.RLock()
		defer b.selfMu.RUnlock()
		if b.closed.Load() {
			return ErrClosed
		}
		b.stats.sent.Add(1)
		b.deliver(m)
		return nil
	}
	p, ok := (*b.peers.Load())[m.To]
	if !ok {
		return ErrUnknownPeer
	}
	select {
	case p.q <- m:
		b.stats.sent.Add(1)
		return nil
	default:
		b.stats.queueFull.Add(1)
		return ErrQueueFull
	}
}

// Close closes the listener and every connection, stops every goroutine,
// waits for them, and then closes the inbox. It is idempotent; a concurrent
// second call waits for the first.
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
		b.selfMu.Lock()
		close(b.inbox)
		b.selfMu.Unlock()
	})
	return nil
}

// track registers c so Close can close it; false (and c closed) once the
// bus is closing.
func (b *TCPBus) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		c.Close()
		return false
	}
	b.conns[c] = struct{}{}
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

func (b *TCPBus) deliver(m Message) {
	select {
	case b.inbox <- m:
		b.stats.received.Add(1)
	default:
		b.stats.inboxFull.Add(1)
	}
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
	backoff := time.Duration(0)
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if b.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. out of file descriptors): back off.
			backoff = nextBackoff(backoff, b.opts.BackoffMin, b.opts.BackoffMax)
			if !b.sleep(ctx, backoff) {
				return
			}
			continue
		}
		backoff = 0
		if !b.track(c) {
			return
		}
		// The accept loop is itself in the group, so Go cannot race Stop's
		// Wait with a zero counter.
		b.group.Go(func(context.Context) { b.readLoop(c) })
	}
}

// readLoop reads frames from an inbound connection until it fails, is
// malformed, or Close closes it.
func (b *TCPBus) readLoop(c net.Conn) {
	defer b.untrack(c)
	r := bufio.NewReaderSize(c, 64<<10)
	var h [frameOverhead]byte
	for {
		m, err := readFrame(r, &h, b.maxFrame)
		if err == nil {
			err = b.checkInbound(&m)
		}
		if err != nil {
			if errors.Is(err, errBadFrame) {
				b.stats.badFrames.Add(1)
			}
			return
		}
		b.deliver(m)
	}
}

func (b *TCPBus) checkInbound(m *Message) error {
	if m.From == 0 {
		return fmt.Errorf("%w: sender 0", errBadFrame)
	}
	if m.To != b.id {
		return fmt.Errorf("%w: addressed to %d, this is %d", errBadFrame, m.To, b.id)
	}
	return nil
}

// writeLoop owns p's outbound connection: it takes messages off p.q, dials
// when it has one to send and no connection, and writes batches, flushing
// when the queue is momentarily empty.
func (b *TCPBus) writeLoop(ctx context.Context, p *tcpPeer) {
	var (
		c       net.Conn
		w       = bufio.NewWriterSize(nil, 64<<10)
		h       [frameOverhead]byte
		backoff time.Duration
	)
	defer func() {
		if c != nil {
			b.untrack(c)
		}
	}()
	for {
		var m Message
		select {
		case <-ctx.Done():
			return
		case m = <-p.q:
		}
		for c == nil {
			if c = b.dial(ctx, p); c != nil {
				backoff = 0
				w.Reset(c)
				break
			}
			if ctx.Err() != nil || b.closed.Load() {
				return
			}
			backoff = nextBackoff(backoff, b.opts.BackoffMin, b.opts.BackoffMax)
			if !b.sleep(ctx, backoff) {
				return
			}
		}
		if err := b.writeBatch(c, w, &h, p, m); err != nil {
			b.stats.writeErrors.Add(1)
			b.untrack(c)
			c = nil
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
		if err := writeFrame(w, h, &m); err != nil {
			return err
		}
		select {
		case m = <-p.q:
			continue
		default:
		}
		return w.Flush()
	}
}

func (b *TCPBus) dial(ctx context.Context, p *tcpPeer) net.Conn {
	b.stats.dials.Add(1)
	d := net.Dialer{Timeout: b.opts.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", *p.addr.Load())
	if err != nil {
		b.stats.dialErrors.Add(1)
		return nil
	}
	if !b.track(c) {
		return nil
	}
	return c
}

func nextBackoff(cur, lo, hi time.Duration) time.Duration {
	if cur <= 0 {
		return lo
	}
	return min(cur*2, hi)
}

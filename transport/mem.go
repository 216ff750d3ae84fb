package transport

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/run"
)

// NetworkOptions configure a Network.
type NetworkOptions struct {
	// QueueSize bounds each endpoint's inbox (default DefaultQueueSize). A
	// message for a full inbox is dropped and counted in Stats.Overflow; the
	// sender never blocks.
	QueueSize int
	// Clock times delayed messages (default clock.Real).
	Clock clock.Clock
	// ManualDelivery, when set, starts no goroutine: delayed messages are
	// released only by Pump, so a simulator decides exactly when delivery
	// happens. When unset, one goroutine waits on a timer from Clock and
	// calls Pump when the earliest held message is due; with a
	// clock.Manual that happens on Advance.
	ManualDelivery bool
}

// Faults are the injected faults applied to every message sent after
// SetFaults. Rates are probabilities in [0, 1].
type Faults struct {
	// DropRate is the chance a sent message is lost.
	DropRate float64
	// DuplicateRate is the chance a message is delivered twice (the copy
	// right behind the original).
	DuplicateRate float64
	// ReorderRate is the chance a message is held back on its link and
	// delivered right after the next message on the same link (or on Flush).
	ReorderRate float64
	// Delay holds every message for this long on the network's clock.
	Delay time.Duration
	// Seed seeds the PCG that decides drop, duplicate and reorder.
	Seed uint64
}

// Stats count what the network did with messages. Each accepted Send
// counts once in Sent; each duplicate once in Duplicated; and every one of
// these copies ends in exactly one of Delivered, Dropped, Cut or Overflow, or
// is still held (delayed or held back for reordering).
type Stats struct {
	// Sent counts messages accepted by Send.
	Sent uint64
	// Delivered counts messages put into a receiver's inbox.
	Delivered uint64
	// Dropped counts messages lost to Faults.DropRate.
	Dropped uint64
	// Duplicated counts extra copies made by Faults.DuplicateRate.
	Duplicated uint64
	// Reordered counts held-back messages delivered after a later one.
	Reordered uint64
	// Delayed counts messages held for Faults.Delay.
	Delayed uint64
	// Clogged counts messages held on a clogged link (Clog) when they
	// were due for delivery; each ends in one of the counters above
	// when Unclog releases it.
	Clogged uint64
	// Cut counts messages lost because their link was disconnected (when
	// sent or when due for delivery) or the receiver was closed.
	Cut uint64
	// Overflow counts messages lost to a full receiver inbox.
	Overflow uint64
}

type link struct{ from, to NodeID }

func cmpLink(a, b link) int {
	if c := cmp.Compare(a.from, b.from); c != 0 {
		return c
	}
	return cmp.Compare(a.to, b.to)
}

// Network is an in-memory bus connecting endpoints by NodeID, with fault
// injection for tests and the simulator. All state, including the fault
// PCG, sits under one mutex, so a run is reproducible given the same seed
// and the same sequence of calls.
//
// A message passes these stages, in order, inside Send: link cut → drop →
// (duplicate: the copy follows the original through the remaining stages)
// → reorder hold-back → delay → clog → delivery. Delivery re-checks the
// link cut and the receiver, and never blocks: a full inbox drops the
// message. Without faults, delivery on a connected pair is FIFO and
// synchronous: the message is in the receiver's inbox when Send returns.
//
// Links are directional: the link from a to b can be cut (Disconnect,
// DisconnectGroups) or clogged (Clog) while the one from b to a works, so
// a node can send without hearing, or hear without being heard. A cut
// link loses messages; a clogged one holds them, in order, until Unclog
// delivers them (a congested or stalled direction rather than a broken
// one).
type Network struct {
	clk       clock.Clock
	queueSize int
	group     *run.Group // nil with ManualDelivery

	mu      sync.Mutex
	closed  bool
	eps     map[NodeID]*memEndpoint
	cut     map[link]struct{}
	clogged map[link][]Message // held on a clogged link, in arrival order
	faults  Faults
	rng     *rand.Rand
	held    map[link]Message // held back for reordering: one per link
	delayed delayQueue
	seq     uint64
	timer   clock.Timer
	armed   bool
	armedAt time.Time
	stats   Stats
	bufs    *bufPool // payload buffers, handed back by receivers (Recycle)
}

// NewNetwork returns an empty, fault-free network. Close it to stop its
// delivery goroutine.
func NewNetwork(opts NetworkOptions) *Network {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	n := &Network{
		clk:       opts.Clock,
		queueSize: opts.QueueSize,
		eps:       make(map[NodeID]*memEndpoint),
		cut:       make(map[link]struct{}),
		clogged:   make(map[link][]Message),
		held:      make(map[link]Message),
		bufs:      newBufPool(),
	}
	n.setFaultsLocked(Faults{})
	if !opts.ManualDelivery {
		n.timer = n.clk.NewTimer(time.Hour)
		n.timer.Stop()
		n.group = run.NewGroup()
		n.group.Go(n.deliverLoop)
	}
	return n
}

// Endpoint returns the open endpoint for id, creating it if there is none
// or the previous one was closed (a restarted node gets a fresh, empty
// inbox). On a closed Network it returns a closed endpoint; for id 0,
// which names no node, a closed endpoint whose Send fails with
// ErrInvalidNodeID (a ClusterConfig naming it is refused by Validate).
func (n *Network) Endpoint(id NodeID) Bus {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id == 0 {
		e := &memEndpoint{n: n, closed: true, inbox: make(chan Message)}
		close(e.inbox)
		return e
	}
	if e, ok := n.eps[id]; ok && !e.closed {
		return e
	}
	e := &memEndpoint{n: n, id: id, inbox: make(chan Message, n.queueSize)}
	if n.closed {
		e.closed = true
		close(e.inbox)
		return e
	}
	n.eps[id] = e
	return e
}

// Disconnect cuts the link from a to b (one direction).
func (n *Network) Disconnect(a, b NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[link{a, b}] = struct{}{}
}

// Connect restores the link from a to b (one direction).
func (n *Network) Connect(a, b NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, link{a, b})
}

// DisconnectGroups cuts every link from a node of from to a node of to,
// in that direction only: the nodes of to still reach those of from.
// With from a single node and to every other, that node can hear but not
// send; the other way round, it can send but not hear.
func (n *Network) DisconnectGroups(from, to []NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range from {
		for _, b := range to {
			if a != b {
				n.cut[link{a, b}] = struct{}{}
			}
		}
	}
}

// Linked reports whether the link from a to b is up: not cut (a clogged
// link is up; it only holds messages).
func (n *Network) Linked(a, b NodeID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, cut := n.cut[link{a, b}]
	return !cut
}

// Clog holds every message from a to b that comes due for delivery, in
// order, until Unclog(a, b) (one direction; b's messages to a are not
// held). Cuts, Partition and Heal leave clogs alone: a message a clog
// holds is delivered, or lost to a cut or a closed receiver, when the
// clog ends.
func (n *Network) Clog(a, b NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.clogged[link{a, b}]; !ok {
		n.clogged[link{a, b}] = nil
	}
}

// Unclog ends the clog from a to b, if there is one, and delivers what it
// held in the order it arrived; it reports how many messages it released.
func (n *Network) Unclog(a, b NodeID) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unclogLocked(link{a, b})
}

// UnclogAll ends every clog, releasing what each held (link by link, in
// ascending order of sender then receiver); it reports how many messages
// it released.
func (n *Network) UnclogAll() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	links := make([]link, 0, len(n.clogged))
	for l := range n.clogged {
		links = append(links, l)
	}
	slices.SortFunc(links, cmpLink)
	released := 0
	for _, l := range links {
		released += n.unclogLocked(l)
	}
	return released
}

func (n *Network) unclogLocked(l link) int {
	held, ok := n.clogged[l]
	if !ok {
		return 0
	}
	delete(n.clogged, l)
	for _, m := range held {
		n.deliver(m)
	}
	return len(held)
}

// Partition sets the network to exactly these groups: it heals every cut,
// then cuts both directions between every pair of nodes in different
// groups. Nodes named in no group stay connected to everyone. Clogs stay.
func (n *Network) Partition(groups ...[]NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	for i, gi := range groups {
		for _, gj := range groups[i+1:] {
			for _, a := range gi {
				for _, b := range gj {
					n.cut[link{a, b}] = struct{}{}
					n.cut[link{b, a}] = struct{}{}
				}
			}
		}
	}
}

// Heal restores every cut link (clogs stay: UnclogAll ends them).
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// SetFaults replaces the fault settings and reseeds the PCG from f.Seed.
// Messages already delayed or held back keep their fate; call Flush to
// release held-back ones.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setFaultsLocked(f)
}

func (n *Network) setFaultsLocked(f Faults) {
	n.faults = f
	n.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
}

// Stats returns a snapshot of the counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Pump delivers every delayed message whose due time has passed on the
// network's clock, in due order (FIFO per link for a fixed delay), and
// reports how many it released. With ManualDelivery it is the only way
// delayed messages arrive; otherwise the delivery goroutine calls it, and
// calling it as well is harmless.
func (n *Network) Pump() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pumpLocked()
}

// Flush releases every message held back for reordering, in link order,
// into the delay stage (or straight to delivery without delay); it reports
// how many.
func (n *Network) Flush() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	links := make([]link, 0, len(n.held))
	for l := range n.held {
		links = append(links, l)
	}
	slices.SortFunc(links, cmpLink)
	for _, l := range links {
		m := n.held[l]
		delete(n.held, l)
		n.delayStage(m)
	}
	return len(links)
}

// Close closes every endpoint and stops the delivery goroutine; messages
// still held are discarded. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		for _, e := range n.eps {
			e.closeLocked()
		}
		if n.timer != nil {
			n.timer.Stop()
		}
		n.delayed = nil
		clear(n.held)
		clear(n.clogged)
	}
	n.mu.Unlock()
	if n.group != nil {
		n.group.Stop()
	}
	return nil
}

func (n *Network) deliverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.timer.C():
			n.mu.Lock()
			n.armed = false
			if !n.closed {
				n.pumpLocked()
			}
			n.mu.Unlock()
		}
	}
}

func (n *Network) send(from *memEndpoint, m Message) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if from.id == 0 {
		return fmt.Errorf("%w: sent from", ErrInvalidNodeID)
	}
	if from.closed {
		return ErrClosed
	}
	m.From = from.id
	if _, ok := n.eps[m.To]; !ok {
		return ErrUnknownPeer
	}
	m.Payload = n.bufs.clone(m.Payload)
	n.stats.Sent++
	l := link{m.From, m.To}
	if _, ok := n.cut[l]; ok {
		n.stats.Cut++
		return nil
	}
	f := &n.faults
	if f.DropRate > 0 && n.rng.Float64() < f.DropRate {
		n.stats.Dropped++
		return nil
	}
	dup := f.DuplicateRate > 0 && n.rng.Float64() < f.DuplicateRate
	n.reorderStage(l, m)
	if dup {
		n.stats.Duplicated++
		m.Payload = n.bufs.clone(m.Payload)
		n.reorderStage(l, m)
	}
	return nil
}

func (n *Network) reorderStage(l link, m Message) {
	if len(n.held) > 0 {
		if h, ok := n.held[l]; ok {
			delete(n.held, l)
			n.delayStage(m)
			n.delayStage(h)
			n.stats.Reordered++
			return
		}
	}
	if r := n.faults.ReorderRate; r > 0 && n.rng.Float64() < r {
		n.held[l] = m
		return
	}
	n.delayStage(m)
}

func (n *Network) delayStage(m Message) {
	d := n.faults.Delay
	if d <= 0 {
		n.deliver(m)
		return
	}
	n.seq++
	heap.Push(&n.delayed, delayedMsg{due: n.clk.Now().Add(d), seq: n.seq, m: m})
	n.stats.Delayed++
	n.rearm()
}

func (n *Network) deliver(m Message) {
	l := link{m.From, m.To}
	if q, clogged := n.clogged[l]; clogged {
		n.clogged[l] = append(q, m)
		n.stats.Clogged++
		return
	}
	e, ok := n.eps[m.To]
	_, cut := n.cut[l]
	if !ok || e.closed || cut {
		n.stats.Cut++
		return
	}
	select {
	case e.inbox <- m:
		n.stats.Delivered++
	default:
		n.stats.Overflow++
	}
}

func (n *Network) pumpLocked() int {
	now := n.clk.Now()
	released := 0
	for len(n.delayed) > 0 && !n.delayed[0].due.After(now) {
		d := heap.Pop(&n.delayed).(delayedMsg)
		n.deliver(d.m)
		released++
	}
	n.rearm()
	return released
}

// rearm points the delivery timer at the earliest delayed message.
func (n *Network) rearm() {
	if n.timer == nil || n.closed {
		return
	}
	if len(n.delayed) == 0 {
		if n.armed {
			n.timer.Stop()
			n.armed = false
		}
		return
	}
	due := n.delayed[0].due
	if n.armed && n.armedAt.Equal(due) {
		return
	}
	n.timer.Reset(due.Sub(n.clk.Now()))
	n.armed, n.armedAt = true, due
}

type memEndpoint struct {
	n      *Network
	id     NodeID
	inbox  chan Message
	closed bool // guarded by n.mu
}

func (e *memEndpoint) Send(m Message) error { return e.n.send(e, m) }
func (e *memEndpoint) Recv() <-chan Message { return e.inbox }
func (e *memEndpoint) ID() NodeID           { return e.id }

// Recycle takes back a delivered payload its receiver is done with
// (Recycler); the network's next messages may be copied into it.
func (e *memEndpoint) Recycle(payload []byte) { e.n.bufs.put(payload) }

// Close closes the endpoint's inbox; messages in flight to it are lost
// (counted as Cut). It is idempotent.
func (e *memEndpoint) Close() error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.closeLocked()
	return nil
}

func (e *memEndpoint) closeLocked() {
	if !e.closed {
		e.closed = true
		close(e.inbox)
	}
}

type delayedMsg struct {
	due time.Time
	seq uint64
	m   Message
}

type delayQueue []delayedMsg

func (q delayQueue) Len() int { return len(q) }
func (q delayQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q delayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)   { *q = append(*q, x.(delayedMsg)) }
func (q *delayQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

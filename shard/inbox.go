package shard

import (
	"fmt"
	"sync"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

// The inbox is bounded in frames (Config.InboxSize) and, for the frames a
// peer sends, in bytes (Config.InboxBytes). A node takes a peer's raft
// and catch-up messages from the transport as fast as they come (the
// transport's budgets end there) and hands them to the owner shard's
// inbox, where they wait for the pump: bounded in frames only, a member
// sending maximum-size messages faster than the shard steps them could
// make the node hold 1,024 of them per shard. Their bytes are charged
// when they enter and released when the pump takes them, in total and
// by partition (a quarter of the bound each); one that would pass either
// is refused and lost, which is safe for exactly these
// frames — raft sends its messages again, and a catch-up fetch
// unanswered for catchUpRetryTicks is sent again — and nothing
// acknowledged depends on them. Client frames are not charged: each has
// a caller waiting for its answer, which holds its bytes anyway and
// applies back-pressure on a full inbox (and a forwarded request is
// charged to the node's forward budget from receipt to answer).

// ErrInboxBytes refuses a peer frame that would pass the inbox's byte
// bound. It wraps router.ErrFull: a full inbox, counted as such.
var ErrInboxBytes = fmt.Errorf("%w: inbox byte bound reached", router.ErrFull)

// inboxFrame is a frame in the inbox with the bytes it is charged.
type inboxFrame struct {
	f Frame
	n int64
}

// inboxCharge is what f is charged in the inbox: a peer frame its payload
// and a fixed part, anything else nothing.
func inboxCharge(f Frame) int64 {
	if f.Req == nil || f.Req.Op != OpRaft && f.Req.Op != OpCatchUp {
		return 0
	}
	return f.payloadBytes() + frameOverhead
}

// inboxNamespaceShare is the part of the inbox's byte bound one partition's
// frames may hold: a flood of frames for one partition (a member sending
// appends faster than the shard steps them, or a forged stream) leaves
// room for the other partitions' traffic on the shard.
const inboxNamespaceShare = 4

// inboxBudget is the bytes the peer frames in a shard's inbox hold, in
// total and by partition. Senders run concurrently (the node's transport
// receiver, other shards forwarding, the pump re-dispatching), hence the
// lock; only peer frames take it.
type inboxBudget struct {
	max, nsMax int64

	mu   sync.Mutex
	held int64
	peak int64
	byNS map[metadata.Namespace]int64 // partitions holding bytes only
}

func newInboxBudget(max int64) *inboxBudget {
	return &inboxBudget{max: max, nsMax: max / inboxNamespaceShare, byNS: make(map[metadata.Namespace]int64)}
}

// take charges n bytes of a frame for ns; false (nothing charged) when
// that would pass the total while the inbox holds peer bytes, or ns's
// share while ns holds any: a frame larger than a bound enters when
// there is nothing ahead of it, so it is not refused for good.
func (b *inboxBudget) take(ns metadata.Namespace, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.byNS[ns]
	if b.held > 0 && b.held+n > b.max || p > 0 && p+n > b.nsMax {
		return false
	}
	b.byNS[ns] = p + n
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

// give releases what take charged.
func (b *inboxBudget) give(ns metadata.Namespace, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.byNS[ns] - n; p > 0 {
		b.byNS[ns] = p
	} else {
		delete(b.byNS, ns)
	}
	b.held -= n
}

// charge reserves f's bytes, or refuses f with ErrInboxBytes.
func (s *Shard) charge(f Frame) (inboxFrame, error) {
	n := inboxCharge(f)
	if n == 0 {
		return inboxFrame{f: f}, nil
	}
	if !s.inboxBytes.take(f.Req.NS, n) {
		return inboxFrame{}, ErrInboxBytes
	}
	return inboxFrame{f: f, n: n}, nil
}

// uncharge releases what charge reserved, for a frame that did not enter
// the inbox or that the pump took from it.
func (s *Shard) uncharge(in inboxFrame) {
	if in.n != 0 {
		s.inboxBytes.give(in.f.Req.NS, in.n)
	}
}

// taken releases the bytes of a frame the pump took from the inbox.
func (s *Shard) taken(in inboxFrame) Frame {
	s.uncharge(in)
	return in.f
}

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
// when they enter and released when the pump takes them, in total, by
// partition (a quarter of the bound each) and by the peer that sent them
// (half the bound each: a member flooding many partitions, each within
// its quarter, leaves room for the other members' traffic); one that
// would pass any is refused and lost, which is safe for exactly these
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

// inboxPeerShare is the part of the inbox's byte bound one sending peer's
// frames may hold, whatever partitions they are for: with a share per
// partition only, a member flooding four partitions filled the inbox and
// the other members' raft traffic for the shard was refused.
const inboxPeerShare = 2

// inboxBudget is the bytes the peer frames in a shard's inbox hold, in
// total, by partition and by sending peer. Senders run concurrently (the
// node's transport receiver, other shards forwarding, the pump
// re-dispatching), hence the lock; only peer frames take it.
type inboxBudget struct {
	max, nsMax, peerMax int64

	mu     sync.Mutex
	held   int64
	peak   int64
	byNS   map[metadata.Namespace]int64 // partitions holding bytes only
	byPeer map[uint64]int64             // peers holding bytes only
}

func newInboxBudget(max int64) *inboxBudget {
	return &inboxBudget{
		max: max, nsMax: max / inboxNamespaceShare, peerMax: max / inboxPeerShare,
		byNS: make(map[metadata.Namespace]int64), byPeer: make(map[uint64]int64),
	}
}

// take charges n bytes of a frame for ns sent by peer (0: not known, as
// for a frame another shard of this node hands on, which is charged to
// the total and its partition only); false (nothing charged) when that
// would pass the total while the inbox holds peer bytes, ns's share while
// ns holds any, or peer's share while peer holds any: a frame larger
// than a bound enters when there is nothing ahead of it, so it is not
// refused for good.
func (b *inboxBudget) take(peer uint64, ns metadata.Namespace, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.byNS[ns]
	var q int64
	if peer != 0 {
		q = b.byPeer[peer]
	}
	if b.held > 0 && b.held+n > b.max || p > 0 && p+n > b.nsMax || q > 0 && q+n > b.peerMax {
		return false
	}
	b.byNS[ns] = p + n
	if peer != 0 {
		b.byPeer[peer] = q + n
	}
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

// give releases what take charged.
func (b *inboxBudget) give(peer uint64, ns metadata.Namespace, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.byNS[ns] - n; p > 0 {
		b.byNS[ns] = p
	} else {
		delete(b.byNS, ns)
	}
	if peer != 0 {
		if q := b.byPeer[peer] - n; q > 0 {
			b.byPeer[peer] = q
		} else {
			delete(b.byPeer, peer)
		}
	}
	b.held -= n
}

// charge reserves f's bytes, or refuses f with ErrInboxBytes.
func (s *Shard) charge(f Frame) (inboxFrame, error) {
	n := inboxCharge(f)
	if n == 0 {
		return inboxFrame{f: f}, nil
	}
	if !s.inboxBytes.take(f.Req.Peer, f.Req.NS, n) {
		return inboxFrame{}, ErrInboxBytes
	}
	return inboxFrame{f: f, n: n}, nil
}

// uncharge releases what charge reserved, for a frame that did not enter
// the inbox or that the pump took from it.
func (s *Shard) uncharge(in inboxFrame) {
	if in.n != 0 {
		s.inboxBytes.give(in.f.Req.Peer, in.f.Req.NS, in.n)
	}
}

// taken releases the bytes of a frame the pump took from the inbox and
// counts it handled (inline.go: its taker holds the run token until the
// frame is handled, so no inline run sees it between).
func (s *Shard) taken(in inboxFrame) Frame {
	s.uncharge(in)
	s.handled++
	return in.f
}

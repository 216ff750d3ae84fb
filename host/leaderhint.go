package host

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// The leaders of partitions this node holds no replica of. A node's
// shards know the leader of the raft groups they are members of only; a
// client of this node (a Kafka listener's Metadata, Cluster.Leader) also
// needs the leader of a partition placed elsewhere, or it is told "no
// leader" for as long as the placement lasts. So the node asks: a
// replica, with a leader read of the partition's offsets (the leader
// confirms with a quorum that it still leads, so only a current leader
// answers it, with its term), following the followers' "not leader, ask
// N" pointers. What it learns is kept for a short while
// (leaderHintTicks); a hint naming a node declared dead, or one that
// answered a forwarded request "not leader", is dropped.

// leaderHintTicks is how many raft ticks a learnt leader is trusted
// before it is asked again (a second at the default tick). A client sent
// to a leader that lost the lead meanwhile is pointed on by it, and a
// hint naming a node declared dead, or a node that answered "not leader",
// is dropped at once, so the bound matters only for a leader that moved
// while this node sent it nothing.
const leaderHintTicks = 100

// leaderHints are learnt leaders of partitions held elsewhere.
type leaderHints struct {
	mu sync.Mutex
	m  map[metadata.Namespace]leaderHint
}

type leaderHint struct {
	lead, term uint64
	at         time.Time
}

func (h *leaderHints) get(ns metadata.Namespace, now time.Time, ttl time.Duration) (leaderHint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.m[ns]
	if !ok || now.Sub(l.at) >= ttl || now.Before(l.at) {
		return leaderHint{}, false
	}
	return l, true
}

func (h *leaderHints) set(ns metadata.Namespace, lead, term uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[metadata.Namespace]leaderHint)
	}
	// Bounded by the partitions a node's clients address; a node with
	// that many partitions elsewhere starts over rather than grow.
	if len(h.m) >= 1<<16 {
		clear(h.m)
	}
	h.m[ns] = leaderHint{lead: lead, term: term, at: now}
}

// drop forgets ns's hint if it names lead (any hint when lead is 0).
func (h *leaderHints) drop(ns metadata.Namespace, lead uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.m[ns]; ok && (lead == 0 || l.lead == lead) {
		delete(h.m, ns)
	}
}

// dropNode forgets every hint naming node.
func (h *leaderHints) dropNode(node uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ns, l := range h.m {
		if l.lead == node {
			delete(h.m, ns)
		}
	}
}

// hintTTL is how long a learnt leader is trusted.
func (c *clusterNode) hintTTL() time.Duration {
	return leaderHintTicks * c.cfg.TickInterval
}

// learnForwarded drops a hint naming node to when a request forwarded
// there was answered "not leader".
func (c *clusterNode) learnForwarded(req *shard.Request, to uint64, r shard.Response, err error) {
	if err == nil {
		err = r.Err
	}
	if errors.Is(err, shard.ErrNotLeader) {
		c.hints.drop(req.NS, to)
	}
}

// remoteLeader returns the leader of ns, a partition held elsewhere, and
// its term: the hint learnt last, or what its replicas answer now (0, 0
// when none confirms a leader: an election is under way, or none
// answers).
func (c *clusterNode) remoteLeader(ctx context.Context, ns metadata.Namespace) (lead, term uint64) {
	now := c.e.cfg.Clock.Now()
	if h, ok := c.hints.get(ns, now, c.hintTTL()); ok {
		return h.lead, h.term
	}
	info, ok := c.e.meta.Partition(ns)
	if !ok || len(info.Replicas) == 0 {
		return 0, 0
	}
	// The replicas node liveness holds alive first, each asked at most
	// once; a follower's pointer is asked next.
	nodes := metadata.NodesOf(info.Replicas) // the replicas' raft ids name their nodes
	queue := make([]uint64, 0, len(nodes))
	for _, r := range nodes {
		if c.live.heardRecently(r) {
			queue = append(queue, r)
		}
	}
	for _, r := range nodes {
		if !slices.Contains(queue, r) {
			queue = append(queue, r)
		}
	}
	asked := make(map[uint64]bool, len(queue))
	for len(queue) > 0 && ctx.Err() == nil {
		to := queue[0]
		queue = queue[1:]
		if asked[to] || to == uint64(c.cfg.ID) {
			continue
		}
		asked[to] = true
		pointer, term, ok := c.askLeader(ctx, ns, to)
		if ok {
			c.hints.set(ns, to, term, c.e.cfg.Clock.Now())
			return to, term
		}
		if pointer != 0 && !asked[pointer] {
			queue = append([]uint64{pointer}, queue...)
		}
	}
	return 0, 0
}

// askLeader sends a leader read of ns's offsets to node to, bounded by
// the forward timeout: ok when to served it (it leads; term is its
// term); otherwise the leader it points at, if any.
func (c *clusterNode) askLeader(ctx context.Context, ns metadata.Namespace, to uint64) (pointer, term uint64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, c.e.ForwardTimeout())
	defer cancel()
	r, err := c.e.forward(ctx, to, &shard.Request{Op: shard.OpOffsets, NS: ns, FromLeader: true})
	if err == nil {
		err = r.Err
	}
	if err == nil {
		return 0, r.Term, true
	}
	var nl *shard.NotLeaderError
	if errors.As(err, &nl) {
		return nl.Leader, 0, false
	}
	return 0, 0, false
}

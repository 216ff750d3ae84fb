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
// replica, with a leader read (the leader confirms with a quorum that it
// still leads, so only a current leader answers it), following the
// followers' "not leader, ask N" pointers. What it learns is kept for a
// short while (leaderHintTTL), and also learnt from the requests it
// forwards (a write or a leader read answered by node N was served by
// N's leadership); a hint naming a node declared dead is dropped.

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
	lead uint64
	at   time.Time
}

func (h *leaderHints) get(ns metadata.Namespace, now time.Time, ttl time.Duration) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.m[ns]
	if !ok || now.Sub(l.at) >= ttl || now.Before(l.at) {
		return 0, false
	}
	return l.lead, true
}

func (h *leaderHints) set(ns metadata.Namespace, lead uint64, now time.Time) {
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
	h.m[ns] = leaderHint{lead: lead, at: now}
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

// learnForwarded records what a forwarded request's answer from node to
// says of ns's leader: a write, or a leader read, served there was served
// by the leader; "not leader" there ends a hint naming it.
func (c *clusterNode) learnForwarded(req *shard.Request, to uint64, r shard.Response, err error) {
	if err == nil {
		err = r.Err
	}
	switch {
	case err == nil && (req.FromLeader || req.Op.IsWrite()):
		c.hints.set(req.NS, to, c.e.cfg.Clock.Now())
	case errors.Is(err, shard.ErrNotLeader):
		c.hints.drop(req.NS, to)
	}
}

// remoteLeader returns the leader of ns, a partition held elsewhere: the
// hint learnt last, or what its replicas answer now (0 when none
// confirms a leader: an election is under way, or none answers).
func (c *clusterNode) remoteLeader(ctx context.Context, ns metadata.Namespace) uint64 {
	now := c.e.cfg.Clock.Now()
	if lead, ok := c.hints.get(ns, now, c.hintTTL()); ok {
		return lead
	}
	info, ok := c.e.meta.Partition(ns)
	if !ok || len(info.Replicas) == 0 {
		return 0
	}
	// The replicas node liveness holds alive first, each asked at most
	// once; a follower's pointer is asked next.
	queue := make([]uint64, 0, len(info.Replicas))
	for _, r := range info.Replicas {
		if c.live.heardRecently(r) {
			queue = append(queue, r)
		}
	}
	for _, r := range info.Replicas {
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
		pointer, ok := c.askLeader(ctx, ns, to)
		if ok {
			return to // askLeader learnt it (Forward's learnForwarded)
		}
		if pointer != 0 && !asked[pointer] {
			queue = append([]uint64{pointer}, queue...)
		}
	}
	return 0
}

// askLeader sends a leader read of ns's offsets to node to, bounded by
// the forward timeout: ok when to served it (it leads); otherwise the
// leader it points at, if any.
func (c *clusterNode) askLeader(ctx context.Context, ns metadata.Namespace, to uint64) (pointer uint64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, c.e.ForwardTimeout())
	defer cancel()
	r, err := c.e.Forward(ctx, to, &shard.Request{Op: shard.OpOffsets, NS: ns, FromLeader: true})
	if err == nil {
		err = r.Err
	}
	if err == nil {
		return 0, true
	}
	var nl *shard.NotLeaderError
	if errors.As(err, &nl) {
		return nl.Leader, false
	}
	return 0, false
}

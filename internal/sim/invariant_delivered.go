package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Invariant 12: a group commits only what its members were handed
// (cluster mode with Config.GroupMembers; DESIGN behaviour 23). Every
// offset below the members' group's committed offset of a partition —
// the largest any node applied for the group's incarnation — was handed
// to the application of some member (at least once delivery): a member
// commits the offset after the last message it delivered, and starts
// polling at the committed offset, so a committed offset past a message
// nobody received means that message is lost to the group for good.
// That the committed offset never goes backwards is invariant 6's.
// Checked when a member's poll ends (for its partition), when its
// commit ends (for the partitions it named) and, for every partition,
// once the run has settled.
var invDelivered = invariant{
	id:        12,
	name:      "every offset below a group's committed offset delivered to a member",
	behaviour: "23, 33",
	settled:   inCluster((*sim).checkAllDelivered),
	online:    "every poll and commit a member ends (cmembers.go)",
	caughtBy:  []string{"testhooks.CommitSkipsOffset", "testhooks.CommitBeforeHandled", "testhooks.IntervalCommitsFetched"},
}

// deliveryKey names a partition of the members' group in one incarnation
// of its topic and of the group.
type deliveryKey struct {
	stream, topic      uint32
	topicRev, groupRev uint64
	part               uint32
}

func (k deliveryKey) String() string {
	return fmt.Sprintf("%d/%d/%d (topic revision %d, group revision %d)", k.stream, k.topic, k.part, k.topicRev, k.groupRev)
}

// deliveredSet is the offsets of a partition handed to some member's
// application: all below prefix, and those in above.
type deliveredSet struct {
	prefix uint64
	above  map[uint64]bool
}

// add records offset off as delivered.
func (d *deliveredSet) add(off uint64) {
	if off < d.prefix {
		return
	}
	if d.above == nil {
		d.above = make(map[uint64]bool)
	}
	d.above[off] = true
	for d.above[d.prefix] {
		delete(d.above, d.prefix)
		d.prefix++
	}
}

// deliveryKeyOf is the key of m's partition part.
func deliveryKeyOf(m *gmember, part uint32) deliveryKey {
	return deliveryKey{stream: m.Stream, topic: m.Topic, topicRev: m.TopicRevision, groupRev: m.groupRev, part: part}
}

// noteDelivered records that a member handed the messages at offsets
// offs of k to its application.
func (c *sim) noteDelivered(k deliveryKey, offs []uint64) {
	if c.delivered == nil {
		c.delivered = make(map[deliveryKey]*deliveredSet)
	}
	d := c.delivered[k]
	if d == nil {
		d = new(deliveredSet)
		c.delivered[k] = d
	}
	for _, off := range offs {
		d.add(off)
	}
}

// checkDelivered: every offset below k's committed offset (the largest
// a running node applied) was delivered to some member (invariant 12).
func (c *sim) checkDelivered(k deliveryKey) {
	off, at := c.committedOf(k)
	var below uint64
	if d := c.delivered[k]; d != nil {
		below = d.prefix
	}
	if off > below {
		c.fail(12, "the members' group committed offset %d of %v (applied on n%d), but offset %d below it was handed to no member",
			off, k, at, below)
	}
}

// checkAllDelivered checks every partition a member polled.
func (c *sim) checkAllDelivered() {
	for _, k := range slices.SortedFunc(maps.Keys(c.delivered), cmpKeys) {
		if c.viol != nil {
			return
		}
		c.checkDelivered(k)
	}
}

// cmpKeys orders delivery keys, for a deterministic check order.
func cmpKeys(a, b deliveryKey) int {
	return cmp.Or(cmp.Compare(a.stream, b.stream), cmp.Compare(a.topic, b.topic), cmp.Compare(a.topicRev, b.topicRev),
		cmp.Compare(a.groupRev, b.groupRev), cmp.Compare(a.part, b.part))
}

// committedOf is the members' group's committed offset of k's partition
// as far as any running node knows, for k's incarnations, and a node
// that applied it.
func (c *sim) committedOf(k deliveryKey) (uint64, uint64) {
	var off, at uint64
	for _, n := range c.nodes {
		if n.down || n.meta == nil {
			continue
		}
		t, ok := n.meta.Topic(k.stream, k.topic)
		if !ok || t.CreatedRevision != k.topicRev {
			continue
		}
		g, ok := n.meta.GroupSummary(k.stream, k.topic, memberGroup)
		if !ok || g.CreatedRevision != k.groupRev {
			continue
		}
		if p, ok := n.meta.GroupPartitionState(k.stream, k.topic, memberGroup, k.part); ok && p.Committed && p.Offset > off {
			off, at = p.Offset, n.id
		}
	}
	return off, at
}

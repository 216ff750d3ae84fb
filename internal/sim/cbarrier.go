package sim

import (
	"errors"
	"slices"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/shard"
)

// Read barriers. A client looking a stream or topic up by name through
// a node (Node.Stream, Node.Topic, the listings) first waits for the
// node's read barrier (host.Engine.ReadBarrier): a read index through
// the metadata group's leader, then a wait until the node has applied
// it. The simulator starts the same barrier on a node's manual engine
// (Engine.StartReadBarrier) and steps it after every action, where a
// started engine's call blocks on it; its tries and pauses are the
// engine's (host.AskDriver). A barrier that returns must leave its node
// having applied every metadata entry some node had applied when it
// started (invariant 11); one given up at its deadline (the node cut
// off from the leader, the member down) is an answer too.

// maxBarriers bounds the read barriers in flight.
const maxBarriers = 4

// barrier is a read barrier in flight on node n (incarnation gen).
type barrier struct {
	id   int
	n    *node
	gen  int
	b    *host.Barrier
	want uint64 // the highest metadata index any node had applied at its start
}

// metaIndex is how far e's metadata member has applied, as invariant 11
// compares members: raft's applied index (MetadataStatus), not
// MetadataApplied. That is the index of the last command or snapshot
// applied, so a member that applied entries without a command after its
// last one (a configuration change, a new leader's empty entry) reports
// less than a joiner that installed a snapshot at one of them, though it
// applied as much: cluster seeds 20529 and 21097 failed so, on a tree
// whose check compared MetadataApplied
// (TestBarrierIndexCountsEntriesWithoutCommand).
func metaIndex(e *host.Engine) uint64 { return e.MetadataStatus().Applied }

// startBarrier starts a read barrier on n.
func (c *sim) startBarrier(n *node) {
	var want uint64
	for _, m := range c.nodes {
		if m.eng != nil && !m.down {
			want = max(want, metaIndex(m.eng))
		}
	}
	b, err := n.eng.StartReadBarrier(n.clk.Now().Add(requestTimeout))
	if err != nil {
		c.fail(0, "n%d read barrier: %v", n.id, err)
		return
	}
	c.nextBarrier++
	c.barriers = append(c.barriers, &barrier{id: c.nextBarrier, n: n, gen: n.gen, b: b, want: want})
	c.ops.Barriers++
	c.event("barrier b=%d n%d want=%d applied=%d", c.nextBarrier, n.id, want, metaIndex(n.eng))
}

// stepBarriers steps the read barriers in flight on the running nodes;
// those whose node crashed are gone with it.
func (c *sim) stepBarriers() {
	stepped := false
	for i := 0; i < len(c.barriers) && c.viol == nil; {
		b := c.barriers[i]
		if b.n.gen != b.gen || b.n.down || c.node(b.n.id) != b.n {
			c.event("barrier b=%d gone with n%d", b.id, b.n.id)
			c.barriers = slices.Delete(c.barriers, i, i+1)
			continue
		}
		if b.n.stopped {
			i++
			continue
		}
		err, done := b.b.Step()
		stepped = true
		if !done {
			i++
			continue
		}
		c.barriers = slices.Delete(c.barriers, i, i+1)
		got := metaIndex(b.n.eng)
		c.event("barrier b=%d n%d done applied=%d err=%v", b.id, b.n.id, got, errString(err))
		switch {
		case err == nil && got < b.want:
			c.fail(11, "read barrier %d on n%d returned with metadata index %d applied, but index %d was applied on a node when it started",
				b.id, b.n.id, got, b.want)
		case err == nil:
		case errors.Is(err, shard.ErrRetry) || errors.Is(err, host.ErrMetadataFailed):
			c.ops.BarriersFailed++
		default:
			c.fail(0, "read barrier %d on n%d failed: %v", b.id, b.n.id, err)
		}
	}
	if stepped {
		for _, n := range c.nodes {
			n.flushOutbox()
		}
	}
}

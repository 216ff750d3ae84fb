package sim

import (
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// Cluster seed 805's harness gap, in the order that hit it: n1 forwards a
// produce to n2 while n2 is stopped (the request waits in n2's inbox), n1
// crashes (the attempt is answered by the crash) and restarts, and its
// new life forwards another produce, to n3, under the same request id (as
// engines did when their ids counted from 1 on every start; a random base
// makes it rare since, not impossible). Then n2 resumes and takes the
// first request off the bus. Its shard may apply it, so it must be
// credited to the first attempt: a produce credited to none is appended
// with no shard having taken its frame, which the storage tap reports as
// invariant 0. And the answers each node sends under the key must go to
// the attempt it served: n3's to the second, n2's to nothing (the first
// attempt's operation ended with the crash).
func TestForwardQueuedAtAStoppedNodeCreditedAfterItsSenderCrashed(t *testing.T) {
	c := newSim(DefaultClusterConfig(805).withDefaults())
	n1, n2, n3 := c.testNode(1), c.testNode(2), c.testNode(3)
	const id = 41 // the request id both lives of n1 drew
	ns := metadata.Namespace(7)

	produce := func(home, to *node) *attempt {
		c.nextOp++
		o := &op{id: c.nextOp, kind: kindProduce, ns: ns, n: 1, home: home}
		a := c.newAttempt(o)
		a.node, a.via = to, home
		c.keepForward(a, home, id)
		return a
	}
	first := produce(n1, n2)
	n2.stopped = true // the request waits in n2's inbox
	c.answerCrashed(first)
	n1b := c.testNode(1) // n1's next life
	second := produce(n1b, n3)

	// n2 resumes and reads the first request off the bus.
	n2.stopped = false
	m := transport.Message{From: 1, To: 2, Kind: host.KindRequest, Group: id}
	if got := c.takeForwarded(t, n2, m, first.req); got != first {
		t.Fatalf("n2's request under n1's id %d credited to %s, want the first attempt %d", id, attemptName(got), first.id)
	}
	first.handles++ // n2's shard took its frame
	// n3 reads the second.
	m.To = 3
	if got := c.takeForwarded(t, n3, m, second.req); got != second {
		t.Fatalf("n3's request under n1's id %d credited to %s, want the second attempt %d", id, attemptName(got), second.id)
	}
	second.handles++

	// The answers: n3 serves the second attempt (incarnation 5); n2's
	// answer to the first is nobody's now.
	n2.lastServe[ns], n3.lastServe[ns] = 4, 5
	c.forwardReplied(n2, transport.Message{From: 2, To: 1, Kind: host.KindReply, Group: id, Payload: host.EncodeResponse(shard.Response{Offset: 3})})
	c.forwardReplied(n3, transport.Message{From: 3, To: 1, Kind: host.KindReply, Group: id, Payload: host.EncodeResponse(shard.Response{Offset: 9})})
	if c.viol != nil {
		t.Fatalf("violation: %v", c.viol)
	}
	if first.fwdServed != 0 || second.fwdServed != 5 {
		t.Fatalf("answers captured: first attempt %d, second %d; want 0 and 5 (n3's)", first.fwdServed, second.fwdServed)
	}
}

// testNode is a cluster member with no engine, for the harness's
// bookkeeping alone: node id's next life (the last one so named in
// c.nodes is replaced).
func (c *sim) testNode(id uint64) *node {
	n := &node{b: c, member: true, id: id, lastServe: make(map[metadata.Namespace]uint64), incs: newTimeline()}
	for i, m := range c.nodes {
		if m.id == id {
			n.gen = m.gen + 1
			c.nodes[i] = n
			return n
		}
	}
	c.nodes = append(c.nodes, n)
	return n
}

// takeForwarded is what receive and the inbox mirror do with request req
// forwarded as m when n reads it off the bus: the attempt it is credited
// to (nil: a stray). The request goes over the wire first, as on the bus.
func (c *sim) takeForwarded(t *testing.T, n *node, m transport.Message, req *shard.Request) *attempt {
	t.Helper()
	now := c.clk.Now()
	b, err := host.EncodeRequest(req, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := host.DecodeRequest(b, now)
	if err != nil {
		t.Fatal(err)
	}
	c.delivering, c.fromBus = c.forwardedTo(n, m), true
	defer func() { c.delivering, c.fromBus = nil, false }()
	return c.forwardedReq(got)
}

func attemptName(a *attempt) string {
	if a == nil {
		return "no attempt (a stray)"
	}
	return fmt.Sprintf("attempt %d", a.id)
}

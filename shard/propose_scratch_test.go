package shard

import (
	"slices"
	"testing"
)

// A produce buffered at the leader while an earlier entry is applied is
// still proposed and answered: the applied entry's frame list, handed
// back for reuse, must not replace the buffer that holds it.
func TestProduceBufferedWhileAnEntryAppliesIsProposed(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, ns, epoch)
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	// deliver hands the queued messages for the nodes want selects to
	// them and keeps the others queued.
	deliver := func(want func(to uint64) bool) {
		q := n.queue
		n.queue = nil
		for _, m := range q {
			if !want(m.to) {
				n.queue = append(n.queue, m)
				continue
			}
			n.shard(m.to).handle(Frame{Req: &Request{Op: OpRaft, NS: m.ns, Epoch: m.epoch, Raft: m.m}})
		}
	}
	a := produce(ns, "a")
	s.handle(a.f)
	s.rg.flushProposals()
	s.rg.processReady() // the entry goes out to the followers
	deliver(func(to uint64) bool { return to != lead })
	for id := uint64(1); id <= 3; id++ {
		if id != lead {
			n.shard(id).settle() // they append it and answer
		}
	}
	b := produce(ns, "b")
	s.handle(b.f) // buffered for the next proposal
	deliver(func(to uint64) bool { return to == lead })
	s.rg.processReady() // "a" commits and is applied while "b" waits in the buffer
	if r := a.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	n.settle()
	if r := b.answered(t); r.Err != nil || r.Offset != 1 {
		t.Fatalf("produce buffered during the apply: %+v", r)
	}
	if got := payloads(t, s.owned[ns].p); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("leader log %q", got)
	}
}

package shard

import (
	"errors"
	"testing"

	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// offsetStoreFails is a partition whose consumer-offset writes fail with
// an I/O error, as a failing disk would.
type offsetStoreFails struct {
	partition.Partition
	err error
}

func (p offsetStoreFails) StoreConsumerOffset(string, uint64) error { return p.err }

// TestBehaviour17FailedApplyAnswersEachWriteOfTheEntryOnce: when a
// committed entry cannot be applied part-way through (an I/O error storing
// a consumer offset), every write of the entry is answered exactly once —
// the write applied before the failure with its result, the failing one
// and every one after it with ErrOutcomeUnknown (they are committed; the
// partition is rebuilt and applies them again) — and no answer is lost to
// a full reply channel.
func TestBehaviour17FailedApplyAnswersEachWriteOfTheEntryOnce(t *testing.T) {
	n := newReplNet(t)
	ns, epoch := n.create("t", 1, 2, 3)
	eio := errors.New("EIO")
	for id := uint64(1); id <= 3; id++ {
		h := n.nodes[id]
		p := offsetStoreFails{h.build(ns, epoch), eio}
		if err := h.step(h.shards[0], opInsertOwned(p, noSync)); err != nil {
			t.Fatal(err)
		}
	}
	n.settle()
	lead := n.tickUntilLeader(ns)
	if lead == 0 {
		t.Fatal("no leader")
	}
	s := n.shard(lead)
	calls := []call{
		produce(ns, "before"),
		request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: 0}),
		produce(ns, "after"),
	}
	for _, c := range calls {
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
	}
	for range calls {
		s.handleFrame(<-s.inbox) // as the pump: one entry once the inbox drains
	}
	if o := s.owned[ns]; len(o.pending) != 1 {
		t.Fatalf("%d proposals for three buffered writes, want 1", len(o.pending))
	}
	n.settle()
	if r := calls[0].answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce applied before the failure: %+v", r)
	}
	for i, c := range calls[1:] {
		if r := c.answered(t); !errors.Is(r.Err, ErrOutcomeUnknown) || !errors.Is(r.Err, eio) {
			t.Fatalf("write %d, at or after the failure: %v, want ErrOutcomeUnknown wrapping the I/O error", i+1, r.Err)
		}
	}
	drops := n.nodes[lead].drops("0", "produce", metrics.ReasonDeliveryFailed) +
		n.nodes[lead].drops("0", "store_offset", metrics.ReasonDeliveryFailed)
	if drops != 0 {
		t.Fatalf("%v answers lost to a full reply channel (a write answered twice)", drops)
	}
}

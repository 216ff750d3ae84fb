package shard

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// TestInboxBytesBoundsPeerFlood: a member floods one partition's replica
// with large raft and catch-up frames (64 KiB each, far more than the
// shard steps) while a client produces to another partition on the same
// shard, whose leader it is. The inbox never holds more peer bytes than
// InboxBytes (1 MiB here), the flooded partition no more than its quarter;
// the flood's excess is refused with ErrInboxBytes (its sender would send
// it again: raft and catch-up are lossy), and the other partition's raft
// frames always enter, so every produce to it is acknowledged and reaches
// all three replicas. Bounded in frames only, the inbox took the whole
// flood: 1,024 frames of 64 KiB.
func TestInboxBytesBoundsPeerFlood(t *testing.T) {
	const bound = 1 << 20
	n := newReplNet(t)
	for id := uint64(1); id <= 3; id++ {
		s := n.shard(id)
		s.cfg.InboxBytes = bound
		s.inboxBytes = newInboxBudget(bound)
	}
	flooded, epochA := n.create("a", 1, 2, 3)
	served, epochB := n.create("b", 1, 2, 3)
	logs := map[uint64]partition.Partition{}
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, flooded, epochA)
		logs[id] = n.materialise(id, served, epochB)
	}
	n.settle()
	if n.tickUntilLeader(flooded) == 0 {
		t.Fatal("no leader of the flooded partition")
	}
	lead := n.tickUntilLeader(served)
	if lead == 0 {
		t.Fatal("no leader of the served partition")
	}
	victim := n.shard(lead)
	attacker := lead%3 + 1

	big := make([]byte, 64<<10)
	floodFrame := func(i int) Frame {
		if i%2 == 0 {
			return Frame{Req: &Request{Op: OpCatchUp, NS: flooded, Epoch: epochA, Payload: big}}
		}
		m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(attacker), To: new(lead), Term: new(uint64(1)),
			Entries: []*raftpb.Entry{{Term: new(uint64(1)), Index: new(uint64(1)), Data: big}}}
		return Frame{Req: &Request{Op: OpRaft, NS: flooded, Epoch: epochA, Raft: m}}
	}
	var sent, refused int
	flood := func() {
		for range 64 {
			err := victim.TrySend(floodFrame(sent + refused))
			switch {
			case err == nil:
				sent++
			case errors.Is(err, ErrInboxBytes):
				refused++
			default:
				t.Fatalf("flood frame: %v", err)
			}
			if b := victim.inboxBytes; b.held > bound || b.byNS[flooded] > bound/inboxNamespaceShare {
				t.Fatalf("the inbox holds %d peer bytes, %d of the flooded partition: over %d", b.held, b.byNS[flooded], bound)
			}
		}
	}
	// drive steps the shards' inboxes and delivers the raft traffic
	// through them until all is quiet, flooding the victim again at each
	// of its first 50 rounds.
	drive := func() {
		for round := range 10000 {
			if round < 50 {
				flood()
			}
			busy := false
			for id := uint64(1); id <= 3; id++ {
				s := n.shard(id)
				s.settle()
				for k := len(s.inbox); k > 0; k-- {
					busy = true
					s.handleFrame(s.taken(<-s.inbox))
				}
			}
			q := n.queue
			n.queue = nil
			for _, m := range q {
				busy = true
				err := n.shard(m.to).TrySend(Frame{Req: &Request{Op: OpRaft, NS: m.ns, Epoch: m.epoch, Raft: m.m}})
				if err != nil && (m.ns == served || !errors.Is(err, ErrInboxBytes)) {
					t.Fatalf("raft frame of partition %v to node %d refused: %v", m.ns, m.to, err)
				}
			}
			if !busy && round >= 50 {
				return
			}
		}
		t.Fatal("the shards did not settle")
	}

	var want []string
	for i := range 20 {
		flood()
		p := fmt.Sprintf("m%d", i)
		c := produce(served, p)
		if err := victim.TrySend(c.f); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		drive()
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d under the flood: %+v", i, r)
		}
		want = append(want, p)
	}
	for range 5 {
		n.tick(1)
		drive()
	}
	for id, p := range logs {
		if got := payloads(t, p); !slices.Equal(got, want) {
			t.Fatalf("node %d's log of the served partition: %q, want %q", id, got, want)
		}
	}
	if b := victim.inboxBytes; b.peak > bound || refused == 0 || sent == 0 {
		t.Fatalf("peak %d of %d bytes; %d flood frames taken, %d refused", b.peak, bound, sent, refused)
	}
	t.Logf("flood: %d frames taken, %d refused; peak %d bytes of %d", sent, refused, victim.inboxBytes.peak, bound)
}

// TestInboxBudget: a peer frame is refused past the total while the inbox
// holds peer bytes, or past its partition's quarter while the partition
// holds any; a frame larger than a bound enters when nothing is ahead of
// it; releases free both.
func TestInboxBudget(t *testing.T) {
	b := newInboxBudget(100) // a partition's share: 25
	steps := []struct {
		ns metadata.Namespace
		n  int64
		ok bool
	}{
		{1, 20, true},
		{1, 10, false}, // past partition 1's share
		{2, 60, true},  // larger than the share, but partition 2 holds nothing
		{3, 25, false}, // past the total (20+60+25 > 100)
		{3, 20, true},
		{4, 1, false}, // the total is spent
	}
	for i, s := range steps {
		if got := b.take(s.ns, s.n); got != s.ok {
			t.Fatalf("step %d: take(%d, %d) = %v", i, s.ns, s.n, got)
		}
	}
	if b.held != 100 || b.peak != 100 {
		t.Fatalf("held %d, peak %d", b.held, b.peak)
	}
	b.give(1, 20)
	b.give(2, 60)
	b.give(3, 20)
	if b.held != 0 || len(b.byNS) != 0 {
		t.Fatalf("after release: %d held, %d partitions", b.held, len(b.byNS))
	}
	if !b.take(5, 500) {
		t.Fatal("a frame larger than the bound was refused by an empty inbox")
	}
}

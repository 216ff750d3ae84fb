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
		if got := b.take(0, s.ns, s.n); got != s.ok {
			t.Fatalf("step %d: take(%d, %d) = %v", i, s.ns, s.n, got)
		}
	}
	if b.held != 100 || b.peak != 100 {
		t.Fatalf("held %d, peak %d", b.held, b.peak)
	}
	b.give(0, 1, 20)
	b.give(0, 2, 60)
	b.give(0, 3, 20)
	if b.held != 0 || len(b.byNS) != 0 {
		t.Fatalf("after release: %d held, %d partitions", b.held, len(b.byNS))
	}
	if !b.take(0, 5, 500) {
		t.Fatal("a frame larger than the bound was refused by an empty inbox")
	}
}

// TestInboxBudgetPeerShare: one sending peer's frames hold at most half
// the bound, whatever partitions they are for, so a peer flooding many
// partitions (each within its quarter) leaves room for another peer's
// frames; a frame of a peer holding nothing enters past its share;
// releases free the peer's share.
func TestInboxBudgetPeerShare(t *testing.T) {
	b := newInboxBudget(100) // a partition's share: 25, a peer's: 50
	for ns := metadata.Namespace(1); ns <= 2; ns++ {
		if !b.take(2, ns, 25) {
			t.Fatalf("peer 2's frame for partition %d refused within its shares", ns)
		}
	}
	if b.take(2, 3, 10) {
		t.Fatal("peer 2 passed its half of the inbox with a third partition")
	}
	if !b.take(3, 4, 25) || !b.take(3, 5, 25) {
		t.Fatal("peer 3's frames refused while peer 2 floods")
	}
	if b.byPeer[2] != 50 || b.byPeer[3] != 50 || b.held != 100 {
		t.Fatalf("held %d: peer 2 %d, peer 3 %d", b.held, b.byPeer[2], b.byPeer[3])
	}
	b.give(2, 1, 25)
	b.give(2, 2, 25)
	if _, ok := b.byPeer[2]; ok {
		t.Fatalf("peer 2 still charged %d after its frames were taken", b.byPeer[2])
	}
	if !b.take(2, 3, 25) {
		t.Fatal("peer 2 refused after its frames were taken")
	}
	b.give(3, 4, 25)
	b.give(3, 5, 25)
	b.give(2, 3, 25)
	if !b.take(4, 6, 80) {
		t.Fatal("a frame larger than a peer's share refused while its peer holds nothing")
	}
}

// TestInboxBytesPeerFloodingManyPartitions: a member floods eight
// partitions' replicas on one shard with large frames, each partition
// within its quarter of InboxBytes; another member's frame for a ninth
// partition still enters. With shares per partition only, the flood of
// four partitions filled the inbox and the second member's frame was
// refused.
func TestInboxBytesPeerFloodingManyPartitions(t *testing.T) {
	const bound = 1 << 20
	s := &Shard{inboxBytes: newInboxBudget(bound)}
	big := make([]byte, 64<<10)
	frame := func(peer uint64, ns metadata.Namespace) Frame {
		return Frame{Req: &Request{Op: OpCatchUp, NS: ns, Epoch: 1, Payload: big, Peer: peer}}
	}
	var taken []inboxFrame
	refused := 0
	for i := range 64 {
		in, err := s.charge(frame(2, metadata.Namespace(1+i%8)))
		switch {
		case err == nil:
			taken = append(taken, in)
		case errors.Is(err, ErrInboxBytes):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 || s.inboxBytes.byPeer[2] > bound/inboxPeerShare {
		t.Fatalf("the flooding peer holds %d bytes of %d (%d frames refused)", s.inboxBytes.byPeer[2], bound, refused)
	}
	for i := range 4 {
		in, err := s.charge(frame(3, metadata.Namespace(100+i)))
		if err != nil {
			t.Fatalf("the other member's frame %d refused under the flood: %v", i, err)
		}
		taken = append(taken, in)
	}
	for _, in := range taken {
		s.uncharge(in)
	}
	if b := s.inboxBytes; b.held != 0 || len(b.byPeer) != 0 || len(b.byNS) != 0 {
		t.Fatalf("after the frames were taken: %d held, %d peers, %d partitions", b.held, len(b.byPeer), len(b.byNS))
	}
}

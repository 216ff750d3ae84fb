package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// hostileState is the 25-byte partition snapshot state of issue 13: a
// valid header, no deduplication entries, and a consumer count of 2^32-1
// with nothing behind it.
func hostileState() []byte {
	b := []byte{stateVersion}
	b = binary.LittleEndian.AppendUint64(b, 7)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, 0xffffffff)
}

// TestDecodeStateAllocatesLittle: a count read from the bytes never sizes
// an allocation beyond what the bytes can hold. The 25-byte input above
// allocated 3.5 MB (a consumer map pre-sized from the count).
func TestDecodeStateAllocatesLittle(t *testing.T) {
	in := hostileState()
	if len(in) != 25 {
		t.Fatalf("input is %d bytes", len(in))
	}
	if _, err := decodeState(in); !errors.Is(err, errBadState) {
		t.Fatalf("decodeState = %v, want errBadState", err)
	}
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		_, _ = decodeState(in)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("decoding %d bytes allocates %d bytes", len(in), per)
	if per > 64*uint64(len(in)) {
		t.Fatalf("decoding %d bytes allocates %d bytes", len(in), per)
	}
}

// FuzzDecodeState: any bytes decode without a panic, with an allocation
// bounded by the input, and a state that decodes encodes back to a state
// that decodes the same.
func FuzzDecodeState(f *testing.F) {
	o := &owned{rep: replicated{cursor: 42, start: 3}}
	o.rep.dedupe.Put(produceKey{Producer: 1, Seq: 2}, 40)
	o.rep.dedupe.Put(produceKey{Producer: 1, Seq: 3}, 41)
	o.rep.setConsumer("c0", 12)
	o.rep.setConsumer("group-b", 40)
	f.Add(o.rep.encodeState())
	f.Add((&replicated{}).encodeState())
	f.Add(hostileState())
	f.Add([]byte{})
	f.Add([]byte{stateVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			return
		}
		o := &owned{}
		o.rep.restore(st)
		again, err := decodeState(o.rep.encodeState())
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if again.next != st.next || again.start != st.start || len(again.consumers) != len(st.consumers) {
			t.Fatalf("state %+v re-decodes as %+v", st, again)
		}
	})
}

// TestForgedRaftMessageCountedAndDropped: a raft message no correct peer
// sends — the forged snapshot whose voters make etcd raft panic — is
// refused by the partition's group, counted as a drop, and the partition
// keeps serving.
func TestForgedRaftMessageCountedAndDropped(t *testing.T) {
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
	victim := lead%3 + 1
	from := victim%3 + 1
	forged := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(from), To: new(victim), Term: new(uint64(1000)),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1000)), Term: new(uint64(1000)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 1, 2}}}}}
	n.shard(victim).handle(Frame{Req: &Request{Op: OpRaft, NS: ns, Epoch: epoch, Raft: forged}})
	if got := n.nodes[victim].drops("0", OpRaft.String(), metrics.ReasonInvalidRaft); got != 1 {
		t.Fatalf("invalid raft messages dropped: %v, want 1", got)
	}
	if o := n.shard(victim).owned[ns]; o.rep.grp == nil || o.failed != nil || n.shard(victim).Fenced() != 0 {
		t.Fatal("a refused message fenced the partition")
	}
	n.settle()
	c := produce(ns, "after")
	n.shard(lead).handle(c.f)
	n.settle()
	if r := c.answered(t); r.Err != nil {
		t.Fatalf("produce after the forged message: %v", r.Err)
	}
}

// TestRaftPanicFencesOnlyItsPartition: a panic inside one partition's
// raft group (here raised in the transport Send that its Ready calls)
// fails that group only: the shard fences the partition and answers its
// waiting produce with ErrPartitionFailed, later requests to it are
// answered the same, and another partition on the same shard goes on.
func TestRaftPanicFencesOnlyItsPartition(t *testing.T) {
	n := newReplNet(t)
	a, ea := n.create("a", 1, 2, 3)
	b, eb := n.create("b", 1, 2, 3)
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, a, ea)
		n.materialise(id, b, eb)
	}
	n.settle()
	if n.tickUntilLeader(a) == 0 || n.tickUntilLeader(b) == 0 {
		t.Fatal("no leaders")
	}
	lead := n.leader(a)
	armed := true
	n.onSend = func(from uint64, ns metadata.Namespace, m *raftpb.Message) {
		if armed && from == lead && ns == a && m.GetType() == raftpb.MsgApp {
			armed = false
			panic("transport exploded")
		}
	}
	c := produce(a, "doomed")
	n.shard(lead).handle(c.f)
	n.settle()
	r := c.answered(t)
	if !errors.Is(r.Err, ErrPartitionFailed) || !errors.Is(r.Err, replica.ErrGroupFailed) {
		t.Fatalf("produce whose group panicked: %v, want ErrPartitionFailed and ErrGroupFailed", r.Err)
	}
	var pe *replica.PanicError
	if !errors.As(r.Err, &pe) || pe.Value != "transport exploded" {
		t.Fatalf("the answer does not carry the panic: %v", r.Err)
	}
	s := n.shard(lead)
	if s.Fenced() != 1 || s.owned[a].rep.grp != nil {
		t.Fatalf("fenced %d, group %v: the partition is not fenced", s.Fenced(), s.owned[a].rep.grp)
	}
	again := produce(a, "again")
	s.handle(again.f)
	if r := again.answered(t); !errors.Is(r.Err, ErrPartitionFailed) {
		t.Fatalf("produce to the fenced partition: %v", r.Err)
	}
	other := produce(b, "fine")
	n.shard(n.leader(b)).handle(other.f)
	n.settle()
	if r := other.answered(t); r.Err != nil {
		t.Fatalf("produce to the other partition: %v", r.Err)
	}
}

// panicky is a partition whose Append panics while armed: a bug in the
// state machine under a raft group.
type panicky struct {
	partition.Partition
	armed *bool
}

func (p panicky) Append(msgs []partition.Message) (uint64, error) {
	if *p.armed {
		*p.armed = false
		panic("append exploded")
	}
	return p.Partition.Append(msgs)
}

// TestApplyPanicAnswersAndIsolates: a panic while a committed entry is
// applied fails the group; the entry's produce is still answered
// (ErrPartitionFailed), and nothing it left in the shard's apply batch
// leaks into the next partition the shard applies to.
func TestApplyPanicAnswersAndIsolates(t *testing.T) {
	n := newReplNet(t)
	a, ea := n.create("a", 1, 2, 3)
	b, eb := n.create("b", 1, 2, 3)
	armed := false
	for id := uint64(1); id <= 3; id++ {
		h := n.nodes[id]
		p := panicky{h.build(a, ea), &armed}
		if err := h.step(h.shards[0], opInsertOwned(p, noSync)); err != nil {
			t.Fatal(err)
		}
		n.materialise(id, b, eb)
	}
	n.settle()
	if n.tickUntilLeader(a) == 0 || n.tickUntilLeader(b) == 0 {
		t.Fatal("no leaders")
	}
	lead := n.leader(a)
	// The leader applies first (it answers the produce): arm it just
	// before, through the leader's own Send of the append.
	n.onSend = func(from uint64, ns metadata.Namespace, m *raftpb.Message) {
		if from == lead && ns == a && m.GetType() == raftpb.MsgApp && len(m.GetEntries()) > 0 {
			armed = true
			n.onSend = nil
		}
	}
	c := produce(a, "doomed")
	n.shard(lead).handle(c.f)
	n.settle()
	if r := c.answered(t); !errors.Is(r.Err, ErrPartitionFailed) || !errors.Is(r.Err, replica.ErrGroupFailed) {
		t.Fatalf("produce whose apply panicked: %v, want ErrPartitionFailed", r.Err)
	}
	// Every replica applies b's entries, so the shard of a's leader
	// applies this one whether it leads b or not.
	other := produce(b, "fine")
	n.shard(n.leader(b)).handle(other.f)
	n.settle()
	if r := other.answered(t); r.Err != nil || r.Offset != 0 {
		t.Fatalf("produce to b: %+v", r)
	}
	if got := payloads(t, n.shard(lead).owned[b].p); len(got) != 1 || got[0] != "fine" {
		t.Fatalf("b's log on node %d: %q", lead, got)
	}
}

// FuzzDecodeCatchUp: any bytes a peer sends as a catch-up frame decode
// without a panic or are refused, and a frame that decodes encodes back
// to exactly its bytes (each kind has one length, so nothing trails).
func FuzzDecodeCatchUp(f *testing.F) {
	batch, err := partition.EncodeBatch(nil, []partition.Message{{Payload: []byte("m")}})
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range []catchUpMsg{
		{kind: catchUpFetch, node: 2, from: 5, to: 9},
		{kind: catchUpData, from: 5, start: 3, batch: batch},
		{kind: catchUpData, from: 5, start: 3},
		{kind: catchUpAsk, node: 1},
		{kind: catchUpWhole, node: 4},
	} {
		f.Add(m.append(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{catchUpAsk, 1})
	f.Add([]byte{9, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeCatchUp(b)
		if !ok {
			return
		}
		if again := m.append(nil); !bytes.Equal(again, b) {
			t.Fatalf("%x decodes as %+v, which encodes as %x", b, m, again)
		}
	})
}

// FuzzDecodeEntry: any bytes of a replicated entry's operations decode
// without a panic or are refused, each operation consumes exactly the
// bytes that encode it, and what appendOp writes decodes back to the
// frame's fields.
func FuzzDecodeEntry(f *testing.F) {
	frames := []Frame{
		{Req: &Request{Op: OpProduce, Producer: 7, Seq: 3, Messages: []partition.Message{{Payload: []byte("m")}}}},
		{Req: &Request{Op: OpProduce}},
		{Req: &Request{Op: OpStoreOffset, Consumer: "group-a", Offset: 12}},
		{Req: &Request{Op: OpTruncate, Offset: 40}},
		{Req: &Request{Op: OpPurge}},
		{Req: &Request{Op: OpDeleteOffset, Consumer: "group-b"}},
	}
	var all []byte
	for _, fr := range frames {
		b, err := appendOp(nil, fr)
		if err != nil {
			f.Fatal(err)
		}
		op, rest, err := decodeOp(1, b)
		if err != nil || len(rest) != 0 || op.offset != fr.Req.Offset || string(op.consumer) != fr.Req.Consumer ||
			op.key != (produceKey{Producer: fr.Req.Producer, Seq: fr.Req.Seq}) {
			f.Fatalf("%v: decodes as %+v, rest %x, %v", fr.Req.Op, op, rest, err)
		}
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	f.Add([]byte{})
	f.Add([]byte{entryProduce, 1, 2, 3})
	f.Add([]byte{entryStoreOffset, 0, 0, 0, 0, 0, 0, 0, 0, 200, 'x'})
	f.Add([]byte{entryDeleteOffset, 9, 'x'})
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			op, rest, err := decodeOp(1, b)
			if err != nil {
				return
			}
			used := b[:len(b)-len(rest)]
			if again := encodeEntryOp(op); !bytes.Equal(again, used) {
				t.Fatalf("%x decodes as %+v, which encodes as %x", used, op, again)
			}
			b = rest
		}
	})
}

// encodeEntryOp is appendOp's encoding of a decoded operation, the batch
// kept as its bytes.
func encodeEntryOp(op entryOp) []byte {
	b := []byte{op.kind}
	switch op.kind {
	case entryProduce:
		b = binary.LittleEndian.AppendUint64(b, op.key.Producer)
		b = binary.LittleEndian.AppendUint64(b, op.key.Seq)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(op.batch)))
		b = append(b, op.batch...)
	case entryStoreOffset:
		b = binary.LittleEndian.AppendUint64(b, op.offset)
		b = append(b, byte(len(op.consumer)))
		b = append(b, op.consumer...)
	case entryTruncate:
		b = binary.LittleEndian.AppendUint64(b, op.offset)
	case entryDeleteOffset:
		b = append(b, byte(len(op.consumer)))
		b = append(b, op.consumer...)
	}
	return b
}

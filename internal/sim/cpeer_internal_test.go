package sim

import (
	"encoding/binary"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

func raftBytes(t *testing.T, typ raftpb.MessageType, term uint64, entries int) []byte {
	t.Helper()
	m := &raftpb.Message{Type: &typ, Term: &term}
	for i := range entries {
		idx, et := uint64(i+1), term
		m.Entries = append(m.Entries, &raftpb.Entry{Index: &idx, Term: &et, Data: []byte("12345678x")})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeRaft(t *testing.T, b []byte) *raftpb.Message {
	t.Helper()
	m := &raftpb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The misbehaving member's forged copy changes the term of the heartbeats,
// answers, votes and pre-votes a message carries and of nothing else: a
// batch's copy holds those records only, each under its own partition and
// incarnation; a message carrying entries, or no raft message, has no
// copy.
func TestForgedCopy(t *testing.T) {
	plus10 := func(term uint64) uint64 { return term + 10 }

	// A batch of an append (not forged) and a heartbeat (forged).
	app, hb := raftBytes(t, raftpb.MsgApp, 3, 2), raftBytes(t, raftpb.MsgHeartbeat, 3, 0)
	batch := binary.LittleEndian.AppendUint32(nil, 2)
	for _, r := range []struct {
		ns, epoch uint64
		msg       []byte
	}{{5, 7, app}, {6, 8, hb}} {
		batch = binary.LittleEndian.AppendUint64(batch, r.ns)
		batch = binary.LittleEndian.AppendUint64(batch, r.epoch)
		batch = binary.LittleEndian.AppendUint32(batch, uint32(len(r.msg)))
		batch = append(batch, r.msg...)
	}
	f, ok := forgedCopy(transport.Message{To: 2, From: 1, Kind: host.KindPartitionRaftBatch, Payload: batch}, plus10)
	if !ok || f.Kind != host.KindPartitionRaftBatch || f.To != 2 || f.From != 1 {
		t.Fatalf("batch: %v %+v", ok, f)
	}
	b := f.Payload
	if n := binary.LittleEndian.Uint32(b); n != 1 {
		t.Fatalf("batch copy holds %d records, want the heartbeat only", n)
	}
	if ns, epoch := binary.LittleEndian.Uint64(b[4:]), binary.LittleEndian.Uint64(b[12:]); ns != 6 || epoch != 8 {
		t.Fatalf("batch copy's record is for %d@%d, want 6@8", ns, epoch)
	}
	size := int(binary.LittleEndian.Uint32(b[20:]))
	if len(b) != 24+size {
		t.Fatalf("batch copy of %d bytes, its record %d", len(b), size)
	}
	if m := decodeRaft(t, b[24:]); m.GetType() != raftpb.MsgHeartbeat || m.GetTerm() != 13 {
		t.Fatalf("batch copy's record: %v at term %d, want a heartbeat at 13", m.GetType(), m.GetTerm())
	}

	// A partition's vote alone: its incarnation stays.
	vote := append(binary.LittleEndian.AppendUint64(nil, 9), raftBytes(t, raftpb.MsgVote, 4, 0)...)
	f, ok = forgedCopy(transport.Message{Kind: host.KindPartitionRaft, Group: 6, Payload: vote}, plus10)
	if !ok || f.Group != 6 || binary.LittleEndian.Uint64(f.Payload) != 9 {
		t.Fatalf("vote: %v %+v", ok, f)
	}
	if m := decodeRaft(t, f.Payload[8:]); m.GetType() != raftpb.MsgVote || m.GetTerm() != 14 {
		t.Fatalf("vote copy: %v at term %d", m.GetType(), m.GetTerm())
	}

	// The metadata group's append answer, under an extreme term.
	f, ok = forgedCopy(transport.Message{Kind: host.KindMetaRaft, Payload: raftBytes(t, raftpb.MsgAppResp, 2, 0)},
		func(uint64) uint64 { return 1 << 62 })
	if !ok || decodeRaft(t, f.Payload).GetTerm() != 1<<62 {
		t.Fatalf("metadata answer: %v %+v", ok, f)
	}

	// No copy of an append, of a batch of appends, or of another kind.
	for _, o := range []transport.Message{
		{Kind: host.KindMetaRaft, Payload: raftBytes(t, raftpb.MsgApp, 2, 1)},
		{Kind: host.KindPartitionRaft, Payload: append(make([]byte, 8), app...)},
		{Kind: host.KindPartitionRaftBatch, Payload: batch[:4+20+len(app)]},
		{Kind: host.KindLiveness},
	} {
		if o.Kind == host.KindPartitionRaftBatch {
			binary.LittleEndian.PutUint32(o.Payload, 1)
		}
		if f, ok := forgedCopy(o, plus10); ok {
			t.Fatalf("kind %d: forged %+v", o.Kind, f)
		}
	}
}

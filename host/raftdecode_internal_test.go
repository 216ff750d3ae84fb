package host

import (
	"math"
	"runtime"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// raftSamples are messages of the shapes peers send, encoded.
func raftSamples(t testing.TB) [][]byte {
	ent := func(term, index uint64, data []byte) *raftpb.Entry {
		return &raftpb.Entry{Term: new(term), Index: new(index), Type: raftpb.EntryNormal.Enum(), Data: data}
	}
	msgs := []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), LogTerm: new(uint64(3)),
			Index: new(uint64(41)), Commit: new(uint64(40)), Entries: []*raftpb.Entry{ent(3, 42, []byte("0123456789abcdef"))}},
		{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), LogTerm: new(uint64(3)),
			Index: new(uint64(41)), Commit: new(uint64(40)), Entries: []*raftpb.Entry{ent(3, 42, []byte("a")), ent(3, 43, nil), ent(3, 44, []byte{}), ent(3, 45, []byte("bc"))}},
		{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), LogTerm: new(uint64(3)),
			Index: new(uint64(42)), Commit: new(uint64(42))},
		{Type: raftpb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(42))},
		{Type: raftpb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(42)),
			Reject: new(true), RejectHint: new(uint64(7)), LogTerm: new(uint64(2))},
		{Type: raftpb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(42)), Reject: new(false)},
		{Type: raftpb.MsgHeartbeat.Enum(), To: new(uint64(3)), From: new(uint64(1)), Term: new(uint64(3)), Commit: new(uint64(42)), Context: []byte("read-1")},
		{Type: raftpb.MsgHeartbeatResp.Enum(), To: new(uint64(1)), From: new(uint64(3)), Term: new(uint64(3)), Context: []byte{}},
		{Type: raftpb.MsgVote.Enum(), To: new(uint64(1)), From: new(uint64(3)), Term: new(uint64(4)), LogTerm: new(uint64(3)), Index: new(uint64(42)), Vote: new(uint64(3))},
		{Type: raftpb.MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
			Snapshot: &raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2))}}},
		{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), LogTerm: new(uint64(3)),
			Index: new(uint64(41)), Commit: new(uint64(40)), Entries: []*raftpb.Entry{ent(3, 42, make([]byte, smallEntryData+1))}},
		{},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Shapes proto.Marshal does not produce: a repeated scalar (the
	// last wins), a field of an unknown number, a wrong wire type, an
	// enum value raft does not define, and a truncated message.
	dup := protowire.AppendTag(nil, fMsgTerm, protowire.VarintType)
	dup = protowire.AppendVarint(dup, 5)
	dup = protowire.AppendTag(dup, fMsgTerm, protowire.VarintType)
	dup = protowire.AppendVarint(dup, 6)
	unknown := protowire.AppendTag(append([]byte(nil), out[3]...), 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	wrong := protowire.AppendTag(nil, fMsgTo, protowire.BytesType)
	wrong = protowire.AppendBytes(wrong, []byte("x"))
	enum := protowire.AppendTag(nil, fMsgType, protowire.VarintType)
	enum = protowire.AppendVarint(enum, 200)
	return append(out, dup, unknown, wrong, enum, out[0][:len(out[0])-3])
}

// checkDecodeRaft holds decodeRaft to proto.Unmarshal: the same error
// outcome, and on success messages proto.Equal calls equal (presence of
// every field included).
func checkDecodeRaft(t *testing.T, b []byte) {
	want := &raftpb.Message{}
	wantErr := proto.Unmarshal(b, want)
	box := &raftBox{}
	err := decodeRaft(box, b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeRaft(%x): error %v, proto.Unmarshal: %v", b, err, wantErr)
	}
	if err == nil && !proto.Equal(&box.msg, want) {
		t.Fatalf("decodeRaft(%x) = %v, proto.Unmarshal gives %v", b, &box.msg, want)
	}
}

func TestDecodeRaftMatchesUnmarshal(t *testing.T) {
	s := raftSamples(t)
	for _, b := range s {
		checkDecodeRaft(t, b)
	}
	// Entries share one data buffer: appending to one entry's data must
	// not write into the next one's.
	box := &raftBox{}
	if err := decodeRaft(box, s[1]); err != nil {
		t.Fatal(err)
	}
	ents := box.msg.GetEntries()
	_ = append(ents[0].Data, 'x', 'y')
	if string(ents[0].GetData()) != "a" || len(ents[1].GetData()) != 0 || ents[1].Data != nil || ents[2].Data == nil || string(ents[3].GetData()) != "bc" {
		t.Fatalf("entries after an append to the first: %v", ents)
	}
}

func FuzzDecodeRaft(f *testing.F) {
	for _, b := range raftSamples(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeRaft)
}

// A produce's MsgApp (one small entry) decodes in two allocations — the
// message, its entry with the entry's data — one with a larger entry in
// three (the data apart), and a response in one; neither entry data nor a
// context aliases the input.
func TestDecodeRaftAllocations(t *testing.T) {
	s := raftSamples(t)
	for _, c := range []struct {
		name string
		b    []byte
		max  float64
	}{{"MsgApp", s[0], 2}, {"MsgApp large", s[10], 3}, {"MsgAppResp", s[3], 1}} {
		got := testing.AllocsPerRun(100, func() {
			if err := decodeRaft(&raftBox{}, c.b); err != nil {
				t.Fatal(err)
			}
		})
		if got > c.max {
			t.Errorf("%s: %.0f allocations, want at most %.0f", c.name, got, c.max)
		}
	}
	b := append([]byte(nil), s[0]...)
	box := &raftBox{}
	if err := decodeRaft(box, b); err != nil {
		t.Fatal(err)
	}
	hb := append([]byte(nil), s[6]...)
	hbox := &raftBox{}
	if err := decodeRaft(hbox, hb); err != nil {
		t.Fatal(err)
	}
	clear(b)
	clear(hb)
	if got := string(box.msg.GetEntries()[0].GetData()); got != "0123456789abcdef" {
		t.Fatalf("entry data %q after the input was cleared", got)
	}
	if got := string(hbox.msg.GetContext()); got != "read-1" {
		t.Fatalf("context %q after the input was cleared", got)
	}
}

// The receiver hands back to the transport only payloads nothing refers
// to after deliver: raft messages (decoded into copies, which
// TestDecodeRaftAllocations checks) and liveness beats. Catch-up data,
// requests and replies travel on as they are.
func TestPayloadDone(t *testing.T) {
	for kind, want := range map[uint8]bool{
		KindPartitionRaft: true, KindPartitionRaftBatch: true, KindMetaRaft: true, KindLiveness: true,
		KindCatchUp: false, KindRequest: false, KindReply: false, 0: false, 255: false,
	} {
		if got := payloadDone(kind); got != want {
			t.Errorf("payloadDone(%d) = %v, want %v", kind, got, want)
		}
	}
}

// A one-entry MsgApp's block (entry, slot and data) is the smallest of
// its size classes that holds the data, and an empty entry (a new
// leader's) carries no data array at all: raft keeps the block as long as
// it keeps the entry, idle groups included. Each decode's bytes are
// measured over those of the same message without its entry; the result
// is still the message proto.Unmarshal gives.
func TestDecodeRaftEntryBlockSize(t *testing.T) {
	msg := func(ents ...*raftpb.Entry) []byte {
		b, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Term: new(uint64(3)), LogTerm: new(uint64(3)), Index: new(uint64(41)), Commit: new(uint64(40)), Entries: ents})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// TotalAlloc counts every goroutine's allocations, and another test's
	// leftover goroutine (or the race detector's bookkeeping) may allocate
	// during a reading: that only ever adds, so the least of a few
	// readings is the decode's own cost (one stray reading of 321 against
	// a bound of 320 was seen under -race).
	bytesPer := func(b []byte) uint64 {
		const n = 200
		least := uint64(math.MaxUint64)
		for range 5 {
			boxes := make([]*raftBox, n) // kept, so that each decode's blocks stay live and counted
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range boxes {
				boxes[i] = &raftBox{}
				if err := decodeRaft(boxes[i], b); err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(boxes)
			least = min(least, (after.TotalAlloc-before.TotalAlloc)/n)
		}
		return least
	}
	bare := bytesPer(msg())
	for _, c := range []struct {
		data int
		max  uint64 // bytes over the bare message
	}{{-1, 128}, {0, 128}, {1, 256}, {tinyEntryData, 256}, {tinyEntryData + 1, 320}, {180, 320}, {midEntryData, 320},
		{midEntryData + 1, 384}, {smallEntryData, 384}} {
		var data []byte
		if c.data >= 0 {
			data = make([]byte, c.data)
		}
		b := msg(&raftpb.Entry{Term: new(uint64(3)), Index: new(uint64(42)), Type: raftpb.EntryNormal.Enum(), Data: data})
		checkDecodeRaft(t, b)
		if got := bytesPer(b) - bare; got > c.max {
			t.Errorf("one entry of %d bytes of data: %d bytes beyond the message, want at most %d", c.data, got, c.max)
		}
	}
}

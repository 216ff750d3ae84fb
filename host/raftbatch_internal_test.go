package host

import (
	"bytes"
	"encoding/binary"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/metadata"
)

// sentMsg is one transport message the batcher handed over.
type sentMsg struct {
	to      uint64
	kind    uint8
	group   uint64
	payload []byte
}

func recordingBatcher() (*raftBatcher, *[]sentMsg) {
	var out []sentMsg
	return newRaftBatcher(func(to uint64, kind uint8, group uint64, payload []byte) error {
		out = append(out, sentMsg{to, kind, group, bytes.Clone(payload)})
		return nil
	}), &out
}

func heartbeat(to, term uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: new(to), From: new(uint64(1)), Term: new(term)}
}

// The messages of many groups for one peer leave as one batch, in order;
// a peer with one message gets the ordinary form; nothing leaves before
// flush.
func TestRaftBatcherCoalescesPerPeer(t *testing.T) {
	b, out := recordingBatcher()
	for i := range uint64(5) {
		b.add(2, metadata.Namespace(100+i), 7+i, heartbeat(2, i+1))
	}
	b.add(3, 42, 9, heartbeat(3, 1))
	if len(*out) != 0 {
		t.Fatalf("%d messages sent before flush", len(*out))
	}
	b.flush()
	if len(*out) != 2 {
		t.Fatalf("%d transport messages for two peers, want 2", len(*out))
	}
	batch, single := (*out)[0], (*out)[1]
	if batch.to != 2 || batch.kind != KindPartitionRaftBatch {
		t.Fatalf("first message: to %d kind %d", batch.to, batch.kind)
	}
	recs, err := decodeRaftBatch(batch.payload)
	if err != nil || len(recs) != 5 {
		t.Fatalf("decoded %d records: %v", len(recs), err)
	}
	for i, r := range recs {
		var m raftpb.Message
		if err := proto.Unmarshal(r.msg, &m); err != nil {
			t.Fatal(err)
		}
		if r.ns != metadata.Namespace(100+i) || r.epoch != uint64(7+i) || m.GetTerm() != uint64(i+1) {
			t.Fatalf("record %d: ns %v epoch %d term %d", i, r.ns, r.epoch, m.GetTerm())
		}
	}
	if single.to != 3 || single.kind != KindPartitionRaft || single.group != 42 || binary.LittleEndian.Uint64(single.payload) != 9 {
		t.Fatalf("single message: %+v", single)
	}
	var m raftpb.Message
	if err := proto.Unmarshal(single.payload[8:], &m); err != nil || m.GetTo() != 3 {
		t.Fatalf("single message body: %v %v", &m, err)
	}
	*out = nil
	b.flush()
	if len(*out) != 0 {
		t.Fatalf("a second flush sent %d messages", len(*out))
	}
}

// A message too large to batch travels alone, after what the peer's batch
// already held; a batch never grows past maxRaftBatch.
func TestRaftBatcherBoundsBatches(t *testing.T) {
	b, out := recordingBatcher()
	b.add(2, 1, 1, heartbeat(2, 1))
	b.add(2, 1, 1, heartbeat(2, 2))
	big := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Entries: []*raftpb.Entry{{Data: make([]byte, maxBatchedRaft)}}}
	b.add(2, 1, 1, big)
	if len(*out) != 2 || (*out)[0].kind != KindPartitionRaftBatch || (*out)[1].kind != KindPartitionRaft {
		t.Fatalf("sent %d messages before flush, want the batch then the large one", len(*out))
	}
	*out = nil
	mid := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Entries: []*raftpb.Entry{{Data: make([]byte, maxBatchedRaft-100)}}}
	for range 40 {
		b.add(2, 1, 1, mid)
	}
	b.flush()
	total := 0
	for _, m := range *out {
		if len(m.payload) > maxRaftBatch {
			t.Fatalf("a batch of %d bytes, bound %d", len(m.payload), maxRaftBatch)
		}
		if m.kind == KindPartitionRaftBatch {
			recs, err := decodeRaftBatch(m.payload)
			if err != nil {
				t.Fatal(err)
			}
			total += len(recs)
		} else {
			total++
		}
	}
	if total != 40 || len(*out) < 3 {
		t.Fatalf("%d messages in %d transport messages", total, len(*out))
	}
}

// Hostile batches are refused before anything is allocated for them.
func TestDecodeRaftBatchRefusesHostileCounts(t *testing.T) {
	good, out := recordingBatcher()
	good.add(2, 1, 1, heartbeat(2, 1))
	good.add(2, 2, 1, heartbeat(2, 1))
	good.flush()
	valid := (*out)[0].payload
	for name, b := range map[string][]byte{
		"empty":           nil,
		"zero records":    {0, 0, 0, 0},
		"huge count":      append([]byte{0xff, 0xff, 0xff, 0xff}, make([]byte, 40)...),
		"length past end": append(binary.LittleEndian.AppendUint32(nil, 1), append(make([]byte, 16), 0xff, 0xff, 0xff, 0x7f)...),
		"trailing bytes":  append(bytes.Clone(valid), 0),
		"truncated":       valid[:len(valid)-1],
	} {
		if recs, err := decodeRaftBatch(b); err == nil {
			t.Errorf("%s: accepted with %d records", name, len(recs))
		}
	}
	if recs, err := decodeRaftBatch(valid); err != nil || len(recs) != 2 {
		t.Fatalf("valid batch: %d records, %v", len(recs), err)
	}
}

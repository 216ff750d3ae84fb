package shard

import (
	"testing"
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
)

// An in-memory replica keeps the bytes of the committed entry it applies
// instead of copying every message into an arena of its own: the payload
// the partition holds lies inside the entry raft appended and sent. The
// copy was the largest one on a 3-node cluster's apply path.
func TestApplyKeepsTheEntryBytes(t *testing.T) {
	n, ns, lead, parts, _ := groupCommitNet(t)
	var sent [][]byte
	n.onSend = func(from uint64, _ metadata.Namespace, m *raftpb.Message) {
		if from == lead && m.GetType() == raftpb.MessageType_MsgApp {
			for _, e := range m.GetEntries() {
				sent = append(sent, e.GetData())
			}
		}
	}
	s := n.shard(lead)
	// The first call finds the lane and the inbox empty and takes the
	// inbox; the second queues in the lane, whose wake runs both.
	var calls []call
	for _, m := range []string{"kept", "also"} {
		c := produce(ns, m)
		if err := s.SendWaited(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	<-s.lane.wake
	s.handleLane()
	n.settle()
	for _, c := range calls {
		if r := c.answered(t); r.Err != nil {
			t.Fatalf("produce: %+v", r)
		}
	}
	msgs, err := parts[lead].Read(0, 10)
	if err != nil || len(msgs) != 2 || string(msgs[0].Payload) != "kept" || string(msgs[1].Payload) != "also" {
		t.Fatalf("leader's log %v: %v", msgs, err)
	}
	for _, m := range msgs {
		if !inside(m.Payload, sent) {
			t.Fatalf("the leader's stored payload %q is not the bytes of an entry it sent (%d entries): it was copied", m.Payload, len(sent))
		}
	}
}

// inside reports whether b's first byte lies in one of bufs.
func inside(b []byte, bufs [][]byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, d := range bufs {
		if start := uintptr(unsafe.Pointer(unsafe.SliceData(d))); len(d) > 0 && p >= start && p < start+uintptr(len(d)) {
			return true
		}
	}
	return false
}

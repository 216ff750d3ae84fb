package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestGroupLogCompaction: a group's commits pile up in its coordinator
// partition; a compaction writes a snapshot and truncates the partition
// before it, and a coordinator that loads the partition afterwards (here
// a second listener on the node, as after a restart) holds the same
// state from the snapshot alone: the member is served on in its
// generation, the last committed offset of each partition is answered
// with its metadata,
// an offset removed before the compaction stays removed, and a deleted
// group stays deleted.
func TestGroupLogCompaction(t *testing.T) {
	node, err := parkway.Open(parkway.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	serve := func() (*Server, *raw) {
		t.Helper()
		l := listen(t, node, Config{})
		return l.srv, dialRaw(t, l.addr)
	}
	ctx := ctxFor(t)
	srv, r := serve()
	const group, topicName = "compacting", "compacted"
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topicName, 2, 1
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	member, gen := rawMember(t, r, group)
	commit := func(r *raw, group, member string, gen int32, part int32, offset int64) {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.MemberID, req.Generation = 8, group, member, gen
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topicName
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = part, offset
		rp.Metadata = kmsg.StringPtr(fmt.Sprint("at-", offset))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if code := r.request(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("commit %s %d@%d: code %d", group, offset, part, code)
		}
	}
	for i := range int64(100) {
		commit(r, group, member, gen, int32(i%2), i)
	}
	// Another group of the same partition: committed, then deleted; and
	// one whose offset of partition 1 is removed (its partition may differ:
	// it is compacted with its own).
	_, n, err := srv.coordTopic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	part := groupPartition(group, n)
	other := ""
	for i := 0; other == ""; i++ {
		if name := "other-" + string(rune('a'+i)); groupPartition(name, n) == part {
			other = name
		}
	}
	commit(r, other, "", -1, 0, 7)
	commit(r, other, "", -1, 1, 8)
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = other
	odt := kmsg.NewOffsetDeleteRequestTopic()
	odt.Topic = topicName
	odt.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}
	od.Topics = append(od.Topics, odt)
	if resp := r.request(od).(*kmsg.OffsetDeleteResponse); resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetDelete: %+v", resp)
	}
	gone := ""
	for i := 0; gone == ""; i++ {
		if name := "gone-" + string(rune('a'+i)); groupPartition(name, n) == part {
			gone = name
		}
	}
	commit(r, gone, "", -1, 0, 3)
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{gone}
	if resp := r.request(dg).(*kmsg.DeleteGroupsResponse); resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups: code %d", resp.Groups[0].ErrorCode)
	}

	ctopic, _, err := srv.coordTopic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := node.Admin().PartitionOffsets(ctx, ctopic, part, "")
	if err != nil {
		t.Fatal(err)
	}
	start, err := srv.compact(ctx, part)
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	after, err := node.Admin().PartitionOffsets(ctx, ctopic, part, "")
	if err != nil {
		t.Fatal(err)
	}
	if start < before.End || after.Start != start {
		t.Fatalf("the partition held [%d, %d); after the compaction from %d it starts at %d", before.Start, before.End, start, after.Start)
	}
	// A marker and two records for each of the two groups left.
	if kept := after.End - after.Start; kept != 4 {
		t.Fatalf("the compacted partition holds %d records, want 4", kept)
	}
	t.Logf("compacted partition %d: [%d, %d) became [%d, %d)", part, before.Start, before.End, after.Start, after.End)

	// A listener that loads the partition anew.
	_ = srv.Close()
	_, nr := serve()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation = 4, group, member, gen
	if code := nr.request(hb).(*kmsg.HeartbeatResponse).ErrorCode; code != 0 {
		t.Fatalf("the member's heartbeat after the compaction and a reload: code %d", code)
	}
	fetch := func(group string) map[int32]int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 5, group
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = topicName, []int32{0, 1}
		req.Topics = append(req.Topics, ft)
		resp := nr.request(req).(*kmsg.OffsetFetchResponse)
		out := map[int32]int64{}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("OffsetFetch %s: code %d", group, p.ErrorCode)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
				if want := fmt.Sprint("at-", p.Offset); p.Metadata == nil || *p.Metadata != want {
					t.Errorf("%s's offset %d of partition %d lost its metadata %q", group, p.Offset, p.Partition, want)
				}
			}
		}
		return out
	}
	if got := fetch(group); got[0] != 98 || got[1] != 99 {
		t.Fatalf("%s's offsets after the reload: %v, want 0:98 1:99", group, got)
	}
	if got := fetch(other); len(got) != 1 || got[0] != 7 {
		t.Fatalf("%s's offsets after the reload: %v, want 0:7 alone", other, got)
	}
	if got := fetch(gone); len(got) != 0 {
		t.Fatalf("the deleted group %s's offsets after the reload: %v", gone, got)
	}
	commit(nr, group, member, gen, 0, 100)
	if got := fetch(group); got[0] != 100 {
		t.Fatalf("a commit after the reload: %v", got)
	}
}

// TestGroupOffsetsCommittedBeforeTheGroupLog: offsets a group committed
// before the group log existed — parkway's named consumer offsets of the
// group id, as earlier releases stored them — are still answered for the
// partitions the group log has no offset of, a commit in the log takes
// precedence, and OffsetDelete removes both, so no committed offset is
// lost by the upgrade and none removed comes back.
func TestGroupOffsetsCommittedBeforeTheGroupLog(t *testing.T) {
	f := serve(t, Config{})
	ctx := ctxFor(t)
	r := dialRaw(t, f.addr)
	const group, topicName = "legacy", "upgraded"
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topicName, 3, 1
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	topic, err := f.srv.topics.lookup(ctx, topicName)
	if err != nil {
		t.Fatal(err)
	}
	for p := range uint32(3) {
		for range 30 {
			if _, err := f.node.Produce(ctx, topic, parkway.PartitionID(p), parkway.Message{Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.node.Admin().StoreOffset(ctx, topic, p, group, uint64(10+p)); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func() map[int32]int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 5, group
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = topicName, []int32{0, 1, 2}
		req.Topics = append(req.Topics, ft)
		resp := r.request(req).(*kmsg.OffsetFetchResponse)
		out := map[int32]int64{}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("OffsetFetch: code %d", p.ErrorCode)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
		return out
	}
	if got := fetch(); got[0] != 10 || got[1] != 11 || got[2] != 12 {
		t.Fatalf("offsets committed before the group log: %v, want 0:10 1:11 2:12", got)
	}
	if code := rawCommit(t, r, group, "", -1, topicName, 20); code != 0 {
		t.Fatalf("commit: code %d", code)
	}
	if got := fetch(); got[0] != 20 || got[1] != 11 {
		t.Fatalf("after a commit of partition 0 in the group log: %v, want 0:20 1:11 2:12", got)
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = group
	odt := kmsg.NewOffsetDeleteRequestTopic()
	odt.Topic = topicName
	odt.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}, {Partition: 1}}
	od.Topics = append(od.Topics, odt)
	if resp := r.request(od).(*kmsg.OffsetDeleteResponse); resp.ErrorCode != 0 {
		t.Fatalf("OffsetDelete: code %d", resp.ErrorCode)
	}
	if got := fetch(); len(got) != 1 || got[2] != 12 {
		t.Fatalf("after OffsetDelete of partitions 0 and 1: %v, want 2:12 alone", got)
	}
}

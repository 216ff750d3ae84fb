package kafka

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// rawMember joins group at the broker r speaks to, alone, and syncs: the
// group is stable in generation 1 with this member as leader.
func rawMember(t *testing.T, r *raw, group string) (string, int32) {
	t.Helper()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = 9, group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30_000, 30_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	jr := r.request(join).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: code %d", jr.ErrorCode)
	}
	join.MemberID = jr.MemberID
	if jr = r.request(join).(*kmsg.JoinGroupResponse); jr.ErrorCode != 0 {
		t.Fatalf("join: code %d", jr.ErrorCode)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.MemberID, sync.Generation = 5, group, jr.MemberID, jr.Generation
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: []byte("all")}}
	if sr := r.request(sync).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		t.Fatalf("sync: code %d", sr.ErrorCode)
	}
	return jr.MemberID, jr.Generation
}

// rawCommit commits offset of topic's partition 0 for member and
// returns the partition's error code.
func rawCommit(t *testing.T, r *raw, group, member string, gen int32, topic string, offset int64) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 8, group, member, gen
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return r.request(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// TestClusterDeposedCoordinatorCannotCommit: a group's coordinator is cut
// off from the other two nodes, which elect a new leader of the group's
// coordinator partition. The old coordinator still holds the group,
// loaded in its old term, and commits for its member as it would after
// its gate let a request through — while cut off, and again once the
// network heals and it knows the new leader. Both writes are refused
// (raft never commits the first; the second is fenced to a term its node
// no longer leads), the group log holds neither, and the coordinator
// then — the new one, or the old node leading again in a later term —
// answers the offset committed before the cut, then the member's commit
// in its generation. (Before the group log, a commit was parkway's named consumer
// offset, stored through whichever node led the data partition: the old
// coordinator's commit after the heal was stored, over the new one's.)
func TestClusterDeposedCoordinatorCannotCommit(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	const group, topicName = "fenced-group", "fenced"
	all := []int32{1, 2, 3}
	r := dialRaw(t, c.brokers[1])
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topicName, 1, 3
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	coord := c.agreedCoordinator(group)
	old := c.servers[coord]
	cr := dialRaw(t, c.brokers[coord])
	member, gen := rawMember(t, cr, group)
	if code := rawCommit(t, cr, group, member, gen, topicName, 5); code != 0 {
		t.Fatalf("commit at the coordinator: code %d", code)
	}
	ctopic, n, err := old.coordTopic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	part := groupPartition(group, n)
	term, loaded := old.groups.termOf(part)
	if !loaded || term == 0 {
		t.Fatalf("the coordinator holds partition %d loaded %v in term %d", part, loaded, term)
	}
	stream, err := c.nodes[coord].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	dataTopic, err := c.nodes[coord].Topic(ctx, stream, topicName)
	if err != nil {
		t.Fatal(err)
	}
	commitRecord := func(offset int64) *logRecord {
		return &logRecord{kind: logCommit, commits: []logOffset{{tp: topicPart{topicName, 0}, revision: dataTopic.Revision, offset: offset}}}
	}

	// Cut off, the old coordinator's commit does not commit.
	var rest []transport.NodeID
	for _, id := range all {
		if id != coord {
			rest = append(rest, transport.NodeID(id))
		}
	}
	c.bus.Partition([]transport.NodeID{transport.NodeID(coord)}, rest)
	cut := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := old.writeGroupLog(wctx, part, term, group, commitRecord(66))
		cut <- err
	}()
	var next transport.NodeID
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other nodes elected no new leader of the coordinator partition")
		}
		l1, t1, err1 := c.nodes[int32(rest[0])].Cluster().LeaderTerm(ctx, ctopic, part)
		l2, t2, err2 := c.nodes[int32(rest[1])].Cluster().LeaderTerm(ctx, ctopic, part)
		if err1 == nil && err2 == nil && l1 == l2 && t1 == t2 && slices.Contains(rest, l1) && t1 > term {
			next = l1
			break
		}
	}
	if err := <-cut; err == nil {
		t.Fatal("the cut-off coordinator's commit was acknowledged")
	}

	// Healed, it learns of a later term: the coordinator of that term
	// loads the group (a write of the partition that reaches every
	// replica). The leader may be the old node again, in a later term (the
	// partition's preferred leader takes leadership back); a load refused
	// meanwhile is asked again, as a client would. The group the old
	// coordinator loaded in the old term is fenced all the same.
	c.bus.Heal()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no coordinator of a later term loaded the group")
		}
		l, tm, err := c.nodes[int32(next)].Cluster().LeaderTerm(ctx, ctopic, part)
		if err != nil || l == 0 || tm <= term {
			continue
		}
		if _, _, code := c.servers[int32(l)].holdGroup(ctx, group); code != 0 {
			continue
		}
		if l2, tm2, err := c.nodes[coord].Cluster().LeaderTerm(ctx, ctopic, part); err == nil && l2 != 0 && tm2 > term {
			break
		}
	}
	if _, err := old.writeGroupLog(ctx, part, term, group, commitRecord(77)); !errors.Is(err, parkway.ErrNotLeader) {
		t.Fatalf("the deposed coordinator's commit after the heal: %v, want ErrNotLeader", err)
	}

	// No commit of the deposed coordinator is in the group log.
	var offsets []int64
	for from := uint64(0); ; {
		b, err := c.nodes[int32(next)].Poll(ctx, ctopic, part, parkway.AtOffset(from), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Messages) == 0 {
			break
		}
		for _, m := range b.Messages {
			if string(m.Key) != group {
				continue
			}
			rec, err := decodeLogRecord(m.Payload)
			if err != nil {
				t.Fatalf("group log record at %d: %v", m.Offset, err)
			}
			for _, co := range rec.commits {
				offsets = append(offsets, co.offset)
			}
		}
		from = b.Next
	}
	if !slices.Equal(offsets, []int64{5}) {
		t.Fatalf("the group log holds commits %v, want only 5", offsets)
	}

	// The coordinator now serves the member on, in its generation. (It
	// may be the old one's node again, leading in a later term: the
	// preferred leader takes leadership back, maybe between two requests
	// here, which are then asked again at the coordinator named anew, as
	// a client would. A coordinator in a later term loads the group anew,
	// from the log.)
	retriable := func(code int16) bool {
		return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorLoadInProgress.Code || code == kerr.CoordinatorNotAvailable.Code
	}
	atCoordinator := func(what string, do func(r *raw) int16) {
		t.Helper()
		for deadline := time.Now().Add(testTimeout); ; time.Sleep(20 * time.Millisecond) {
			code := do(dialRaw(t, c.brokers[c.agreedCoordinator(group)]))
			if code == 0 {
				return
			}
			if !retriable(code) || time.Now().After(deadline) {
				t.Fatalf("%s at the coordinator: code %d", what, code)
			}
		}
	}
	fetch := func() int64 {
		t.Helper()
		var off int64
		atCoordinator("OffsetFetch", func(r *raw) int16 {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Version, req.Group = 5, group
			ft := kmsg.NewOffsetFetchRequestTopic()
			ft.Topic, ft.Partitions = topicName, []int32{0}
			req.Topics = append(req.Topics, ft)
			resp := r.request(req).(*kmsg.OffsetFetchResponse)
			if resp.ErrorCode != 0 {
				return resp.ErrorCode
			}
			off = resp.Topics[0].Partitions[0].Offset
			return resp.Topics[0].Partitions[0].ErrorCode
		})
		return off
	}
	if got := fetch(); got != 5 {
		t.Fatalf("the coordinator answers offset %d, want 5", got)
	}
	atCoordinator("the member's commit in its generation", func(r *raw) int16 {
		return rawCommit(t, r, group, member, gen, topicName, 9)
	})
	if got := fetch(); got != 9 {
		t.Fatalf("the coordinator answers offset %d after the commit, want 9", got)
	}
}

// TestClusterMetadataInSyncReplicas: every listener answers the in-sync
// replicas from the partition leader's raft progress, not the placement
// (a listener that does not lead the partition asks the leader, in the
// background: the set answered is the one its refresher last read): a
// follower cut off from the others drops out of the ISR once the log
// moves on without it, at the leader's listener and at the other
// follower's, and returns once the network heals and it catches up.
func TestClusterMetadataInSyncReplicas(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	const topicName = "isr"
	r := dialRaw(t, c.brokers[1])
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topicName, 1, 3
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, topicName)
	if err != nil {
		t.Fatal(err)
	}
	// metadata is the partition's leader and ISR as broker at answers.
	metadata := func(at int32) (int32, []int32) {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topicName)
		req.Topics = append(req.Topics, mt)
		resp := dialRaw(t, c.brokers[at]).request(req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("metadata: %+v", resp.Topics)
		}
		p := resp.Topics[0].Partitions[0]
		return p.Leader, slices.Sorted(slices.Values(p.ISR))
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	var lead int32
	wait("a leader with every replica in sync", func() bool {
		l, _ := metadata(1)
		if l <= 0 {
			return false
		}
		lead = l
		_, isr := metadata(l)
		return slices.Equal(isr, []int32{1, 2, 3})
	})
	cut := lead%3 + 1
	keep := 6 - lead - cut
	c.bus.Disconnect(transport.NodeID(lead), transport.NodeID(cut))
	c.bus.Disconnect(transport.NodeID(keep), transport.NodeID(cut))
	produced := 0
	want := slices.Sorted(slices.Values([]int32{lead, keep}))
	wait("the cut-off follower to leave the ISR", func() bool {
		// The log moves on without it.
		if _, err := c.nodes[lead].Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("while cut")}); err != nil {
			t.Fatalf("produce at the leader: %v", err)
		}
		produced++
		l, isr := metadata(lead)
		return l == lead && slices.Equal(isr, want)
	})
	// The follower still in touch answers the leader's view; with the
	// placement it would name all three.
	wait("the other follower's listener to answer the leader's ISR", func() bool {
		l, isr := metadata(keep)
		return l == lead && slices.Equal(isr, want)
	})
	t.Logf("follower %d out of the ISR of leader %d after %d records", cut, lead, produced)
	// Metadata answers the placement while no set is known: the sets
	// answered after the heal must be ones read after it.
	healed := time.Now()
	readSince := func(at int32) bool {
		srv := c.servers[at]
		srv.isr.mu.Lock()
		defer srv.isr.mu.Unlock()
		for k, e := range srv.isr.entries {
			if k.t == topic && k.part == 0 {
				return e.readAt.After(healed) && slices.Equal(slices.Sorted(slices.Values(e.isr)), []int32{1, 2, 3})
			}
		}
		return false
	}
	c.bus.Heal()
	wait("the follower to return to the ISR", func() bool {
		_, isr := metadata(lead)
		_, there := metadata(keep)
		return slices.Equal(isr, []int32{1, 2, 3}) && slices.Equal(there, isr) && readSince(lead) && readSince(keep)
	})
	po, err := c.nodes[cut].Admin().PartitionOffsets(ctx, topic, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("follower %d back in the ISR holding %d records of %d", cut, po.End, produced)
}

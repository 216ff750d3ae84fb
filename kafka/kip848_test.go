package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// kip848Config is a listener whose consumer group members heartbeat
// often, so a test's rebalances take a few hundred milliseconds.
func kip848Config() Config {
	return Config{GroupHeartbeatInterval: 100 * time.Millisecond, GroupSessionTimeout: 5 * time.Second}
}

// start848Member starts a franz-go consumer of the KIP-848 protocol
// (kgo.ServerSideBalancer) polling topic in group and committing what
// it polled; with autoCommit, franz-go also commits on its own (every
// 100 ms, and what it polled of a partition before it gives it up).
func start848Member(t *testing.T, seeds []string, idx int, group, topic string, s *seen, autoCommit bool, opts ...kgo.Opt) *groupMember {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond), kgo.ClientID(fmt.Sprint("member-", idx))}
	if autoCommit {
		base = append(base, kgo.AutoCommitInterval(100*time.Millisecond))
	} else {
		base = append(base, kgo.DisableAutoCommit())
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	return pollMember(cl, idx, s)
}

// waitConsumerGroup waits until the coordinator holds group as a
// consumer group (KIP-848) of n members, each reconciled to its target,
// and returns the group epoch.
func waitConsumerGroup(t *testing.T, srvs func() []*Server, group string, n int) int32 {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		for _, srv := range srvs() {
			srv.groups.mu.Lock()
			g := srv.groups.cgroups[group]
			ok := g != nil && len(g.members) == n && g.state() == "Stable"
			var epoch int32
			if g != nil {
				epoch = g.epoch
			}
			srv.groups.mu.Unlock()
			if ok {
				return epoch
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s never became a stable consumer group of %d members", group, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupLogCommits reads group's commits from its coordinator partition
// of the group log, in log order: the offsets committed for each
// partition.
func groupLogCommits(t *testing.T, ctx context.Context, srv *Server, group string) map[topicPart][]int64 {
	t.Helper()
	ct, n, err := srv.coordTopic(ctx)
	if err != nil {
		t.Fatalf("coordTopic: %v", err)
	}
	p := groupPartition(group, n)
	out := map[topicPart][]int64{}
	from := parkway.AtFirst()
	for {
		b, err := srv.node.Poll(ctx, ct, p, from, 512)
		if err != nil {
			t.Fatalf("Poll the group log: %v", err)
		}
		if len(b.Messages) == 0 {
			return out
		}
		for _, m := range b.Messages {
			if string(m.Key) != group {
				continue
			}
			rec, err := decodeLogRecord(m.Payload)
			if err != nil {
				t.Fatalf("group log record at %d: %v", m.Offset, err)
			}
			for _, c := range rec.commits {
				out[c.tp] = append(out[c.tp], c.offset)
			}
		}
		from = parkway.AtOffset(b.Next)
	}
}

// checkCommitsNeverRegress fails if a partition's committed offset ever
// moved back in the group log, and returns the last commit of each.
func checkCommitsNeverRegress(t *testing.T, commits map[topicPart][]int64) map[topicPart]int64 {
	t.Helper()
	last := map[topicPart]int64{}
	for tp, offs := range commits {
		for i := 1; i < len(offs); i++ {
			if offs[i] < offs[i-1] {
				t.Errorf("%s/%d: committed offset regressed from %d to %d (commits %v)", tp.topic, tp.part, offs[i-1], offs[i], offs)
			}
		}
		last[tp] = offs[len(offs)-1]
	}
	return last
}

// TestConsumerGroupProtocolKIP848: three franz-go consumers of the
// KIP-848 protocol (the broker assigns) share six partitions; members
// leave and join (some commit by hand, some autocommit: franz-go then
// commits a partition it is revoking before it gives it up); every record is consumed, the partitions are spread
// evenly at every stable point, the committed offsets in the group log
// never move back and end at the partitions' ends.
func TestConsumerGroupProtocolKIP848(t *testing.T) {
	f := serve(t, kip848Config())
	ctx := ctxFor(t)
	adm := kadm.NewClient(f.client(t))
	if res, err := adm.CreateTopics(ctx, 6, -1, nil, "work"); err != nil || res["work"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["work"].Err)
	}
	prod := f.client(t, kgo.DefaultProduceTopic("work"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	srvs := func() []*Server { return []*Server{f.srv} }
	s := &seen{by: map[string][]int{}}
	var members []*groupMember
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
	}()
	for i := range 3 {
		members = append(members, start848Member(t, []string{f.addr}, i, "billing", "work", s, i == 2))
	}
	epoch := waitConsumerGroup(t, srvs, "billing", 3)
	checkSpread(t, f.srv, "billing", 6)
	produce(0, 600)
	waitCount(t, s, 600)

	described, err := adm.DescribeConsumerGroups(ctx, "billing")
	if err != nil {
		t.Fatalf("DescribeConsumerGroups: %v", err)
	}
	if g := described["billing"]; g.Err != nil || len(g.Members) != 3 {
		t.Fatalf("DescribeConsumerGroups: %+v", g)
	}

	members[1].stop() // leaves with epoch -1
	members[1] = nil
	if e := waitConsumerGroup(t, srvs, "billing", 2); e <= epoch {
		t.Fatalf("group epoch %d after a member left, was %d", e, epoch)
	}
	checkSpread(t, f.srv, "billing", 6)
	produce(600, 900)
	waitCount(t, s, 900)

	members = append(members, start848Member(t, []string{f.addr}, 3, "billing", "work", s, true))
	waitConsumerGroup(t, srvs, "billing", 3)
	checkSpread(t, f.srv, "billing", 6)
	produce(900, 1200)
	waitCount(t, s, 1200)

	ends, err := adm.ListEndOffsets(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, ctx, adm, "billing", ends)
	last := checkCommitsNeverRegress(t, groupLogCommits(t, ctx, f.srv, "billing"))
	ends.Each(func(e kadm.ListedOffset) {
		if got := last[topicPart{e.Topic, e.Partition}]; got != e.Offset {
			t.Errorf("%s/%d: last commit in the group log %d, end %d", e.Topic, e.Partition, got, e.Offset)
		}
	})
}

// listEnds lists topic's end offsets, asking again while a broker the
// client knows is dead or moving.
func listEnds(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) kadm.ListedOffsets {
	t.Helper()
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			return ends
		}
		if ctx.Err() != nil {
			t.Fatalf("ListEndOffsets: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCommitted waits until group's committed offsets reach ends.
func waitCommitted(t *testing.T, ctx context.Context, adm *kadm.Client, group string, ends kadm.ListedOffsets) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		committed, err := adm.FetchOffsets(ctx, group)
		behind := 0
		if err == nil {
			ends.Each(func(e kadm.ListedOffset) {
				if c, ok := committed.Lookup(e.Topic, e.Partition); !ok || c.At != e.Offset {
					behind++
				}
			})
		}
		if err == nil && behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets never reached the ends: %d behind, err %v", behind, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSpread checks that group's members hold its parts partitions
// between them, each exactly once, their shares differing by at most one.
func checkSpread(t *testing.T, srv *Server, group string, parts int) {
	t.Helper()
	srv.groups.mu.Lock()
	defer srv.groups.mu.Unlock()
	g := srv.groups.cgroups[group]
	held := map[topicPart]string{}
	lo, hi := parts, 0
	for id, m := range g.members {
		for tp := range m.assigned {
			if other, dup := held[tp]; dup {
				t.Fatalf("%s/%d is held by %s and %s", tp.topic, tp.part, other, id)
			}
			held[tp] = id
		}
		lo, hi = min(lo, len(m.assigned)), max(hi, len(m.assigned))
	}
	if len(held) != parts || hi-lo > 1 {
		t.Fatalf("%d of %d partitions held, shares from %d to %d", len(held), parts, lo, hi)
	}
}

// TestClusterKIP848CoordinatorKilled: three franz-go members of the
// KIP-848 protocol consume a replicated topic on a 3-node cluster. The
// group coordinator's node is killed: the survivors agree on a new
// coordinator, which loads the group from the group log; the members
// heartbeat on there with their member ids, consume everything produced
// after the kill, and one leaves: its partitions move to the others. No
// record committed before the kill is polled again, no committed offset
// moves back in the group log, and the commits end at the partitions'
// ends.
func TestClusterKIP848CoordinatorKilled(t *testing.T) {
	c := startClusterWith(t, 3, func(cfg *Config) {
		cfg.GroupHeartbeatInterval, cfg.GroupSessionTimeout = 100*time.Millisecond, 10*time.Second
	})
	ctx := ctxFor(t)
	all := []int32{1, 2, 3}
	adm := kadm.NewClient(c.client(all))
	const topicName, group, third = "kip848", "kip848-group", 120
	if res, err := adm.CreateTopics(ctx, 6, 3, nil, topicName); err != nil || res[topicName].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topicName].Err)
	}
	coord := c.agreedCoordinator(group)
	// Not seeded with the node about to die (see
	// TestClusterCoordinatorMovesWhenItsNodeDies: franz-go may take a
	// refused dial to a dead seed for final).
	survivors := slices.DeleteFunc(slices.Clone(all), func(id int32) bool { return id == coord })
	var seeds []string
	for _, id := range survivors {
		seeds = append(seeds, c.brokers[id])
	}
	s := &seen{by: map[string][]int{}}
	var members []*groupMember
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
	}()
	logs := newFailureLog(t)
	for i := range 3 {
		members = append(members, start848Member(t, seeds, i, group, topicName, s, i == 1,
			kgo.WithLogger(logs.logger(fmt.Sprint("member-", i)))))
	}
	prod := c.client(all, kgo.DefaultProduceTopic(topicName), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(testTimeout))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	memberIDs := func(srv *Server) []string {
		srv.groups.mu.Lock()
		defer srv.groups.mu.Unlock()
		if g := srv.groups.cgroups[group]; g != nil {
			return slices.Sorted(maps.Keys(g.members))
		}
		return nil
	}

	waitConsumerGroup(t, func() []*Server { return []*Server{c.servers[coord]} }, group, 3)
	checkSpread(t, c.servers[coord], group, 6)
	produce(0, third)
	waitCount(t, s, third)
	survivorAdm := kadm.NewClient(c.client(survivors))
	ends := listEnds(t, ctx, survivorAdm, topicName)
	waitCommitted(t, ctx, survivorAdm, group, ends)
	before := memberIDs(c.servers[coord])

	// Every record so far is committed: none may be polled again.
	s.mu.Lock()
	polled := map[string]int{}
	for k, who := range s.by {
		polled[k] = len(who)
	}
	s.mu.Unlock()
	start := time.Now()
	c.kill(coord)
	next := c.agreedCoordinator(group, coord)
	t.Logf("coordinator %d killed; the survivors agree on %d after %v", coord, next, time.Since(start))
	produce(third, 2*third)
	waitCount(t, s, 2*third)
	if after := memberIDs(c.servers[next]); !slices.Equal(after, before) {
		if logs.sessionEndedOnRefusedDial() {
			t.Logf("a member's client ended its session on a refused dial to the dead broker: members %v, were %v", after, before)
		} else {
			t.Errorf("members %v at the new coordinator %d, were %v at %d", after, next, before, coord)
		}
	}

	members[0].stop() // leaves: its partitions move to the two others
	members[0] = nil
	waitConsumerGroup(t, func() []*Server { return []*Server{c.servers[next]} }, group, 2)
	checkSpread(t, c.servers[next], group, 6)
	produce(2*third, 3*third)
	waitCount(t, s, 3*third)
	ends = listEnds(t, ctx, survivorAdm, topicName)
	waitCommitted(t, ctx, survivorAdm, group, ends)
	last := checkCommitsNeverRegress(t, groupLogCommits(t, ctx, c.servers[next], group))
	ends.Each(func(e kadm.ListedOffset) {
		if got := last[topicPart{e.Topic, e.Partition}]; got != e.Offset {
			t.Errorf("%s/%d: last commit in the group log %d, end %d", e.Topic, e.Partition, got, e.Offset)
		}
	})
	// Nothing committed before the kill was polled again after it: the
	// new coordinator answered the commits its predecessor wrote.
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range polled {
		if len(s.by[k]) > n {
			t.Errorf("record %s, committed before the kill, was polled again after it (by members %v)", k, s.by[k])
		}
	}
}

// TestKIP848RegexFallsBackToClassic: a regular expression subscription
// is not served by the KIP-848 protocol: its join is answered
// UNSUPPORTED_VERSION, on which franz-go falls back to the classic
// protocol, and the member consumes as a classic group's.
func TestKIP848RegexFallsBackToClassic(t *testing.T) {
	f := serve(t, kip848Config())
	ctx := ctxFor(t)
	prod := f.client(t, kgo.DefaultProduceTopic("regex-topic"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctx, kgo.StringRecord("one")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := f.client(t, kgo.ConsumerGroup("regex-group"), kgo.ConsumeRegex(), kgo.ConsumeTopics("regex-.*"),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if got := consume(t, cl, 1); string(got[0].Value) != "one" {
		t.Fatalf("consumed %q", got[0].Value)
	}
	f.srv.groups.mu.Lock()
	defer f.srv.groups.mu.Unlock()
	if _, classic := f.srv.groups.groups["regex-group"]; !classic || f.srv.groups.cgroups["regex-group"] != nil {
		t.Fatalf("the regex member's group: classic %v, consumer group %v", classic, f.srv.groups.cgroups["regex-group"] != nil)
	}
	if n := testutil.ToFloat64(f.srv.metrics.errors.WithLabelValues(apiName(int16(kmsg.ConsumerGroupHeartbeat)), "35")); n < 1 {
		t.Fatalf("%v ConsumerGroupHeartbeats answered UNSUPPORTED_VERSION, want at least 1", n)
	}
}

// TestKIP848CommitFenceOverTheWire drives the KIP-848 protocol with raw
// requests: OffsetCommit applies the per-partition fence a member's
// heartbeats set up — a member commits what it holds, also while
// revoking it, and nothing once it released it; the new holder commits
// it from the epoch it was given it at; a member commits with v9 only;
// an admin commit is refused while the group has members — and what is
// refused never reaches the group log. ConsumerGroupDescribe, ListGroups
// and DescribeGroups answer the group as a consumer group.
func TestKIP848CommitFenceOverTheWire(t *testing.T) {
	f := serve(t, kip848Config())
	r := dialRaw(t, f.addr)
	const group, topicName = "wire-group", "wire"
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 10_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topicName, 2, 1
	ct.Topics = append(ct.Topics, rt)
	if resp := r.request(ct).(*kmsg.CreateTopicsResponse); resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: code %d", resp.Topics[0].ErrorCode)
	}
	topic, err := f.srv.topics.lookup(ctxFor(t), topicName)
	if err != nil {
		t.Fatal(err)
	}
	id := topicID(topic)
	// hb sends a full heartbeat (owned nil: a join) and returns the
	// member's epoch and assigned partitions.
	hb := func(member string, epoch int32, owned []int32) (int32, []int32) {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = 1, group, member, epoch, 30_000
		req.SubscribedTopicNames, req.Topics = []string{topicName}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		if len(owned) > 0 {
			req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: owned})
		}
		resp := r.request(req).(*kmsg.ConsumerGroupHeartbeatResponse)
		if resp.ErrorCode != 0 || resp.Assignment == nil {
			t.Fatalf("heartbeat of %s at %d: code %d, assignment %v", member, epoch, resp.ErrorCode, resp.Assignment)
		}
		var parts []int32
		for _, at := range resp.Assignment.Topics {
			if at.TopicID != id {
				t.Fatalf("assigned topic ID %x, want %x", at.TopicID, id)
			}
			parts = append(parts, at.Partitions...)
		}
		slices.Sort(parts)
		return resp.MemberEpoch, parts
	}
	commit := func(version int16, member string, epoch int32, part int32, offset int64) int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.MemberID, req.Generation = version, group, member, epoch
		ot := kmsg.NewOffsetCommitRequestTopic()
		ot.Topic = topicName
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition, op.Offset = part, offset
		ot.Partitions = append(ot.Partitions, op)
		req.Topics = append(req.Topics, ot)
		return r.request(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	fetch := func(part int32) int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 7, group
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topicName, Partitions: []int32{part}}}
		return r.request(req).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset
	}

	ea, parts := hb("a", 0, nil)
	if !slices.Equal(parts, []int32{0, 1}) {
		t.Fatalf("a alone is assigned %v", parts)
	}
	if code := commit(9, "a", ea, 0, 5); code != 0 {
		t.Fatalf("a commits partition 0: code %d", code)
	}
	if code := commit(8, "a", ea, 0, 6); code != kerr.UnsupportedVersion.Code {
		t.Fatalf("a commits with OffsetCommit v8: code %d, want UNSUPPORTED_VERSION", code)
	}
	if code := commit(9, "", -1, 0, 6); code != kerr.UnknownMemberID.Code {
		t.Fatalf("an admin commit while the group has members: code %d", code)
	}

	eb, parts := hb("b", 0, nil)
	if len(parts) != 0 {
		t.Fatalf("b was given %v, which a holds", parts)
	}
	_, kept := hb("a", ea, []int32{0, 1}) // a is told to give one up
	if len(kept) != 1 {
		t.Fatalf("a keeps %v after b joined", kept)
	}
	moving := 1 - kept[0]
	if code := commit(9, "a", ea, moving, 10); code != 0 {
		t.Fatalf("a commits the partition it is revoking: code %d", code)
	}
	if code := commit(9, "b", eb, moving, 99); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("b commits the partition a holds: code %d", code)
	}
	ea, _ = hb("a", ea, kept) // revoked
	eb, parts = hb("b", eb, nil)
	if !slices.Equal(parts, []int32{moving}) {
		t.Fatalf("b is assigned %v once a revoked %d", parts, moving)
	}
	if code := commit(9, "a", ea, moving, 11); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("a commits the partition it released: code %d", code)
	}
	if code := commit(9, "b", eb-1, moving, 12); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("b commits its new partition with an epoch before it was given it: code %d", code)
	}
	if got := fetch(moving); got != 10 {
		t.Fatalf("partition %d's committed offset %d, want a's 10 (the refused commits never landed)", moving, got)
	}
	if code := commit(9, "b", eb, moving, 13); code != 0 {
		t.Fatalf("b commits its new partition: code %d", code)
	}
	if got := fetch(moving); got != 13 {
		t.Fatalf("partition %d's committed offset %d, want b's 13", moving, got)
	}

	cd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cd.Version, cd.Groups = 1, []string{group, "no-such-group"}
	described := r.request(cd).(*kmsg.ConsumerGroupDescribeResponse)
	if g := described.Groups[0]; g.ErrorCode != 0 || len(g.Members) != 2 || g.AssignorName != uniformAssignor {
		t.Fatalf("ConsumerGroupDescribe: %+v", g)
	}
	if g := described.Groups[1]; g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("ConsumerGroupDescribe of an unknown group: code %d", g.ErrorCode)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Version, dg.Groups = 5, []string{group}
	if g := r.request(dg).(*kmsg.DescribeGroupsResponse).Groups[0]; g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DescribeGroups of a consumer group: code %d", g.ErrorCode)
	}
	listed := r.request(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
	if len(listed.Groups) != 1 || listed.Groups[0].Group != group || listed.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("ListGroups: %+v", listed.Groups)
	}
}

package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// groupMember is a franz-go consumer in a group, polling on a goroutine
// of its own and committing what it polled.
type groupMember struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// seen records which member consumed each partition/offset.
type seen struct {
	mu sync.Mutex
	by map[string][]int
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.by)
}

func startMember(t *testing.T, f *fixture, idx int, group, topic string, s *seen) *groupMember {
	t.Helper()
	return startMemberOf(t, f.client, idx, group, topic, s)
}

// startMemberOf is startMember with clients client makes.
func startMemberOf(t *testing.T, client func(testing.TB, ...kgo.Opt) *kgo.Client, idx int, group, topic string, s *seen) *groupMember {
	t.Helper()
	cl := client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(3*time.Second),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.ClientID(fmt.Sprint("member-", idx)))
	return pollMember(cl, idx, s)
}

// pollMember polls cl on a goroutine of its own, recording what it gets in
// s and committing it.
func pollMember(cl *kgo.Client, idx int, s *seen) *groupMember {
	ctx, cancel := context.WithCancel(context.Background())
	m := &groupMember{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				s.mu.Lock()
				k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
				s.by[k] = append(s.by[k], idx)
				s.mu.Unlock()
			})
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}()
	return m
}

// stop ends the member's loop and closes its client, which leaves the
// group.
func (m *groupMember) stop() {
	m.cancel()
	<-m.done
	m.cl.Close()
}

// waitGroup waits until the coordinator holds group stable with n members.
func (f *fixture) waitGroup(t *testing.T, group string, n int) int32 {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		if gen, ok := f.stableGroup(group, n); ok {
			return gen
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s never became stable with %d members", group, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stableGroup reports whether f's listener coordinates group as stable
// with n members, and its generation.
func (f *fixture) stableGroup(group string, n int) (int32, bool) {
	f.srv.groups.mu.Lock()
	defer f.srv.groups.mu.Unlock()
	g := f.srv.groups.groups[group]
	if g == nil || g.state != groupStable || len(g.members) != n {
		return 0, false
	}
	return g.generation, true
}

// waitGroup waits until one of the cluster's listeners coordinates group
// as stable with n members, and returns its generation.
func (c *cluster) waitGroup(t *testing.T, group string, n int) int32 {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		for _, srv := range c.servers {
			f := fixture{srv: srv}
			if gen, ok := f.stableGroup(group, n); ok {
				return gen
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s never became stable with %d members", group, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConsumerGroupRebalance: three franz-go consumers (cooperative-sticky,
// franz-go's default) share six partitions through the listener's group
// coordinator; every record is consumed; when one leaves, the others take
// its partitions; the group's commits land in the group log and kadm
// reads them back at the partitions' ends. On one node, and on a 3-node
// cluster whose members each bootstrap from every listener (the
// coordinator is the leader of the group's partition of
// __group_coordinators, wherever that is).
func TestConsumerGroupRebalance(t *testing.T) {
	t.Run("node", func(t *testing.T) {
		f := serve(t, Config{})
		consumerGroupRebalance(t, f.client, f.waitGroup)
	})
	t.Run("cluster", func(t *testing.T) {
		c := startCluster(t)
		consumerGroupRebalance(t, func(t testing.TB, opts ...kgo.Opt) *kgo.Client {
			return c.client([]int32{1, 2, 3}, opts...)
		}, c.waitGroup)
	})
}

// consumerGroupRebalance is TestConsumerGroupRebalance's case on clients
// client makes; waitGroup waits for the group to be stable with n
// members at its coordinator and returns its generation.
func consumerGroupRebalance(t *testing.T, client func(testing.TB, ...kgo.Opt) *kgo.Client, waitGroup func(t *testing.T, group string, n int) int32) {
	ctx := ctxFor(t)
	adm := kadm.NewClient(client(t))
	if res, err := adm.CreateTopics(ctx, 6, -1, nil, "work"); err != nil || res["work"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["work"].Err)
	}
	prod := client(t, kgo.DefaultProduceTopic("work"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	s := &seen{by: map[string][]int{}}
	var members []*groupMember
	for i := range 3 {
		members = append(members, startMemberOf(t, client, i, "billing", "work", s))
	}
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
	}()
	gen := waitGroup(t, "billing", 3)
	produce(0, 600)
	waitCount(t, s, 600)
	s.mu.Lock()
	by := map[int]bool{}
	for _, who := range s.by {
		by[who[0]] = true
	}
	s.mu.Unlock()
	if len(by) != 3 {
		t.Fatalf("records were consumed by %d members, want all 3", len(by))
	}

	described, err := adm.DescribeGroups(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if g := described["billing"]; g.Err != nil || g.State != "Stable" || len(g.Members) != 3 || g.Protocol != "cooperative-sticky" {
		t.Fatalf("DescribeGroups: %+v", g)
	}

	members[2].stop()
	members[2] = nil
	if gen2 := waitGroup(t, "billing", 2); gen2 <= gen {
		t.Fatalf("generation %d after a member left, was %d", gen2, gen)
	}
	produce(600, 900)
	waitCount(t, s, 900)

	// Every partition's committed offset reaches its end once the
	// members committed what they polled.
	ends, err := adm.ListEndOffsets(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		committed, err := adm.FetchOffsets(ctx, "billing")
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		behind := 0
		ends.Each(func(e kadm.ListedOffset) {
			if c, ok := committed.Lookup(e.Topic, e.Partition); !ok || c.At != e.Offset {
				behind++
			}
		})
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d partitions' committed offsets never reached their ends", behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitCount(t *testing.T, s *seen, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for s.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d distinct records, want %d", s.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCoordinatorFences drives the coordinator on a manual clock: the
// KIP-394 member id handshake, a rebalance as a member joins, the
// generation fence on commits and heartbeats, and a lapsed session.
func TestCoordinatorFences(t *testing.T) {
	c := newCoordinator(DefaultGroupHeartbeatInterval, DefaultGroupSessionTimeout)
	now := time.Unix(1000, 0)
	join := func(member string) (*kmsg.JoinGroupResponse, <-chan *kmsg.JoinGroupResponse) {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Version, r.Group, r.MemberID, r.ProtocolType = 9, "g", member, "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10_000, 5_000
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte(member)}}
		return c.join(r, 0, "client", "/127.0.0.1", now)
	}
	// A first join without an id gets one and MEMBER_ID_REQUIRED.
	resp, wait := join("")
	if wait != nil || resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		t.Fatalf("first join: %+v", resp)
	}
	a := resp.MemberID
	if resp, _ := join("someone-else"); resp == nil || resp.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("a join with an id never handed out: %+v", resp)
	}
	_, wait = join(a)
	ja := <-wait
	if ja.ErrorCode != 0 || ja.Generation != 1 || ja.LeaderID != a || len(ja.Members) != 1 {
		t.Fatalf("a's join: %+v", ja)
	}
	sync := func(member string, gen int32, assign map[string][]byte) (syncAnswer, <-chan syncAnswer) {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = "g", member, gen
		for id, b := range assign {
			r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: b})
		}
		got, wait, persist := c.sync(r, now)
		if persist != nil {
			// The leader's: its group record written, every member
			// waiting is answered.
			c.synced("g", persist.group.generation, 0)
			return <-wait, nil
		}
		return got, wait
	}
	if got, _ := sync(a, 1, map[string][]byte{a: []byte("all")}); got.code != 0 || string(got.assignment) != "all" {
		t.Fatalf("a's sync: %+v", got)
	}
	if code := c.commitCheck("g", a, 1); code != 0 {
		t.Fatalf("a's commit in generation 1: code %d", code)
	}
	if code := c.commitCheck("g", "", -1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a commit without a member while the group has members: code %d", code)
	}

	// b joins: a rebalance; a learns by heartbeat, rejoins; generation 2.
	resp, _ = join("")
	b := resp.MemberID
	_, waitB := join(b)
	hb := func(member string, gen int32) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", member, gen
		return c.heartbeat(r, now)
	}
	if code := hb(a, 1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("a's heartbeat during the rebalance: code %d", code)
	}
	_, waitA := join(a)
	ja, jb := <-waitA, <-waitB
	if ja.Generation != 2 || jb.Generation != 2 || ja.LeaderID != a || len(ja.Members) != 2 || len(jb.Members) != 0 {
		t.Fatalf("generation 2: a %+v, b %+v", ja, jb)
	}
	if code := c.commitCheck("g", a, 1); code != kerr.IllegalGeneration.Code {
		t.Fatalf("a commit from generation 1 in generation 2: code %d, want ILLEGAL_GENERATION", code)
	}
	_, waitSyncB := sync(b, 2, nil)
	if got, _ := sync(a, 2, map[string][]byte{a: []byte("p0"), b: []byte("p1")}); string(got.assignment) != "p0" {
		t.Fatalf("a's assignment: %q", got.assignment)
	}
	if got := <-waitSyncB; string(got.assignment) != "p1" {
		t.Fatalf("b's assignment: %q", got.assignment)
	}

	// b stops heartbeating: its session lapses, a rebalance starts, and
	// a's rejoin completes generation 3 alone.
	now = now.Add(9 * time.Second)
	if code := hb(a, 2); code != 0 {
		t.Fatalf("a's heartbeat: %d", code)
	}
	now = now.Add(2 * time.Second)
	c.tick(now)
	if code := hb(a, 2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("a's heartbeat after b lapsed: %d", code)
	}
	if code := c.commitCheck("g", b, 2); code != kerr.UnknownMemberID.Code {
		t.Fatalf("the lapsed member's commit: code %d, want UNKNOWN_MEMBER_ID", code)
	}
	_, waitA = join(a)
	if ja := <-waitA; ja.Generation != 3 || len(ja.Members) != 1 {
		t.Fatalf("generation 3: %+v", ja)
	}
	if codes := c.leave("g", []string{a}, now); codes[0] != 0 {
		t.Fatalf("leave: %v", codes)
	}
	c.tick(now)
	if code := c.commitCheck("g", "", -1); code != 0 {
		t.Fatalf("an admin commit to the empty group: code %d", code)
	}
}

// TestGroupOffsetsSurviveRestart: a group's commits are records of its
// group log partition, durable with the node: after the node and its
// listener restart on the same data directory, the listener loads the
// group log and a member (the first one left) resumes after what was
// committed.
func TestGroupOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*parkway.Node, *listening) {
		node, err := parkway.Open(parkway.Config{Shards: 1, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return node, listen(t, node, Config{})
	}
	stop := func(node *parkway.Node, l *listening) {
		l.stop()
		if err := node.Close(); err != nil {
			t.Fatal(err)
		}
	}
	member := func(addr string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("durable"), kgo.ConsumeTopics("kept"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.DefaultProduceTopic("kept"),
			kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ctx := ctxFor(t)
	node, l := start()
	cl := member(l.addr)
	for i := range 10 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint("before-", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if got := consume(t, cl, 10); len(got) != 10 {
		t.Fatalf("consumed %d", len(got))
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cl.Close()
	stop(node, l)

	node, l = start()
	defer stop(node, l)
	cl = member(l.addr)
	defer cl.Close()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consume(t, cl, 1)
	if len(got) != 1 || string(got[0].Value) != "after" || got[0].Offset != 10 {
		t.Fatalf("after the restart the group resumed at %q offset %d, want \"after\" at 10", got[0].Value, got[0].Offset)
	}
}

package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
)

// kip848Config is a listener whose consumer group members heartbeat
// often, so a test's rebalances take a few hundred milliseconds.
func kip848Config() Config {
	return Config{GroupHeartbeatInterval: 100 * time.Millisecond, GroupSessionTimeout: 5 * time.Second}
}

// start848Member starts a franz-go consumer of the KIP-848 protocol
// (kgo.ServerSideBalancer) polling topic in group and committing what
// it polled.
func start848Member(t *testing.T, seeds []string, idx int, group, topic string, s *seen, opts ...kgo.Opt) *groupMember {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200 * time.Millisecond), kgo.ClientID(fmt.Sprint("member-", idx))}, opts...)...)
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
// leave and join; every record is consumed, the partitions are spread
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
		members = append(members, start848Member(t, []string{f.addr}, i, "billing", "work", s))
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

	members = append(members, start848Member(t, []string{f.addr}, 3, "billing", "work", s))
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

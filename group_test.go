package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// produceAcross produces per messages to each of parts partitions.
func produceAcross(t *testing.T, n *parkway.Node, tp parkway.Topic, parts, per int) {
	t.Helper()
	for p := range parts {
		for i := range per {
			mustProduce(t, n, tp, parkway.PartitionID(uint32(p)), fmt.Sprintf("p%d-%d", p, i))
		}
	}
}

// settleMembers heartbeats the members in turn until no partition is
// moving between them and they all act in one generation: a partition
// leaves a live member in two steps (behaviour 33), its holder's
// heartbeat acknowledging the generation that revokes it. It returns
// the generation.
func settleMembers(t *testing.T, ms ...*parkway.Member) uint64 {
	t.Helper()
	ctx := ctxFor(t)
	for range 10 {
		settled := true
		var gen uint64
		for i, m := range ms {
			a, err := m.Heartbeat(ctx)
			if err != nil {
				t.Fatalf("member %d heartbeat: %v", m.ID(), err)
			}
			if len(a.Revoking) > 0 || (i > 0 && a.Generation != gen) {
				settled = false
			}
			gen = a.Generation
		}
		if settled {
			// One more round: the last heartbeat may have moved some.
			for _, m := range ms {
				a, _ := m.Heartbeat(ctx)
				if a.Generation != gen || len(a.Revoking) > 0 {
					settled = false
				}
			}
			if settled {
				return gen
			}
		}
	}
	t.Fatal("group never settled")
	return 0
}

// drainMember polls every partition a member holds from the group's
// committed offset until the partitions are empty, committing as it goes,
// and returns the payloads it read.
func drainMember(t *testing.T, m *parkway.Member) []string {
	t.Helper()
	ctx := ctxFor(t)
	var got []string
	for _, p := range m.Assignment().Partitions {
		for {
			b, err := m.Poll(ctx, p, parkway.AtCommitted(), 3)
			if err != nil {
				t.Fatalf("member %d poll of %d: %v", m.ID(), p, err)
			}
			if len(b.Messages) == 0 {
				break
			}
			got = append(got, payloads(b.Messages)...)
			if err := m.Commit(ctx, map[uint32]uint64{p: b.Next}); err != nil {
				t.Fatalf("member %d commit of %d: %v", m.ID(), p, err)
			}
		}
	}
	return got
}

// Behaviour 23, on one node: three members over twelve partitions. In
// the settled generation every partition has exactly one member, every
// message is read by exactly one member, and a member polling or
// committing a partition it does not hold is refused.
func TestBehaviour23GroupOfThreeOverTwelvePartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 12)
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		var members []*parkway.Member
		for i := range 3 {
			m, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: fmt.Sprintf("m%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			members = append(members, m)
		}
		gen := settleMembers(t, members...)
		owner := map[uint32]uint64{}
		for _, m := range members {
			a := m.Assignment()
			if len(a.Partitions) != 4 || a.Generation != gen {
				t.Fatalf("member %d: %+v, want 4 partitions in generation %d", m.ID(), a, gen)
			}
			for _, p := range a.Partitions {
				if prev, dup := owner[p]; dup {
					t.Fatalf("partition %d held by %d and %d in one generation", p, prev, m.ID())
				}
				owner[p] = m.ID()
			}
		}
		if len(owner) != 12 {
			t.Fatalf("%d partitions held, want 12", len(owner))
		}
		produceAcross(t, n, tp, 12, 5)
		seen := map[string]uint64{}
		for _, m := range members {
			for _, p := range drainMember(t, m) {
				if prev, dup := seen[p]; dup {
					t.Fatalf("message %s read by %d and %d", p, prev, m.ID())
				}
				seen[p] = m.ID()
			}
		}
		if len(seen) != 60 {
			t.Fatalf("read %d messages, want 60", len(seen))
		}
		// Not yours: poll and commit refused, typed.
		a, b := members[0], members[1]
		theirs := b.Assignment().Partitions[0]
		if _, err := a.Poll(ctx, theirs, parkway.AtFirst(), 1); !errors.Is(err, parkway.ErrNotAssigned) {
			t.Fatalf("poll of another member's partition: %v, want ErrNotAssigned", err)
		}
		if err := a.Commit(ctx, map[uint32]uint64{theirs: 5}); !errors.Is(err, parkway.ErrNotAssigned) {
			t.Fatalf("commit of another member's partition: %v, want ErrNotAssigned", err)
		}
		info, err := n.Admin().Group(ctx, tp, "g")
		if err != nil || len(info.Members) != 3 {
			t.Fatalf("Group: %+v, %v", info, err)
		}
		for p, gp := range info.Partitions {
			if !gp.Committed || gp.Offset != 5 {
				t.Errorf("partition %d committed %+v, want 5", p, gp)
			}
		}
	})
}

// Behaviour 23 through a rebalance: a member that stops heartbeating
// loses its partitions within its session timeout (the others'
// heartbeats expire it); its late commit and poll are refused; the
// group's committed offsets never go backwards; the partitions' new
// holders continue from the committed offsets.
func TestBehaviour23StaleMemberIsFencedAfterExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 6)
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		// Members that live by their own calls: their node keeps their
		// sessions for a millisecond after the last.
		cfg := parkway.MemberConfig{SessionTimeout: 3 * time.Second, MaxPollInterval: time.Millisecond}
		a, err := n.JoinGroup(ctx, tp, "g", cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.JoinGroup(ctx, tp, "g", cfg)
		if err != nil {
			t.Fatal(err)
		}
		settleMembers(t, a, b)
		produceAcross(t, n, tp, 6, 4)
		// b reads two messages of one of its partitions and commits.
		bp := b.Assignment().Partitions[0]
		batch, err := b.Poll(ctx, bp, parkway.AtCommitted(), 2)
		if err != nil || len(batch.Messages) != 2 {
			t.Fatalf("b poll: %v, %v", payloads(batch.Messages), err)
		}
		if err := b.Commit(ctx, map[uint32]uint64{bp: batch.Next}); err != nil {
			t.Fatal(err)
		}
		// b goes silent; a heartbeats every second. At most one session
		// timeout after b's last sign of life, a holds everything.
		lastB := time.Now()
		for a2 := a.Assignment(); len(a2.Partitions) < 6; {
			time.Sleep(time.Second)
			if a2, err = a.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
			if time.Since(lastB) > 3*time.Second+time.Second {
				t.Fatalf("b still holds partitions %v after %v", a2, time.Since(lastB))
			}
		}
		// b's late commit — even of a higher offset — and its poll are
		// refused; its session is gone.
		if err := b.Commit(ctx, map[uint32]uint64{bp: 4}); !errors.Is(err, parkway.ErrUnknownMember) {
			t.Fatalf("late commit of an expired member: %v, want ErrUnknownMember", err)
		}
		if _, err := b.Poll(ctx, bp, parkway.AtCommitted(), 1); !errors.Is(err, parkway.ErrUnknownMember) {
			t.Fatalf("poll of an expired member: %v, want ErrUnknownMember", err)
		}
		if _, err := b.Heartbeat(ctx); !errors.Is(err, parkway.ErrUnknownMember) {
			t.Fatalf("heartbeat of an expired member: %v, want ErrUnknownMember", err)
		}
		// a continues b's partition from b's committed offset, and cannot
		// move it backwards.
		next, err := a.Poll(ctx, bp, parkway.AtCommitted(), 10)
		if err != nil || len(next.Messages) != 2 || next.Messages[0].Offset != batch.Next {
			t.Fatalf("new holder's first poll: %v, %v; want the 2 messages after offset %d", payloads(next.Messages), err, batch.Next)
		}
		if err := a.Commit(ctx, map[uint32]uint64{bp: batch.Next - 1}); !errors.Is(err, parkway.ErrOffsetRegression) {
			t.Fatalf("backwards commit: %v, want ErrOffsetRegression", err)
		}
		if err := a.Commit(ctx, map[uint32]uint64{bp: next.Next}); err != nil {
			t.Fatal(err)
		}
		// b joins again as a new member: half of a's partitions start
		// moving to it (behaviour 33), and a may no longer read them...
		b2, err := n.JoinGroup(ctx, tp, "g", cfg)
		if err != nil || b2.ID() == b.ID() || len(b2.Assignment().Partitions) != 0 {
			t.Fatalf("rejoin: %v %+v, %v", b2.ID(), b2.Assignment(), err)
		}
		ra, err := a.Heartbeat(ctx) // learns of the move
		if err != nil || len(ra.Revoking) != 3 || len(ra.Partitions) != 3 {
			t.Fatalf("a after b rejoined: %+v, %v; want 3 kept and 3 revoking", ra, err)
		}
		moving := ra.Revoking[0]
		if _, err := a.Poll(ctx, moving, parkway.AtCommitted(), 1); !errors.Is(err, parkway.ErrRebalanceInProgress) {
			t.Fatalf("poll of a partition being revoked: %v, want ErrRebalanceInProgress", err)
		}
		// ...but may commit them until it releases them with its next
		// heartbeat; then b2 gets them, with the committed offsets.
		if err := a.Commit(ctx, map[uint32]uint64{moving: 0}); err != nil && !errors.Is(err, parkway.ErrOffsetRegression) {
			t.Fatalf("commit of a partition being revoked: %v", err)
		}
		if _, err := a.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		if a2, err := b2.Heartbeat(ctx); err != nil || len(a2.Partitions) != 3 {
			t.Fatalf("b2 after a released: %+v, %v", a2, err)
		}
		if _, err := a.Poll(ctx, moving, parkway.AtCommitted(), 1); !errors.Is(err, parkway.ErrNotAssigned) {
			t.Fatalf("poll of a partition that moved: %v, want ErrNotAssigned", err)
		}
	})
}

func TestGroupInvalidInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		// A join creates its group, as NewConsumer does (the bad-input
		// tour of issue 27 found JoinGroup refusing what NewConsumer
		// accepted).
		if m, err := n.JoinGroup(ctx, tp, "new", parkway.MemberConfig{}); err != nil {
			t.Errorf("join of a new group: %v", err)
		} else if g, err := n.Admin().Group(ctx, tp, "new"); err != nil || len(g.Members) != 1 || g.Members[0].ID != m.ID() {
			t.Errorf("the group a join created: %+v, %v", g, err)
		}
		if _, err := n.JoinGroup(ctx, tp, "", parkway.MemberConfig{}); !errors.Is(err, parkway.ErrInvalidName) {
			t.Errorf("join of group \"\": %v, want ErrInvalidName", err)
		}
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		if err := n.Admin().CreateGroup(ctx, tp, "g"); !errors.Is(err, parkway.ErrGroupExists) {
			t.Errorf("second create: %v", err)
		}
		if err := n.Admin().CreateGroup(ctx, tp, ""); !errors.Is(err, parkway.ErrInvalidName) {
			t.Errorf("empty group name: %v", err)
		}
		for _, d := range []time.Duration{-time.Second, time.Millisecond, 2 * time.Hour} {
			if _, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{SessionTimeout: d}); !errors.Is(err, parkway.ErrInvalidArgument) {
				t.Errorf("session timeout %v: %v, want ErrInvalidArgument", d, err)
			}
		}
		if g, err := n.Admin().Group(ctx, tp, "g"); err != nil || len(g.Members) != 0 || g.Generation != 0 {
			t.Errorf("refused joins changed the group: %+v, %v", g, err)
		}
		for _, cfg := range []parkway.ConsumerConfig{
			{},                        // no group, no name
			{Group: "g", MaxWait: -1}, // negative wait
			{Group: "g", MaxWait: time.Hour},
			{Group: "g", MaxMessages: -1},
			{Group: "g", SessionTimeout: time.Millisecond},
			{Group: "g", Commit: 9},
			{Group: "g", Name: "bad\x00name"}, // JoinGroup's name rule, checked up front
		} {
			if _, err := n.NewConsumer(ctx, tp, cfg); !errors.Is(err, parkway.ErrInvalidArgument) && !errors.Is(err, parkway.ErrInvalidName) {
				t.Errorf("NewConsumer(%+v): %v, want a typed error", cfg, err)
			}
		}
		// Deleting the topic deletes the group.
		if err := n.Admin().DeleteTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Admin().Group(ctx, tp, "g"); !errors.Is(err, parkway.ErrTopicNotFound) {
			t.Errorf("group of a deleted topic: %v", err)
		}
	})
}

// consume ranges over c's messages in a goroutine and records them until
// stop is closed.
type consumed struct {
	mu  sync.Mutex
	got map[string]int
	by  map[string][]uint64
}

func (r *consumed) run(c *parkway.Consumer, ctx context.Context, done chan<- error) {
	for d, err := range c.Messages(ctx) {
		if err != nil {
			done <- err
			return
		}
		r.mu.Lock()
		key := string(d.Payload)
		r.got[key]++
		r.by[key] = append(r.by[key], c.Member().ID())
		r.mu.Unlock()
	}
	done <- nil
}

func (r *consumed) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// The Consumer: three consumers in a group share a topic without a sleep
// or a hand-made assignment; every message is delivered, and one
// consumer leaving (Close commits and leaves) and a new one joining
// moves partitions without losing any.
func TestConsumerGroupSharesATopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx, cancel := context.WithCancel(ctxFor(t))
		defer cancel()
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 12)
		rec := &consumed{got: map[string]int{}, by: map[string][]uint64{}}
		var consumers []*parkway.Consumer
		done := make(chan error, 4)
		for i := range 3 {
			c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "g", Name: fmt.Sprintf("c%d", i), SessionTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			consumers = append(consumers, c)
			go rec.run(c, ctx, done)
		}
		produceAcross(t, n, tp, 12, 10)
		waitFor(t, "120 messages consumed", func() bool { return rec.count() == 120 })
		holders := map[uint32]int{}
		for i, c := range consumers {
			for _, p := range c.Assignment().Partitions {
				holders[p] = i
			}
		}
		if len(holders) != 12 {
			t.Fatalf("partitions held: %v", holders)
		}
		// One leaves; a new one joins; more messages.
		if err := consumers[0].Close(); err != nil {
			t.Fatal(err)
		}
		if err := consumers[0].Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		c3, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "g", Name: "c3", SessionTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c3)
		go rec.run(c3, ctx, done)
		for p := range 12 {
			for i := range 5 {
				mustProduce(t, n, tp, parkway.PartitionID(uint32(p)), fmt.Sprintf("late-p%d-%d", p, i))
			}
		}
		waitFor(t, "180 messages consumed", func() bool { return rec.count() == 180 })
		g, err := n.Admin().Group(ctx, tp, "g")
		if err != nil || len(g.Members) != 3 {
			t.Fatalf("group after leave+join: %+v, %v", g, err)
		}
		// Settle: once every member's commit landed, the group's offsets
		// are at the end of every partition.
		waitFor(t, "offsets committed", func() bool {
			g, _ := n.Admin().Group(ctx, tp, "g")
			for _, p := range g.Partitions {
				if p.Offset != 15 {
					return false
				}
			}
			return true
		})
		for _, c := range consumers[1:] {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		for range 4 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("consumer loop: %v", err)
			}
		}
		if g, _ := n.Admin().Group(ctxFor(t), tp, "g"); len(g.Members) != 0 {
			t.Fatalf("members after every Close: %+v", g.Members)
		}
	})
}

// A named consumer (no group) reads every partition, stores its offsets
// and continues where it stopped after a restart of the consumer.
func TestNamedConsumerResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 3)
		produceAcross(t, n, tp, 3, 4)
		c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Name: "audit"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for d, err := range c.Messages(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(d.Payload))
			if len(got) == 6 {
				break
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c, err = n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Name: "audit"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for d, err := range c.Messages(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(d.Payload))
			if len(got) == 12 {
				break
			}
		}
		slices.Sort(got)
		if len(slices.Compact(got)) != 12 {
			t.Fatalf("named consumer read %v, want each of the 12 messages once", got)
		}
	})
}

// Consumer groups in a cluster: three consumers on three nodes share a
// topic; the metadata leader (node 1, which campaigns first) is cut off
// while a fourth consumer joins — mid-rebalance. The join commits through
// the new leader, node 1's consumer loses its session and its partitions
// move, every message is delivered, and the group's committed offsets, as
// any node sees them, never go backwards. After the partition heals,
// node 1's consumer rejoins by itself.
func TestBehaviour23ClusterGroupThroughMetadataLeaderLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, nodes := threeNodes(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tp := mustTopic(t, nodes[2], mustStream(t, nodes[2], "s"), "t", 6)
		rec := &consumed{got: map[string]int{}, by: map[string][]uint64{}}
		done := make(chan error, 4)
		cfg := func(name string) parkway.ConsumerConfig {
			return parkway.ConsumerConfig{Group: "g", Name: name, SessionTimeout: 3 * time.Second}
		}
		var consumers []*parkway.Consumer
		for _, id := range []transport.NodeID{1, 2, 3} {
			c, err := nodes[id].NewConsumer(ctx, tp, cfg(fmt.Sprintf("on-%d", id)))
			if err != nil {
				t.Fatal(err)
			}
			consumers = append(consumers, c)
			go rec.run(c, ctx, done)
		}
		produceAcross(t, nodes[2], tp, 6, 5)
		waitFor(t, "30 messages consumed", func() bool { return rec.count() == 30 })

		// Offsets as node 3 sees them must never go back.
		high := map[uint32]uint64{}
		checkOffsets := func() {
			g, err := nodes[3].Admin().Group(ctx, tp, "g")
			if err != nil {
				return // a read barrier may fail while the leader is away
			}
			for p, gp := range g.Partitions {
				if gp.Committed && gp.Offset < high[uint32(p)] {
					t.Fatalf("partition %d: committed offset went back %d → %d", p, high[uint32(p)], gp.Offset)
				}
				high[uint32(p)] = max(high[uint32(p)], gp.Offset)
			}
		}
		checkOffsets()

		joined := make(chan *parkway.Consumer, 1)
		go func() {
			c, err := nodes[3].NewConsumer(ctx, tp, cfg("late"))
			if err != nil {
				done <- err
				joined <- nil
				return
			}
			go rec.run(c, ctx, done)
			joined <- c
		}()
		net.Partition([]transport.NodeID{1}, []transport.NodeID{2, 3})
		late := <-joined
		if late == nil {
			t.Fatal("join during the metadata leader's loss failed")
		}
		consumers = append(consumers, late)
		for p := range 6 {
			for i := range 3 {
				mustProduce(t, nodes[2], tp, parkway.PartitionID(uint32(p)), fmt.Sprintf("cut-p%d-%d", p, i))
				checkOffsets()
			}
		}
		waitFor(t, "48 messages consumed with node 1 cut off", func() bool { checkOffsets(); return rec.count() == 48 })
		waitFor(t, "node 1's consumer expired", func() bool {
			g, err := nodes[2].Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 3
		})
		net.Heal()
		waitFor(t, "node 1's consumer back in the group", func() bool {
			checkOffsets()
			g, err := nodes[2].Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 4
		})
		for _, c := range consumers {
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		checkOffsets()
		cancel()
		for range 4 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("consumer loop: %v", err)
			}
		}
	})
}

// The read side's metrics: messages and bytes produced and polled per
// topic, waiting polls timed, and a Consumer's lag per partition.
func TestConsumerMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		reg := registry(t, n)
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		produceAcross(t, n, tp, 2, 10)
		topic := []string{"stream", tp.Stream.Name, "topic", tp.Name}
		if got := metricValue(t, reg, "parkway_produced_messages_total", topic...); got != 20 {
			t.Fatalf("produced messages %v, want 20", got)
		}
		if got := metricValue(t, reg, "parkway_produced_bytes_total", topic...); got <= 20 {
			t.Fatalf("produced bytes %v", got)
		}
		// A consumer reads 4 messages of partition 0 in its first batch:
		// its lag there is 6 once it polled.
		c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Name: "audit", MaxMessages: 4, Commit: parkway.CommitManual})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		read := 0
		for _, err := range c.Messages(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if read++; read == 20 {
				break
			}
		}
		if got := metricValue(t, reg, "parkway_polled_messages_total", topic...); got < 20 {
			t.Fatalf("polled messages %v, want at least 20", got)
		}
		waitFor(t, "lag 0 on both partitions", func() bool {
			return metricValue(t, reg, "parkway_consumer_lag_messages", "consumer", "audit") == 0
		})
		mustProduce(t, n, tp, parkway.PartitionID(0), "more")
		waitFor(t, "lag after one more message", func() bool {
			// The waiting poll returns the new message at once: lag is
			// measured at the poll, after the message.
			return metricValue(t, reg, "parkway_polled_messages_total", topic...) >= 21
		})
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		waits, lagSeries := uint64(0), 0
		for _, f := range families {
			switch f.GetName() {
			case "parkway_poll_wait_seconds":
				for _, m := range f.GetMetric() {
					waits += m.GetHistogram().GetSampleCount()
				}
			case "parkway_consumer_lag_messages":
				lagSeries += len(f.GetMetric())
			}
		}
		if lagSeries != 2 {
			t.Fatalf("%d lag series, want one per partition (2)", lagSeries)
		}
		if waits == 0 {
			t.Fatal("no waiting poll observed in parkway_poll_wait_seconds")
		}
	})
}

// A consumer's iteration ends with a typed error when its topic is
// deleted: a group member's and a named consumer's alike.
func TestConsumerEndsWhenTopicDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		for _, cfg := range []parkway.ConsumerConfig{{Group: "g"}, {Name: "audit"}} {
			c, err := n.NewConsumer(ctx, tp, cfg)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				for _, err := range c.Messages(ctx) {
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			synctest.Wait()
			if err := n.Admin().DeleteTopic(ctx, tp); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, parkway.ErrTopicNotFound) {
				t.Fatalf("%+v: iteration ended with %v, want ErrTopicNotFound", cfg, err)
			}
			_ = c.Close() // leaving a deleted topic's group fails; Close still stops
			tp = mustTopic(t, n, mustStream(t, n, fmt.Sprintf("s-%s", cfg.Name)), "t", 2)
		}
	})
}

// Breaking out of Messages and ranging again continues where the loop
// stopped, the rest of a half-delivered batch included.
func TestConsumerMessagesResumesAfterBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 1)
		produceAcross(t, n, tp, 1, 10)
		c, err := n.NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "g", MaxMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var offsets []uint64
		for round := 0; len(offsets) < 10; round++ {
			if round > 5 {
				t.Fatalf("offsets after 5 rounds: %v", offsets)
			}
			for d, err := range c.Messages(ctx) {
				if err != nil {
					t.Fatalf("after %v: %v", offsets, err)
				}
				offsets = append(offsets, d.Offset)
				if len(offsets)%3 == 0 || len(offsets) == 10 {
					break
				}
			}
		}
		for i, off := range offsets {
			if off != uint64(i) {
				t.Fatalf("offsets %v: a break lost or repeated messages", offsets)
			}
		}
	})
}

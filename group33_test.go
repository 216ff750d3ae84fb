package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// committedWatch checks behaviour 33 at every delivery: a message handed
// to an application must not be below the group's committed offset (the
// next offset to read) as the cluster has it at that moment, read with a
// linearizable Admin.Group on a node that is never cut off.
type committedWatch struct {
	n     *parkway.Node
	tp    parkway.Topic
	group string

	mu         sync.Mutex
	delivered  map[string]int // per consumer
	violations []string
}

func (w *committedWatch) run(ctx context.Context, name string, c *parkway.Consumer, done chan<- error) {
	for d, err := range c.Messages(ctx) {
		if err != nil {
			done <- err
			return
		}
		g, gerr := w.n.Admin().Group(ctx, w.tp, w.group)
		w.mu.Lock()
		w.delivered[name]++
		if gerr == nil {
			if gp := g.Partitions[d.Partition]; gp.Committed && d.Offset < gp.Offset {
				w.violations = append(w.violations, fmt.Sprintf("%s got partition %d offset %d, group committed %d (generation %d)",
					name, d.Partition, d.Offset, gp.Offset, g.Generation))
			}
		}
		w.mu.Unlock()
	}
	done <- nil
}

func (w *committedWatch) count(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.delivered[name]
}

// Behaviour 33: a group of 3 over 12 partitions on 3 nodes, a 3 s session
// timeout, a message every 2 ms. One member's node is cut off; its
// session lapses, its partitions move to the two others, who commit; the
// network heals, and the cut member's waiting polls — issued before the
// cut and retried in place since — are answered with messages the group
// has committed meanwhile. Its Consumer must not hand them to the
// application: its lease lapsed, so the answer is refused when it
// arrives. No delivery anywhere is below the group's committed offset.
func TestBehaviour33ExpiredMemberDeliversNoCommittedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		for _, id := range peers {
			// A request timeout longer than the cut, so a poll made
			// before it is still retried in place when it heals.
			nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 10 * time.Second,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tp := mustTopic(t, nodes[2], mustStream(t, nodes[2], "s"), "t", 12)
		w := &committedWatch{n: nodes[3], tp: tp, group: "g", delivered: map[string]int{}}

		// The producer: one message every 2 ms, round robin, from node 3.
		pctx, stopProducing := context.WithCancel(ctx)
		var producers sync.WaitGroup
		for p := range 12 {
			producers.Go(func() {
				tick := time.NewTicker(24 * time.Millisecond)
				defer tick.Stop()
				time.Sleep(time.Duration(p) * 2 * time.Millisecond)
				for i := 0; ; i++ {
					select {
					case <-pctx.Done():
						return
					case <-tick.C:
					}
					c, cancel := context.WithTimeout(pctx, 2*time.Second)
					_, _ = nodes[3].Produce(c, tp, parkway.PartitionID(uint32(p)), parkway.Message{Payload: fmt.Appendf(nil, "p%d-%d", p, i)})
					cancel()
				}
			})
		}

		done := make(chan error, 3)
		consumers := map[transport.NodeID]*parkway.Consumer{}
		for _, id := range peers {
			c, err := nodes[id].NewConsumer(ctx, tp, parkway.ConsumerConfig{Group: "g", Name: fmt.Sprintf("on-%d", id),
				SessionTimeout: 3 * time.Second, Commit: parkway.CommitAfterBatch})
			if err != nil {
				t.Fatal(err)
			}
			consumers[id] = c
			go w.run(ctx, fmt.Sprintf("on-%d", id), c, done)
		}
		waitFor(t, "every consumer delivering", func() bool {
			return w.count("on-1") > 20 && w.count("on-2") > 20 && w.count("on-3") > 20
		})
		cut := consumers[1].Member().Assignment().Partitions
		net.Partition([]transport.NodeID{1}, []transport.NodeID{2, 3})
		before := map[int]uint64{}
		if g, err := nodes[2].Admin().Group(ctx, tp, "g"); err == nil {
			for _, p := range cut {
				before[int(p)] = g.Partitions[p].Offset
			}
		}
		waitFor(t, "the cut member's partitions moved and committed past where they were", func() bool {
			g, err := nodes[2].Admin().Group(ctx, tp, "g")
			if err != nil || len(g.Members) != 2 {
				return false
			}
			for _, p := range cut {
				if gp := g.Partitions[p]; gp.Holder == consumers[1].Member().ID() || gp.Offset <= before[int(p)]+10 {
					return false
				}
			}
			return true
		})
		cutDelivered := w.count("on-1")
		net.Heal()
		waitFor(t, "the cut consumer back in the group", func() bool {
			g, err := nodes[2].Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 3
		})
		waitFor(t, "the cut consumer delivering again", func() bool { return w.count("on-1") > cutDelivered+20 })
		stopProducing()
		producers.Wait()
		for _, c := range consumers {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		cancel()
		for range 3 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("consumer loop: %v", err)
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.violations) > 0 {
			t.Fatalf("%d deliveries below the group's committed offset, first: %v", len(w.violations), w.violations[:min(5, len(w.violations))])
		}
		t.Logf("delivered %v", w.delivered)
	})
}

// A group commit past a partition's end is refused with
// ErrOffsetOutOfRange, as StoreOffset refuses it: accepted, it wedged the
// group (nothing to read there, every later commit a regression).
func TestGroupCommitPastEndRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		if err := n.Admin().CreateGroup(ctx, tp, "g"); err != nil {
			t.Fatal(err)
		}
		m, err := n.JoinGroup(ctx, tp, "g", parkway.MemberConfig{})
		if err != nil {
			t.Fatal(err)
		}
		produceAcross(t, n, tp, 2, 3)
		for _, off := range []uint64{4, 1 << 63, ^uint64(0)} {
			if err := m.Commit(ctx, map[uint32]uint64{0: 1, 1: off}); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
				t.Fatalf("commit of offset %d past the end 3: %v, want ErrOffsetOutOfRange", off, err)
			}
		}
		if err := n.Admin().StoreOffset(ctx, tp, 1, "c", ^uint64(0)); !errors.Is(err, parkway.ErrOffsetOutOfRange) {
			t.Fatalf("StoreOffset past the end: %v, want ErrOffsetOutOfRange", err)
		}
		// All or none: partition 0's offset was not committed either.
		if g, _ := n.Admin().Group(ctx, tp, "g"); g.Partitions[0].Committed || g.Partitions[1].Committed {
			t.Fatalf("a refused commit left offsets: %+v", g.Partitions)
		}
		// The end itself is a valid position (nothing left to read).
		if err := m.Commit(ctx, map[uint32]uint64{0: 1, 1: 3}); err != nil {
			t.Fatal(err)
		}
		mustProduce(t, n, tp, parkway.PartitionID(1), "more")
		b, err := m.Poll(ctx, 1, parkway.AtCommitted(), 10)
		if err != nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "more" {
			t.Fatalf("poll after committing the end: %v, %v", payloads(b.Messages), err)
		}
		if err := m.Commit(ctx, map[uint32]uint64{1: 4}); err != nil {
			t.Fatal(err)
		}
	})
}

// Behaviour 33's processing bound: a member whose application does not
// ask for its next message within MaxPollInterval commits what it
// handled and leaves the group, so its partitions move to a member that
// makes progress (heartbeats alone kept them with the stuck loop); when
// the loop asks again, the consumer joins again.
func TestBehaviour33StuckLoopLeavesAfterMaxPollInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 4)
		produceAcross(t, n, tp, 4, 4)
		cfg := parkway.ConsumerConfig{Group: "g", SessionTimeout: 3 * time.Second, MaxPollInterval: 10 * time.Second,
			CommitInterval: time.Hour}
		stuck, err := n.NewConsumer(ctx, tp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Close()
		// The stuck loop handles two messages and hangs in the third.
		release := make(chan struct{})
		type pos struct {
			part uint32
			next uint64
		}
		handled := make(chan pos, 1)
		var hung time.Time
		loopDone := make(chan int)
		go func() {
			i := 0
			for d, err := range stuck.Messages(ctx) {
				if err != nil {
					break
				}
				i++
				if i == 3 {
					hung = time.Now()
					handled <- pos{d.Partition, d.Offset}
					<-release
				}
			}
			loopDone <- i
		}()
		h := <-handled
		// The group's other member, which makes progress.
		rec := &consumed{got: map[string]int{}, by: map[string][]uint64{}}
		other, err := n.NewConsumer(ctx, tp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		done := make(chan error, 1)
		go rec.run(other, ctx, done)
		// Heartbeats keep the stuck member in the group until the bound.
		time.Sleep(9 * time.Second)
		if g, _ := n.Admin().Group(ctx, tp, "g"); len(g.Members) != 2 {
			t.Fatalf("members before the bound: %+v", g.Members)
		}
		waitFor(t, "the stuck member leaving", func() bool {
			g, err := n.Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 1
		})
		if d := time.Since(hung); d < 10*time.Second || d > 11*time.Second {
			t.Fatalf("left %v after the loop hung, want just past MaxPollInterval (10 s)", d)
		}
		// It committed what it handled: the two messages before the one
		// it hangs in (the third is not handled: redelivered).
		g, _ := n.Admin().Group(ctx, tp, "g")
		if gp := g.Partitions[h.part]; !gp.Committed || gp.Offset != h.next {
			t.Fatalf("partition %d committed %+v, want %d (the handled positions)", h.part, gp, h.next)
		}
		waitFor(t, "the other member holding every partition", func() bool { return len(other.Assignment().Partitions) == 4 })
		waitFor(t, "the other member reading what the stuck one did not handle", func() bool { return rec.count() == 16-2 })
		// The loop comes back: the consumer joins again.
		close(release)
		waitFor(t, "the stuck consumer back in the group", func() bool {
			g, err := n.Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 2 && len(stuck.Assignment().Partitions) == 2
		})
		cancel()
		<-loopDone
		<-done
	})
}

// NewConsumer's context bounds the consumer: when it is cancelled, the
// consumer commits what was handled and leaves its group at once (not a
// session timeout later), without a Close; the iterator yields the
// context's error.
func TestConsumerContextEndsMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		produceAcross(t, n, tp, 2, 3)
		life, end := context.WithCancel(context.Background())
		defer end()
		c, err := n.NewConsumer(life, tp, parkway.ConsumerConfig{Group: "g", SessionTimeout: 3 * time.Second, CommitInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint32]uint64{}
		var last error
		handled := 0
		for d, err := range c.Messages(context.Background()) {
			if err != nil {
				last = err
				break
			}
			if handled == 2 {
				end() // the two before this one were handled
				continue
			}
			got[d.Partition] = d.Offset + 1
			handled++
		}
		if !errors.Is(last, context.Canceled) {
			t.Fatalf("iterator ended with %v, want context.Canceled", last)
		}
		ctx := ctxFor(t)
		waitFor(t, "the member gone", func() bool {
			g, err := n.Admin().Group(ctx, tp, "g")
			return err == nil && len(g.Members) == 0
		})
		g, _ := n.Admin().Group(ctx, tp, "g")
		for p, next := range got {
			if gp := g.Partitions[p]; !gp.Committed || gp.Offset < next {
				t.Errorf("partition %d committed %+v, want at least %d", p, gp, next)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close after the context ended: %v", err)
		}
	})
}

// Behaviour 33 through a live rebalance, with the rebalance callbacks: a
// second consumer joins while the first is in the middle of a message of
// a partition that moves. The partition does not move until the first
// consumer's application has finished that message, OnRevoked has run
// and its handled positions are committed; only then is the second
// consumer's OnAssigned called, and it starts after what the first
// handled — no message is delivered twice, none is lost.
func TestBehaviour33RevokedBeforeMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 4)
		produceAcross(t, n, tp, 4, 4)
		var mu sync.Mutex
		var events []string
		note := func(format string, args ...any) {
			mu.Lock()
			events = append(events, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		cfg := func(name string) parkway.ConsumerConfig {
			return parkway.ConsumerConfig{Group: "g", Name: name, SessionTimeout: 3 * time.Second, CommitInterval: time.Hour,
				OnAssigned: func(_ context.Context, ps []uint32) { note("%s assigned %v", name, ps) },
				OnRevoked:  func(_ context.Context, ps []uint32) { note("%s revoked %v", name, ps) },
			}
		}
		first, err := n.NewConsumer(ctx, tp, cfg("first"))
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		seen := map[string]string{} // payload → consumer
		dup := []string{}
		deliver := func(name, payload string) {
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := seen[payload]; ok {
				dup = append(dup, fmt.Sprintf("%s by %s and %s", payload, prev, name))
			}
			seen[payload] = name
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(seen)
		}
		// The first consumer hangs in the 9th message until released.
		hold := make(chan struct{})
		holding := make(chan uint32, 1)
		go func() {
			i := 0
			for d, err := range first.Messages(ctx) {
				if err != nil {
					return
				}
				deliver("first", string(d.Payload))
				if i++; i == 9 {
					holding <- d.Partition
					<-hold
				}
			}
		}()
		held := <-holding
		second, err := n.NewConsumer(ctx, tp, cfg("second"))
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		go func() {
			for d, err := range second.Messages(ctx) {
				if err != nil {
					return
				}
				deliver("second", string(d.Payload))
			}
		}()
		// Heartbeats go on; the partitions the first consumer is not in
		// the middle of could move, the one it is in must not.
		time.Sleep(5 * time.Second)
		if slices.Contains(second.Assignment().Partitions, held) {
			t.Fatalf("partition %d moved while the first consumer's application was handling a message of it", held)
		}
		close(hold)
		waitFor(t, "the second consumer holding two partitions", func() bool { return len(second.Assignment().Partitions) == 2 })
		waitFor(t, "every message delivered", func() bool { return count() == 16 })
		for p := range 4 {
			for i := range 2 {
				mustProduce(t, n, tp, parkway.PartitionID(uint32(p)), fmt.Sprintf("late-p%d-%d", p, i))
			}
		}
		for i := 0; count() != 24; i++ {
			if i == 1000 {
				g, _ := n.Admin().Group(ctx, tp, "g")
				mu.Lock()
				t.Fatalf("new messages: %d delivered; first %+v second %+v; group %+v; events %q; seen %v", len(seen), first.Assignment(), second.Assignment(), g, events, seen)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(dup) > 0 {
			t.Fatalf("delivered twice: %v", dup)
		}
		// The order: the first consumer's revocation before the second's
		// assignment of the same partitions.
		revoked, assigned := slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, "first revoked") }),
			slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, "second assigned") })
		if revoked < 0 || assigned < 0 || revoked > assigned || events[revoked][len("first revoked"):] != events[assigned][len("second assigned"):] {
			t.Fatalf("callbacks: %q; want the first consumer's revocation, then the same partitions assigned to the second", events)
		}
	})
}

// A live rebalance is followed as the node applies it, not at the next
// heartbeat: with a 30 s session timeout (a heartbeat every 10 s), a
// second consumer's join has the first release half of its partitions
// and the second read them within a second.
func TestConsumersFollowALiveRebalanceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 4)
		cfg := parkway.ConsumerConfig{Group: "g", SessionTimeout: 30 * time.Second}
		first, err := n.NewConsumer(ctx, tp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		time.Sleep(time.Second) // between heartbeats
		second, err := n.NewConsumer(ctx, tp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		joined := time.Now()
		for len(second.Assignment().Partitions) != 2 || len(first.Assignment().Partitions) != 2 {
			if time.Since(joined) > time.Second {
				t.Fatalf("a second after the join: first holds %+v, second %+v", first.Assignment(), second.Assignment())
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

package parkway_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/transport"
)

// A member's node keeps its session alive by itself: thirty members that
// joined through a node that does not lead the metadata, whose
// application then calls nothing, stay in the group for four session
// timeouts (without the node keeping them, they expire after one), and
// the node sends the metadata leader one message of renewals per round
// for all of them (a third of the session: twelve rounds), not one per
// member.
func TestGroupMembersAreKeptAliveByTheirNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		t.Cleanup(func() { _ = net.Close() })
		peers := []transport.NodeID{1, 2, 3}
		nodes := map[transport.NodeID]*parkway.Node{}
		sent := map[transport.NodeID]*atomic.Int64{}
		for _, id := range peers {
			sent[id] = new(atomic.Int64)
			nodes[id] = open(t, parkway.Config{Shards: 2, RequestTimeout: 5 * time.Second,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: leaseCountingBus{Bus: net.Endpoint(id), leases: sent[id]}}})
		}
		ctx := ctxFor(t)
		tp := mustTopic(t, nodes[1], mustStream(t, nodes[1], "s"), "t", 6)
		st, err := nodes[1].Cluster().State(ctx)
		if err != nil || st.MetadataLeader == 0 {
			t.Fatalf("metadata leader %v (%v)", st.MetadataLeader, err)
		}
		homeID := transport.NodeID(1 + st.MetadataLeader%3) // another node
		home := nodes[homeID]
		const session = 3 * time.Second
		var ms []*parkway.Member
		for i := range 30 {
			m, err := home.JoinGroup(ctx, tp, "g", parkway.MemberConfig{Name: fmt.Sprintf("m%d", i), SessionTimeout: session})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		gen := settleMembers(t, ms...)
		synctest.Wait()
		before := sent[homeID].Load()
		time.Sleep(4 * session) // the application calls nothing
		synctest.Wait()
		rounds := sent[homeID].Load() - before
		if rounds < 10 || rounds > 14 {
			t.Errorf("the node sent %d lease messages for thirty idle members over four session timeouts, want one per round (12)", rounds)
		}
		g, err := nodes[st.MetadataLeader].Admin().Group(ctx, tp, "g")
		if err != nil || len(g.Members) != 30 || g.Generation != gen {
			t.Fatalf("group after four idle session timeouts: %d members, generation %d (want 30, %d), %v", len(g.Members), g.Generation, gen, err)
		}
		// The lease the member's node holds for it is the one its fence
		// checks: its polls pass.
		for _, m := range ms {
			for _, p := range m.Assignment().Partitions {
				if _, err := m.Poll(ctx, p, parkway.AtCommitted(), 1); err != nil {
					t.Fatalf("member %d, kept by its node, polls partition %d: %v", m.ID(), p, err)
				}
			}
		}
	})
}

// The node keeps a member only while its application shows it is alive
// (MaxPollInterval): a member whose application stopped calling is
// expired a session timeout after the bound, while one whose
// application waits in a Poll all along is kept past it.
func TestGroupMemberNotKeptPastMaxPollInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		ctx := ctxFor(t)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 2)
		cfg := parkway.MemberConfig{SessionTimeout: 3 * time.Second, MaxPollInterval: 10 * time.Second}
		stuck, err := n.JoinGroup(ctx, tp, "g", cfg)
		if err != nil {
			t.Fatal(err)
		}
		waiting, err := n.JoinGroup(ctx, tp, "g", cfg)
		if err != nil {
			t.Fatal(err)
		}
		settleMembers(t, stuck, waiting)
		part := waiting.Assignment().Partitions[0]
		pctx, stop := context.WithCancel(ctx)
		polled := make(chan error, 1)
		go func() {
			var err error
			for pctx.Err() == nil && err == nil {
				_, err = waiting.Poll(pctx, part, parkway.AtCommitted(), 1, parkway.WaitFor(parkway.MaxPollWait))
			}
			polled <- err
		}()
		// Within the bound both are kept.
		time.Sleep(9 * time.Second)
		if g, err := n.Admin().Group(ctx, tp, "g"); err != nil || len(g.Members) != 2 {
			t.Fatalf("within MaxPollInterval: %d members, %v", len(g.Members), err)
		}
		// Past it and a session more (a round may come just before the
		// bound), the stuck member is gone, the waiting one stays.
		time.Sleep(1*time.Second + 3*time.Second + 2*time.Second)
		g, err := n.Admin().Group(ctx, tp, "g")
		if err != nil || len(g.Members) != 1 || g.Members[0].ID != waiting.ID() {
			t.Fatalf("past MaxPollInterval: members %+v, %v; want only %d", g.Members, err, waiting.ID())
		}
		if _, err := stuck.Heartbeat(ctx); err == nil {
			t.Fatal("the stuck member's late heartbeat was accepted")
		}
		stop()
		if err := <-polled; err != nil && pctx.Err() == nil {
			t.Fatalf("the waiting member's poll: %v", err)
		}
	})
}

// An idle Consumer re-polls each partition once per MaxPollWait (its
// default MaxWait), not every 5 s: over two minutes, one Consumer of six
// idle partitions answers at most 6 × 5 waiting polls (6 × 24 at 5 s).
// The node keeps its member in the group meanwhile (it never rejoins).
func TestIdleConsumerRepollsOncePerMaxPollWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2})
		reg := registry(t, n)
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 6)
		// The consumer's life outlasts ctxFor's bound.
		life, end := context.WithCancel(context.Background())
		defer end()
		c, err := n.NewConsumer(life, tp, parkway.ConsumerConfig{Group: "g", SessionTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lctx, stop := context.WithCancel(life)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, err := range c.Messages(lctx) {
				if err != nil {
					return
				}
			}
		}()
		synctest.Wait()
		member := c.Member().ID()
		before := metricValue(t, reg, "parkway_poll_wait_seconds")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if polls := metricValue(t, reg, "parkway_poll_wait_seconds") - before; polls > 6*5 {
			t.Errorf("six idle partitions answered %v waiting polls in two minutes, want at most 30", polls)
		}
		g, err := n.Admin().Group(ctxFor(t), tp, "g")
		if err != nil || len(g.Members) != 1 || g.Members[0].ID != member {
			t.Fatalf("after two idle minutes: members %+v, %v; want the first member %d, never expired", g.Members, err, member)
		}
		stop()
		<-done
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// countingClock counts the timers armed on it (NewTimer and Reset).
type countingClock struct {
	clock.Real
	armed *atomic.Int64
}

func (c countingClock) NewTimer(d time.Duration) clock.Timer {
	c.armed.Add(1)
	return countingTimer{c.Real.NewTimer(d), c.armed}
}

type countingTimer struct {
	clock.Timer
	armed *atomic.Int64
}

func (t countingTimer) Reset(d time.Duration) {
	t.armed.Add(1)
	t.Timer.Reset(d)
}

// Idle Consumers arm no timer of their own: their node keeps their
// sessions with one round for all (a Consumer used to heartbeat on its
// own timer every third of its session timeout: 30 Consumers, 1,080
// timers in two minutes), so what thirty idle Consumers arm in two
// minutes beyond what the idle node arms is their partitions' waiting
// polls (4 per partition) and the node's lease rounds: well under six
// per Consumer.
func TestIdleConsumersArmNoTimerEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		armed := new(atomic.Int64)
		n := open(t, parkway.Config{Shards: 2, Clock: countingClock{armed: armed}})
		tp := mustTopic(t, n, mustStream(t, n, "s"), "t", 30)
		// What the node arms by itself over two idle minutes.
		idle := func() int64 {
			time.Sleep(10 * time.Second) // settle
			synctest.Wait()
			before := armed.Load()
			time.Sleep(2 * time.Minute)
			synctest.Wait()
			return armed.Load() - before
		}
		base := idle()
		life, end := context.WithCancel(context.Background())
		defer end()
		var cs []*parkway.Consumer
		for i := range 30 {
			c, err := n.NewConsumer(life, tp, parkway.ConsumerConfig{Group: "g", Name: fmt.Sprintf("c%d", i),
				SessionTimeout: 3 * time.Second, MaxWait: parkway.MaxPollWait})
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			go func() {
				for _, err := range c.Messages(life) {
					if err != nil {
						return
					}
				}
			}()
		}
		if got := idle() - base; got > 6*30 {
			t.Errorf("thirty idle Consumers armed %d timers in two minutes (beyond the node's own %d), want at most 180", got, base)
		} else {
			t.Logf("thirty idle Consumers armed %d timers in two minutes (beyond the node's own %d)", got, base)
		}
		g, err := n.Admin().Group(ctxFor(t), tp, "g")
		if err != nil || len(g.Members) != 30 {
			t.Fatalf("after two idle minutes: %d members, %v", len(g.Members), err)
		}
		for _, c := range cs {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

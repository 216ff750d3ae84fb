package host_test

import (
	"testing"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// quietCluster is three manual cluster engines (raft state in memory)
// over a manually delivered network, driven by the test on a manual
// clock. A paused node is neither ticked nor delivered to, as a process
// that stopped running: what is sent to it is lost.
type quietCluster struct {
	t       *testing.T
	clk     *clock.Manual
	net     *transport.Network
	peers   []transport.NodeID
	engines []*host.Engine
	paused  []bool
	// sent counts the messages delivered (or lost to a paused node), by
	// kind.
	sent map[uint8]int
}

func newQuietCluster(t *testing.T) *quietCluster {
	c := &quietCluster{t: t, clk: clock.NewManual(t0), peers: []transport.NodeID{1, 2, 3},
		paused: make([]bool, 3), sent: make(map[uint8]int)}
	c.net = transport.NewNetwork(transport.NetworkOptions{Clock: c.clk, ManualDelivery: true})
	t.Cleanup(func() { c.net.Close() })
	for _, id := range c.peers {
		e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: c.clk,
			Cluster: &host.Cluster{ID: id, Peers: c.peers, Bus: c.net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		c.engines = append(c.engines, e)
	}
	c.pump()
	return c
}

// pump delivers messages and handles the members until nothing moves.
func (c *quietCluster) pump() {
	c.t.Helper()
	for range 500 {
		moved := false
		for i, e := range c.engines {
			if !c.paused[i] {
				if err := e.HandleMetadata(); err != nil {
					c.t.Fatalf("node %d: %v", i+1, err)
				}
			}
			ep := c.net.Endpoint(c.peers[i])
			for len(ep.Recv()) > 0 {
				m := <-ep.Recv()
				c.sent[m.Kind]++
				moved = true
				if c.paused[i] {
					continue
				}
				if err := e.Deliver(m); err != nil {
					c.t.Fatalf("node %d: deliver: %v", i+1, err)
				}
			}
		}
		if !moved {
			return
		}
	}
	c.t.Fatal("the cluster did not settle")
}

// tick advances the clock by n raft ticks, ticking every member that is
// not paused and delivering everything after each tick.
func (c *quietCluster) tick(n int) {
	c.t.Helper()
	for range n {
		c.clk.Advance(shard.DefaultTickInterval)
		for i, e := range c.engines {
			if c.paused[i] {
				continue
			}
			if err := e.TickMetadata(); err != nil {
				c.t.Fatalf("node %d: tick: %v", i+1, err)
			}
		}
		c.pump()
	}
}

// quiesced reports whether every member that runs is quiesced.
func (c *quietCluster) quiesced() bool {
	for i, e := range c.engines {
		if !c.paused[i] && !e.MetadataQuiesced() {
			return false
		}
	}
	return true
}

// settle ticks until every running member is quiesced, at most max
// ticks.
func (c *quietCluster) settle(max int) {
	c.t.Helper()
	for range max {
		if c.quiesced() {
			return
		}
		c.tick(1)
	}
	if !c.quiesced() {
		for i, e := range c.engines {
			c.t.Logf("node %d: quiesced %v, %+v", i+1, e.MetadataQuiesced(), e.MetadataStatus())
		}
		c.t.Fatalf("the metadata group did not quiesce within %d ticks", max)
	}
}

// propose proposes cmd through node i and delivers until it is answered,
// without ticking anyone: a quiesced group must commit on the proposal
// alone.
func (c *quietCluster) propose(i int, cmd metadata.Command) {
	c.t.Helper()
	e := c.engines[i]
	ch, err := e.ProposeMetadata(e.NewMetadataKey(), cmd)
	if err != nil {
		c.t.Fatalf("node %d: propose %+v: %v", i+1, cmd, err)
	}
	c.pump()
	select {
	case r := <-ch:
		if r.Err != nil {
			c.t.Fatalf("node %d: %+v: %v", i+1, cmd, r.Err)
		}
	default:
		c.t.Fatalf("node %d: %+v not committed without a tick", i+1, cmd)
	}
}

// An idle metadata group quiesces on every member, and then sends no
// raft message at all however long the cluster runs; node liveness goes
// on, one heartbeat per node pair per interval. The leader stays.
func TestQuiescedMetadataGroupSendsNothing(t *testing.T) {
	c := newQuietCluster(t)
	c.settle(20)
	clear(c.sent)
	const ticks = 500 // 5 s
	c.tick(ticks)
	if n := c.sent[host.KindMetaRaft]; n != 0 {
		t.Fatalf("%d metadata raft messages in %d ticks of a quiesced group", n, ticks)
	}
	// Each of the 6 ordered pairs, once per 10 ticks.
	if n := c.sent[host.KindLiveness]; n < 6*ticks/10 {
		t.Fatalf("%d liveness heartbeats in %d ticks, want at least %d", n, ticks, 6*ticks/10)
	}
	for i, e := range c.engines {
		if !e.MetadataQuiesced() {
			t.Errorf("node %d woke with nothing to do", i+1)
		}
		if lead := e.MetadataStatus().Leader; lead != 1 {
			t.Errorf("node %d: leader %d, want 1", i+1, lead)
		}
	}
}

// A proposal wakes a quiesced group, through the leader or a follower,
// and commits without waiting for a tick; the group then quiesces again
// with every member holding the command.
func TestMetadataProposalAfterQuiescenceCommits(t *testing.T) {
	c := newQuietCluster(t)
	c.settle(20)
	c.propose(0, metadata.CreateStream{Name: "a"}) // the leader
	c.settle(20)
	c.propose(2, metadata.CreateStream{Name: "b"}) // a follower, forwarded
	c.settle(20)
	for i, e := range c.engines {
		if got := streamNames(e); got != "[a b]" {
			t.Errorf("node %d holds streams %s, want [a b]", i+1, got)
		}
	}
	clear(c.sent)
	c.tick(100)
	if n := c.sent[host.KindMetaRaft]; n != 0 {
		t.Fatalf("%d metadata raft messages after the group quiesced again", n)
	}
}

// When the quiesced group's leader dies, node liveness reports it and a
// survivor campaigns at once, elected within a few ticks of the liveness
// timeout (no member ticks an election timer while quiesced); the new leader commits, and the group
// quiesces again without waiting for the dead node.
func TestMetadataLeaderDeathElectsAfterQuiescence(t *testing.T) {
	c := newQuietCluster(t)
	c.settle(20)
	c.paused[0] = true // node 1, the leader, stops
	// Liveness declares a peer dead after 5 intervals of 10 ticks without a
	// message; the chosen survivor campaigns at once, so the election is
	// over within a few ticks of that (the woken members' election timers,
	// the fallback, would take at least 10 more).
	elected := c.electAfterLeaderStops(50 + 5)
	t.Logf("new leader %d ticks after the leader stopped", elected)
	c.propose(2, metadata.CreateStream{Name: "a"})
	c.settle(20)
	for i, e := range c.engines[1:] {
		if got := streamNames(e); got != "[a]" {
			t.Errorf("node %d holds streams %s, want [a]", i+2, got)
		}
	}
}

// electAfterLeaderStops ticks until nodes 2 and 3 agree on a leader among
// them (node 1, the leader, stopped), at most within ticks, and returns
// how many it took.
func (c *quietCluster) electAfterLeaderStops(within int) int {
	c.t.Helper()
	for tick := 1; tick <= within; tick++ {
		c.tick(1)
		l2, l3 := c.engines[1].MetadataStatus().Leader, c.engines[2].MetadataStatus().Leader
		if l2 == l3 && (l2 == 2 || l2 == 3) {
			return tick
		}
	}
	c.t.Fatalf("no new leader %d ticks after the leader stopped: node 2 sees %d, node 3 sees %d", within,
		c.engines[1].MetadataStatus().Leader, c.engines[2].MetadataStatus().Leader)
	return 0
}

// A follower that was away while the group committed catches up when it
// returns: the quiesced leader wakes when liveness reports the follower
// alive again (the returning follower, quiesced when it stopped, would
// otherwise never hear of the commit).
func TestMetadataLeaderWakesForReturningFollower(t *testing.T) {
	c := newQuietCluster(t)
	c.settle(20)
	c.paused[2] = true // node 3 stops, quiesced
	c.tick(100)        // past the liveness timeout: node 3 is dead to the others
	c.propose(1, metadata.CreateStream{Name: "a"})
	c.settle(20)
	if got := streamNames(c.engines[2]); got != "[]" {
		t.Fatalf("node 3 holds streams %s while stopped", got)
	}
	c.paused[2] = false
	for range 100 {
		c.tick(1)
		if streamNames(c.engines[2]) == "[a]" {
			break
		}
	}
	if got := streamNames(c.engines[2]); got != "[a]" {
		t.Fatalf("node 3 holds streams %s after it returned, want [a]", got)
	}
	c.settle(20)
}

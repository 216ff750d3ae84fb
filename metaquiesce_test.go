package parkway_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/transport"
)

// settleMetaQuiet waits (virtual time) until a whole second passes with
// no metadata raft message on the network.
func (c *quietCluster) settleMetaQuiet(t *testing.T) {
	t.Helper()
	for range 30 {
		c.reset()
		time.Sleep(time.Second)
		if c.count(host.KindMetaRaft) == 0 {
			return
		}
	}
	t.Fatalf("the metadata group never went quiet: %d metadata raft messages in the last second", c.count(host.KindMetaRaft))
}

// The metadata group of an idle started cluster quiesces: a second of
// ticks puts no metadata raft message on the network. A command through a
// follower wakes it and commits, and it goes quiet again.
func TestClusterIdleMetadataQuiesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openQuietCluster(t)
		s := mustStream(t, c.nodes[1], "s")
		c.settleMetaQuiet(t)
		c.reset()
		time.Sleep(time.Second)
		if n := c.count(host.KindMetaRaft); n != 0 {
			t.Fatalf("%d metadata raft messages in an idle second, want 0", n)
		}
		c.reset()
		mustTopic(t, c.nodes[3], s, "t", 2)
		if c.count(host.KindMetaRaft) == 0 {
			t.Fatal("a metadata command committed without a metadata raft message")
		}
		c.settleMetaQuiet(t)
	})
}

// The node that leads the quiesced metadata group dies: node liveness
// tells the survivors (dead after 500 ms of silence) and one of them is
// elected at once, with no command to wake the group, so a command a
// second later commits without waiting for an election. (Without the
// liveness report, the quiesced followers would run no election timer
// until the command woke them, and it would wait out a forwarding timeout
// to the dead leader and an election.)
func TestClusterQuiescedMetadataLeaderDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openQuietCluster(t)
		mustStream(t, c.nodes[1], "a")
		c.settleMetaQuiet(t)
		if err := c.nodes[1].Close(); err != nil { // node 1 leads the metadata group
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := c.nodes[3].Admin().CreateStream(ctx, "b"); err != nil {
			t.Fatalf("metadata command after the leader died: %v", err)
		}
		if took := time.Since(start); took > 50*time.Millisecond {
			t.Fatalf("the command took %v a second after the leader died: no leader was elected meanwhile", took)
		}
		for _, id := range []transport.NodeID{2, 3} {
			if _, err := c.nodes[id].Stream(ctx, "b"); err != nil {
				t.Fatalf("node %d: %v", id, err)
			}
		}
	})
}

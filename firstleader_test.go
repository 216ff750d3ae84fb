package parkway_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/transport"
)

// A created partition's group in a three-node cluster gets its leader
// with no raft tick: with the nodes' clock stopped after the cluster is
// up, CreateTopic commits, every replica is built, and the preferred
// leader is elected (no election timeout waited out: nothing could tick
// one). The deadline only bounds the wait for the goroutines.
func TestNewPartitionLeaderWithoutRaftTick(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, Clock: clk, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The cluster comes up with the clock running: the metadata group
	// elects its leader, a warm topic is created and produced to.
	up := make(chan error, 1)
	var s parkway.Stream
	go func() {
		var err error
		s, err = nodes[0].Admin().CreateStream(ctx, "s")
		if err == nil {
			var warm parkway.Topic
			if warm, err = nodes[0].Admin().CreateTopic(ctx, s, "warm", 1); err == nil {
				_, err = nodes[0].Produce(ctx, warm, parkway.PartitionID(0), parkway.Message{Payload: []byte("x")})
			}
		}
		up <- err
	}()
	// The clock runs ten times faster than real time meanwhile.
	pace := time.NewTicker(time.Millisecond)
	defer pace.Stop()
	for waiting := true; waiting; {
		select {
		case err := <-up:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-pace.C:
			clk.Advance(10 * time.Millisecond)
		}
	}
	stopped := clk.Now()
	tp, err := nodes[0].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	for {
		lead, err := nodes[0].Cluster().Leader(ctx, tp, 0)
		if err != nil {
			t.Fatal(err)
		}
		if lead != 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the new partition's group has no leader with the clock stopped")
		}
		runtime.Gosched()
	}
	if clk.Now() != stopped {
		t.Fatal("the clock moved")
	}
}

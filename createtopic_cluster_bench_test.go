package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// BenchmarkCreateTopicProduceCluster is BenchmarkCreateTopicProduce on
// three nodes in one process over the in-memory network: node 1 creates a
// topic of one partition (a commit of the metadata raft group) and
// produces its first message at once; the ack means a quorum holds it, so
// the path includes every replica's materialisation that the quorum needs
// and the new partition group's first election. "disk" gives each node a
// fresh DataDir (raft logs and partitions on disk, FsyncInterval),
// "memory" none.
func BenchmarkCreateTopicProduceCluster(b *testing.B) {
	payload := make([]byte, 100)
	for _, disk := range []bool{false, true} {
		name := "memory"
		if disk {
			name = "disk"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			net := transport.NewNetwork(transport.NetworkOptions{})
			defer net.Close()
			peers := []transport.NodeID{1, 2, 3}
			var nodes []*parkway.Node
			for _, id := range peers {
				cfg := parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}}
				if disk {
					cfg.DataDir = b.TempDir()
				}
				n, err := parkway.Open(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = n.Close() }()
				nodes = append(nodes, n)
			}
			n := nodes[0]
			opt := parkway.WithFsync(parkway.FsyncInterval, time.Second)
			var s parkway.Stream
			next := 0
			create := func() (parkway.Topic, error) {
				if next%topicsPerStreamBench == 0 {
					var err error
					if s, err = n.Admin().CreateStream(ctx, fmt.Sprintf("bench-%d", next/topicsPerStreamBench)); err != nil {
						return parkway.Topic{}, err
					}
				}
				next++
				return n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t-%d", next), 1, opt)
			}
			// A warm topic: the metadata group has a leader and every node
			// has materialised a partition before the clock starts.
			t, err := create()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := n.Produce(ctx, t, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, 1024)
			created := make([]time.Duration, 0, 1024)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				t, err := create()
				if err != nil {
					b.Fatal(err)
				}
				created = append(created, time.Since(t0))
				if _, err := n.Produce(ctx, t, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(quantile(lat, 0.50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(quantile(lat, 0.99).Microseconds()), "p99-µs")
			slices.Sort(created)
			b.ReportMetric(float64(quantile(created, 0.50).Microseconds()), "create-p50-µs")
		})
	}
}

// topicsPerStreamBench is how many topics the benchmarks put in one
// stream (a stream holds at most 4,096).
const topicsPerStreamBench = 4000

package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// BenchmarkClusterSyncProducers is the bench module's R2 case in the root
// module: three nodes in one process over loopback TCP, one partition,
// and N goroutines each calling the synchronous Produce of one 100-byte
// message through the partition's leader, again and again. Beside the
// rate (noise on a shared machine) it reports what does not depend on the
// machine's load: messages per raft entry (the leader's applied index
// over the run), messages per TCP frame written and per bus message sent
// (all three nodes), the process's CPU time per message (getrusage) and
// allocations; with one producer, the latency p50 and p99 too. async is
// the R2a case beside it: one goroutine with a ring of 4,096 ProduceAsync
// acknowledgements, the coalescing the synchronous calls are compared to.
func BenchmarkClusterSyncProducers(b *testing.B) {
	for _, producers := range []int{1, 64, 4096} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			benchClusterSyncProducers(b, producers)
		})
	}
	b.Run("async", func(b *testing.B) { benchClusterSyncProducers(b, 0) })
}

// benchClusterSyncProducers runs producers synchronous producers, or with
// 0 the ProduceAsync ring.
func benchClusterSyncProducers(b *testing.B, producers int) {
	peers := []transport.NodeID{1, 2, 3}
	buses := map[transport.NodeID]*transport.TCPBus{}
	for _, id := range peers {
		bus, err := transport.ListenTCP(id, "127.0.0.1:0", nil, transport.TCPOptions{InsecurePlaintext: true})
		if err != nil {
			b.Fatal(err)
		}
		defer bus.Close()
		buses[id] = bus
	}
	for _, id := range peers {
		for _, p := range peers {
			if p != id {
				if err := buses[id].AddPeer(p, buses[p].Addr().String()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	nodes := map[transport.NodeID]*parkway.Node{}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: buses[id]}})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		nodes[id] = n
	}
	ctx := context.Background()
	s, err := nodes[1].Admin().CreateStream(ctx, "s")
	if err != nil {
		b.Fatal(err)
	}
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	if _, err := nodes[1].Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
		b.Fatal(err)
	}
	lead, err := nodes[1].Cluster().Leader(ctx, tp, 0)
	if err != nil || lead == 0 {
		b.Fatalf("leader %d: %v", lead, err)
	}
	parts, err := parkway.EnginePartitions(ctx, nodes[lead], tp)
	if err != nil || len(parts) != 1 {
		b.Fatalf("partitions %v: %v", parts, err)
	}
	ns := parts[0].NS
	n := nodes[lead]
	frames := func() (written, sent uint64) {
		for _, bus := range buses {
			st := bus.Stats()
			written += st.FramesWritten
			sent += st.Sent
		}
		return written, sent
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	b.ReportAllocs()
	entries0 := parkway.RaftApplied(n, ns)
	written0, sent0 := frames()
	cpu0 := processCPU(b)
	b.ResetTimer()
	if producers == 0 {
		const window = 4096
		ring := make([]*parkway.PendingAck, window)
		for i := range b.N {
			if p := ring[i%window]; p != nil {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			ring[i%window] = n.ProduceAsync(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload})
		}
		for _, p := range ring {
			if p != nil {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				start := time.Now()
				if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	written, sent := frames()
	entries := parkway.RaftApplied(n, ns) - entries0
	msgs := float64(b.N)
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/msgs, "cpu-µs/msg")
	if entries > 0 {
		b.ReportMetric(msgs/float64(entries), "msgs/entry")
	}
	if written > written0 {
		b.ReportMetric(msgs/float64(written-written0), "msgs/frame")
	}
	if sent > sent0 {
		b.ReportMetric(msgs/float64(sent-sent0), "msgs/bus-msg")
	}
	if producers == 1 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

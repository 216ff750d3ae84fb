//go:build unix

package parkway_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// BenchmarkIdleReplicaMemory is what an idle replica holds: three nodes
// in one process over the in-memory network, one topic of N partitions
// (every node a replica of each), each with a leader, produced to once
// and quiesced, its followers hibernated (hibernation is what an idle
// follower holds: it starts groups.HibernateAfterTicks after the quiesce);
// then the live heap (runtime.MemStats.HeapAlloc after two
// collections) over the one before the topic was created, per replica
// (3N). It is a byte count, not a rate: the machine's load does not move
// it. The iterations are not timed work; b.N only repeats the reading.
//
// Beside it, what the garbage collector's mark phase walks per replica
// (runtime/metrics, after the same collections): the scannable heap
// (scan-B/replica: the bytes of objects up to their last pointer) and
// the heap objects (objects/replica). Every collection marks the whole
// live heap, and an idle process still collects at least every two
// minutes (the runtime forces one), so at hundreds of thousands of
// replicas those two figures, not the bytes alone, are what an idle
// node's CPU grows with. gc-cpu-ns/replica is what one full collection
// of the idle cluster costs (process CPU, getrusage, over a few
// runtime.GC calls; the cluster's own idle work is in it, and the CPU,
// unlike the two counts, moves a little with the machine's load and
// caches) per replica: at R replicas in a process, an idle node pays at
// least R × that every two minutes.
//
//	go test -run '^$' -bench IdleReplicaMemory -benchtime 1x .
//
// With -test.memprofile P (and -test.memprofilerate 4096), the heap
// profile at the moment of the reading is written to P.idle.
func BenchmarkIdleReplicaMemory(b *testing.B) {
	for _, parts := range []int{1000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) { benchIdleReplicaMemory(b, parts) })
	}
}

func benchIdleReplicaMemory(b *testing.B, parts int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	var nodes []*parkway.Node
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	s, err := nodes[0].Admin().CreateStream(ctx, "s")
	if err != nil {
		b.Fatal(err)
	}
	type reading struct{ heap, scan, objects uint64 }
	heap := func() reading {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}, {Name: "/gc/heap/objects:objects"}}
		metrics.Read(s)
		return reading{ms.HeapAlloc, s[0].Value.Uint64(), s[1].Value.Uint64()}
	}
	before := heap()
	tp, err := nodes[0].Admin().CreateTopic(ctx, s, "t", parts)
	if err != nil {
		b.Fatal(err)
	}
	for p := range uint32(parts) {
		for {
			_, err := nodes[0].Produce(ctx, tp, parkway.PartitionID(p), parkway.Message{Payload: make([]byte, 100)})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatal(err)
			}
		}
	}
	for {
		q, h := 0, 0
		for _, n := range nodes {
			q += parkway.QuiescedReplicas(n)
			h += parkway.HibernatedReplicas(n)
		}
		if q == 3*parts && h == 2*parts {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("%d of %d replicas quiesced, %d of %d followers hibernated", q, 3*parts, h, 2*parts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var per, scan, objects float64
	for range b.N {
		r := heap()
		per = float64(r.heap-before.heap) / float64(3*parts)
		scan = float64(r.scan-before.scan) / float64(3*parts)
		objects = float64(r.objects-before.objects) / float64(3*parts)
	}
	const collections = 10
	cpu0 := processCPU(b)
	for range collections {
		runtime.GC()
	}
	gcCPU := processCPU(b) - cpu0
	b.ReportMetric(per, "heap-B/replica")
	b.ReportMetric(float64(gcCPU.Nanoseconds())/collections/float64(3*parts), "gc-cpu-ns/replica")
	b.ReportMetric(scan, "scan-B/replica")
	b.ReportMetric(objects, "objects/replica")
	// The profile -test.memprofile writes at exit sees the nodes closed:
	// the one of the idle replicas is written here, beside it (.idle).
	if f := flag.Lookup("test.memprofile"); f != nil && f.Value.String() != "" {
		out, err := os.Create(f.Value.String() + ".idle")
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// Command scale measures what adding nodes does to a cluster's throughput
// at a fixed replication factor: N nodes in this process over the
// in-memory network, two shards each, one topic whose partitions are
// placed R to a node set, and the same producers (each a goroutine
// producing one message per call, synchronously, through a node in turn)
// for the same time. More nodes spread the same partitions' replicas and
// leaders thinner, so on real machines the rate grows with the nodes; in
// one process the machine is the limit, so the figure to read beside the
// rate is the CPU time per acknowledged message, which must not grow with
// the node count. From the repository root:
//
//	go -C bench run ./cmd/scale                        # 3 and 5 nodes, R = 3
//	go -C bench run ./cmd/scale -nodes 3,5,7 -duration 10s
//	go -C bench run ./cmd/scale -route leader          # each producer through its partition's leader
//
// With -route any (the default) each producer goes through the nodes in
// turn, as a client that knows nothing of the placement: a node that
// does not lead the partition forwards the request, and with more nodes
// a larger share is forwarded (2 in 3 at 3 nodes, 4 in 5 at 5), and some
// twice (through a node that holds no replica). With -route leader each
// producer goes through the node that leads its partition (looked up
// once, after the warm-up), as a partition-aware client does: the same
// work at every node count.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	nodeList := fs.String("nodes", "3,5", "comma-separated node counts, one cluster each")
	replicas := fs.Int("replicas", 3, "replication factor of the topic")
	partitions := fs.Int("partitions", 30, "partitions of the topic")
	producers := fs.Int("producers", 240, "producer goroutines (each synchronous, one message per call)")
	duration := fs.Duration("duration", 5*time.Second, "measured time per round")
	rounds := fs.Int("rounds", 3, "rounds per node count, alternating the node counts")
	payload := fs.Int("payload", 100, "payload bytes")
	route := fs.String("route", "any", "any: producers go through the nodes in turn; leader: through their partition's leader")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *route != "any" && *route != "leader" {
		return fmt.Errorf("bad -route %q (any or leader)", *route)
	}
	var counts []int
	for _, f := range strings.Split(*nodeList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < *replicas {
			return fmt.Errorf("bad node count %q (at least the replication factor %d)", f, *replicas)
		}
		counts = append(counts, n)
	}
	fmt.Printf("GOMAXPROCS %d, NumCPU %d, %s; R = %d, %d partitions, %d producers, %d B payloads, %v per round, route %s\n\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), *replicas, *partitions, *producers, *payload, *duration, *route)
	results := map[int][]result{}
	for r := range *rounds {
		for i := range counts {
			n := counts[(i+r)%len(counts)] // alternate which runs first
			res, err := one(n, *replicas, *partitions, *producers, *payload, *duration, *route == "leader")
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d, %d nodes: %.0f msgs/s, %.1f µs CPU/msg\n", r+1, n, res.rate, res.cpuPerMsg)
			results[n] = append(results[n], res)
		}
	}
	fmt.Println("| nodes | msgs/s (median, range) | CPU per acknowledged message (median, range) | rate vs first |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	base := 0.0
	for _, n := range counts {
		rates, cpus := split(results[n])
		med := median(rates)
		if base == 0 {
			base = med
		}
		fmt.Printf("| %d | %.0f (%.0f–%.0f) | %.1f µs (%.1f–%.1f) | %.2f× |\n", n, med, minf(rates), maxf(rates),
			median(cpus), minf(cpus), maxf(cpus), med/base)
	}
	return nil
}

type result struct{ rate, cpuPerMsg float64 }

func one(nodes, replicas, partitions, producers, payload int, d time.Duration, toLeader bool) (result, error) {
	ctx := context.Background()
	net := parkway.NewNetwork(parkway.NetworkOptions{})
	defer net.Close()
	var peers []parkway.NodeID
	for i := range nodes {
		peers = append(peers, parkway.NodeID(i+1))
	}
	var ns []*parkway.Node
	defer func() {
		for _, n := range ns {
			_ = n.Close()
		}
	}()
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 2, RequestTimeout: 30 * time.Second,
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			return result{}, err
		}
		ns = append(ns, n)
	}
	s, err := ns[0].CreateStream(ctx, "scale")
	if err != nil {
		return result{}, err
	}
	tp, err := ns[0].CreateTopic(ctx, s, "t", partitions, parkway.WithReplicas(replicas),
		parkway.WithFsync(parkway.FsyncInterval, 0))
	if err != nil {
		return result{}, err
	}
	msg := parkway.Message{Payload: make([]byte, payload)}
	// Warm up: one acknowledged produce per partition through its first
	// node, so every group has a leader before the clock starts.
	for p := range uint32(partitions) {
		if _, err := ns[0].Produce(ctx, tp, parkway.PartitionID(p), msg); err != nil {
			return result{}, fmt.Errorf("warm-up produce to partition %d: %w", p, err)
		}
	}
	// Where each partition's producers go: its leader, or every node in
	// turn.
	via := make([]*parkway.Node, partitions)
	if toLeader {
		for p := range partitions {
			// Only the partition's replicas know its leader, and
			// leadership may be moving to the preferred leader: ask every
			// node, for a while.
			var lead parkway.NodeID
			var err error
			for try := 0; lead == 0 && try < 100; try++ {
				if try > 0 {
					time.Sleep(50 * time.Millisecond)
				}
				for _, n := range ns {
					if l, e := n.Leader(ctx, tp, uint32(p)); e != nil {
						err = e
					} else if l != 0 {
						lead, err = l, nil
						break
					}
				}
			}
			if err != nil || lead == 0 || int(lead) > len(ns) {
				return result{}, fmt.Errorf("leader of partition %d: %v (%w)", p, lead, err)
			}
			via[p] = ns[lead-1]
		}
	}
	runtime.GC()
	var acked atomic.Int64
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cpu0, _ := bench.ProcessCPU()
	start := time.Now()
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := ns[g%len(ns)]
			if toLeader {
				n = via[g%partitions]
			}
			part := parkway.PartitionID(uint32(g % partitions))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := n.Produce(ctx, tp, part, msg); err != nil {
					if !errors.Is(err, context.Canceled) {
						once.Do(func() { firstErr = err })
					}
					return
				}
				acked.Add(1)
			}
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := bench.ProcessCPU()
	if firstErr != nil {
		return result{}, firstErr
	}
	n := float64(acked.Load())
	return result{rate: n / elapsed.Seconds(), cpuPerMsg: float64((cpu1 - cpu0).Microseconds()) / n}, nil
}

func split(rs []result) (rates, cpus []float64) {
	for _, r := range rs {
		rates = append(rates, r.rate)
		cpus = append(cpus, r.cpuPerMsg)
	}
	return rates, cpus
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func minf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

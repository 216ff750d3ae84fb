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
//
// Per node. The rate in one process cannot grow with the nodes, so the
// command also measures what each node costs: every node is opened, and
// every producer runs, under a pprof label naming the node (goroutines
// inherit their creator's labels, so every goroutine a node starts
// carries its label, and a producer's client-side work is its node's, as
// in a host that embeds the node), and a CPU profile of each measured
// round is summed by label. Runtime work that carries no label (garbage
// collection, the scheduler) is shared out in proportion to the labelled
// CPU. The busiest node's CPU per acknowledged message bounds the rate of
// a cluster whose nodes each have a core of their own: "capacity at one
// core per node" is 1 s divided by it. That is the figure that grows with
// the node count when the nodes run on their own machines (the issue's
// 5 nodes ≥ 1.5× 3 nodes), and it is a projection from measured CPU, not a
// measured rate. -pernode=false skips the profile.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/bench"
	"github.com/parkway-io/parkway/transport"
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
	perNode := fs.Bool("pernode", true, "profile each round and attribute its CPU to the nodes by pprof label")
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
			res, err := one(n, *replicas, *partitions, *producers, *payload, *duration, *route == "leader", *perNode)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "round %d, %d nodes: %.0f msgs/s, %.1f µs CPU/msg, busiest node %.1f µs/msg (unlabelled share %.0f %%)\n",
				r+1, n, res.rate, res.cpuPerMsg, res.maxNodeCPU, 100*res.unlabelled)
			results[n] = append(results[n], res)
		}
	}
	fmt.Println("| nodes | msgs/s (median, range) | CPU per acknowledged message (median, range) | rate vs first | busiest node's CPU per message (median, range) | capacity at one core per node | capacity vs first |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	base, capBase := 0.0, 0.0
	for _, n := range counts {
		rates, cpus, nodeCPUs := split(results[n])
		med := median(rates)
		if base == 0 {
			base = med
		}
		nodeCol, capCol, capRatio := "—", "—", "—"
		if *perNode {
			nc := median(nodeCPUs)
			capacity := 1e6 / nc
			if capBase == 0 {
				capBase = capacity
			}
			nodeCol = fmt.Sprintf("%.1f µs (%.1f–%.1f)", nc, minf(nodeCPUs), maxf(nodeCPUs))
			capCol = fmt.Sprintf("%.0f msgs/s", capacity)
			capRatio = fmt.Sprintf("%.2f×", capacity/capBase)
		}
		fmt.Printf("| %d | %.0f (%.0f–%.0f) | %.1f µs (%.1f–%.1f) | %.2f× | %s | %s | %s |\n", n, med, minf(rates), maxf(rates),
			median(cpus), minf(cpus), maxf(cpus), med/base, nodeCol, capCol, capRatio)
	}
	return nil
}

type result struct {
	rate, cpuPerMsg float64
	// maxNodeCPU is the busiest node's CPU per acknowledged message (µs),
	// the unlabelled CPU shared out; unlabelled is that CPU's share of
	// the profile.
	maxNodeCPU, unlabelled float64
}

// nodeLabel is the pprof label key naming the node a goroutine works for.
const nodeLabel = "node"

func labelled(id transport.NodeID, fn func()) {
	pprof.Do(context.Background(), pprof.Labels(nodeLabel, strconv.Itoa(int(id))), func(context.Context) { fn() })
}

func one(nodes, replicas, partitions, producers, payload int, d time.Duration, toLeader, perNode bool) (result, error) {
	ctx := context.Background()
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	var peers []transport.NodeID
	for i := range nodes {
		peers = append(peers, transport.NodeID(i+1))
	}
	var ns []*parkway.Node
	defer func() {
		for _, n := range ns {
			_ = n.Close()
		}
	}()
	for _, id := range peers {
		var n *parkway.Node
		var err error
		labelled(id, func() { // the node's goroutines inherit the label
			n, err = parkway.Open(parkway.Config{Shards: 2, RequestTimeout: 30 * time.Second,
				Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		})
		if err != nil {
			return result{}, err
		}
		ns = append(ns, n)
	}
	s, err := ns[0].Admin().CreateStream(ctx, "scale")
	if err != nil {
		return result{}, err
	}
	tp, err := ns[0].Admin().CreateTopic(ctx, s, "t", partitions, parkway.WithReplicas(replicas),
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
	via := make([]int, partitions)
	if toLeader {
		for p := range partitions {
			// Only the partition's replicas know its leader, and
			// leadership may be moving to the preferred leader: ask every
			// node, for a while.
			var lead transport.NodeID
			var err error
			for try := 0; lead == 0 && try < 100; try++ {
				if try > 0 {
					time.Sleep(50 * time.Millisecond)
				}
				for _, n := range ns {
					if l, e := n.Cluster().Leader(ctx, tp, uint32(p)); e != nil {
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
			via[p] = int(lead) - 1
		}
	}
	runtime.GC()
	var acked atomic.Int64
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var prof bytes.Buffer
	if perNode {
		if err := pprof.StartCPUProfile(&prof); err != nil {
			return result{}, err
		}
	}
	cpu0, _ := bench.ProcessCPU()
	start := time.Now()
	for g := range producers {
		wg.Add(1)
		at := g % len(ns) // the index of the node the producer goes through
		if toLeader {
			at = via[g%partitions]
		}
		n := ns[at]
		go labelled(peers[at], func() {
			defer wg.Done()
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
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := bench.ProcessCPU()
	if perNode {
		pprof.StopCPUProfile()
	}
	if firstErr != nil {
		return result{}, firstErr
	}
	n := float64(acked.Load())
	res := result{rate: n / elapsed.Seconds(), cpuPerMsg: float64((cpu1 - cpu0).Microseconds()) / n}
	if perNode {
		byNode, unlabelled, err := cpuByNode(prof.Bytes())
		if err != nil {
			return result{}, err
		}
		var labelledSum, busiest time.Duration
		for _, c := range byNode {
			labelledSum += c
			busiest = max(busiest, c)
		}
		if labelledSum == 0 {
			return result{}, errors.New("the CPU profile holds no labelled sample")
		}
		// Share the unlabelled CPU out in proportion: the busiest node
		// takes busiest/labelledSum of it.
		share := float64(busiest) * float64(labelledSum+unlabelled) / float64(labelledSum)
		res.maxNodeCPU = share / 1e3 / n
		res.unlabelled = float64(unlabelled) / float64(labelledSum+unlabelled)
	}
	return res, nil
}

// cpuByNode sums a CPU profile's samples by the node label; samples
// without it are unlabelled.
func cpuByNode(data []byte) (map[string]time.Duration, time.Duration, error) {
	p, err := profile.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, 0, fmt.Errorf("parsing the CPU profile: %w", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, errors.New("the CPU profile has no cpu sample type")
	}
	byNode := map[string]time.Duration{}
	var unlabelled time.Duration
	for _, s := range p.Sample {
		v := time.Duration(s.Value[idx])
		if l := s.Label[nodeLabel]; len(l) > 0 {
			byNode[l[0]] += v
		} else {
			unlabelled += v
		}
	}
	return byNode, unlabelled, nil
}

func split(rs []result) (rates, cpus, nodeCPUs []float64) {
	for _, r := range rs {
		rates = append(rates, r.rate)
		cpus = append(cpus, r.cpuPerMsg)
		nodeCPUs = append(nodeCPUs, r.maxNodeCPU)
	}
	return rates, cpus, nodeCPUs
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

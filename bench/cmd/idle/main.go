// Command idle measures what an idle cluster costs: three nodes in this
// process over the in-memory network, two shards each, one topic of N
// partitions. After the partitions converge (every one has a leader, as
// node 1 sees it) and a settling pause, it measures over a window the
// process CPU (getrusage: user + system, all threads) and the messages
// each node sends to each peer, by kind. From the repository root:
//
//	go -C bench run ./cmd/idle                          # 1,000 and 10,000 partitions
//	go -C bench run ./cmd/idle -partitions 1000 -measure 20s
//
// The kinds are counted by number (1 partition raft, 7 batches of them,
// 2 metadata raft, 6 node liveness), so the command also builds against
// trees that predate a kind. A batch counts as one message.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	parts := fs.String("partitions", "1000,10000", "comma-separated partition counts, one cluster each")
	settle := fs.Duration("settle", 10*time.Second, "pause after convergence before measuring")
	measure := fs.Duration("measure", 12*time.Second, "measurement window (at least 10 s for a stable figure)")
	converge := fs.Duration("converge", 3*time.Minute, "give up waiting for convergence after this long (then measure anyway)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of each measurement window to <this>-<partitions>.pprof")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	fmt.Printf("GOMAXPROCS %d, NumCPU %d, %s\n\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
	fmt.Println("| partitions | converged | idle CPU (% of one core) | msgs/s per ordered node pair: all | partition raft | metadata raft | liveness | other |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, f := range strings.Split(*parts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad partition count %q", f)
		}
		if err := one(n, *settle, *measure, *converge, *profile); err != nil {
			return err
		}
	}
	return nil
}

// maxPerTopic is the most partitions a topic may have.
const maxPerTopic = 1000

// countingBus counts what a node sends, by kind.
type countingBus struct {
	transport.Bus
	sent *[256]atomic.Int64
}

func (b countingBus) Send(m transport.Message) error {
	b.sent[m.Kind].Add(1)
	return b.Bus.Send(m)
}

func one(partitions int, settle, measure, converge time.Duration, profile string) error {
	ctx := context.Background()
	net := parkway.NewNetwork(parkway.NetworkOptions{})
	defer net.Close()
	peers := []parkway.NodeID{1, 2, 3}
	sent := make([]*[256]atomic.Int64, len(peers))
	var nodes []*parkway.Node
	defer func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}()
	for i, id := range peers {
		sent[i] = new([256]atomic.Int64)
		n, err := parkway.Open(parkway.Config{Shards: 2, RequestTimeout: 30 * time.Second,
			Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: countingBus{Bus: net.Endpoint(id), sent: sent[i]}}})
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	s, err := nodes[0].CreateStream(ctx, "idle")
	if err != nil {
		return err
	}
	// A topic holds at most 1,000 partitions: the partitions are spread
	// over as many topics as that takes, created one at a time, each once
	// the previous one converged (every partition has a leader, as node 1
	// sees it), so what is measured is the idle cost of N partitions, not
	// whether N can be built at once.
	start := time.Now()
	servable, conv := 0, ""
	for left := partitions; left > 0 && conv == ""; left -= maxPerTopic {
		n := min(left, maxPerTopic)
		tp, err := nodes[0].CreateTopic(ctx, s, fmt.Sprintf("t%d", partitions-left), n)
		if err != nil {
			return err
		}
		waiting := make([]uint32, n)
		for p := range waiting {
			waiting[p] = uint32(p)
		}
		for len(waiting) > 0 {
			kept := waiting[:0]
			for _, p := range waiting {
				if lead, err := nodes[0].Leader(ctx, tp, p); err == nil && lead != 0 {
					servable++
				} else {
					kept = append(kept, p)
				}
			}
			waiting = kept
			fmt.Fprintf(os.Stderr, "%d partitions: %d with a leader after %.1f s\n", partitions, servable, time.Since(start).Seconds())
			if len(waiting) > 0 && time.Since(start) > converge {
				conv = fmt.Sprintf("no: %d of %d with a leader after %.0f s", servable, partitions, time.Since(start).Seconds())
				break
			}
			if len(waiting) > 0 {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	if conv == "" {
		conv = fmt.Sprintf("in %.1f s", time.Since(start).Seconds())
	}
	time.Sleep(settle)
	runtime.GC()
	var before [256]int64
	for _, c := range sent {
		for k := range c {
			before[k] += c[k].Load()
		}
	}
	cpu0, ok := processCPU()
	if !ok {
		return fmt.Errorf("getrusage unavailable")
	}
	if profile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%d.pprof", profile, partitions))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	t0 := time.Now()
	time.Sleep(measure)
	cpu1, _ := processCPU()
	if profile != "" {
		pprof.StopCPUProfile()
	}
	wall := time.Since(t0)
	var delta [256]float64
	var all float64
	for _, c := range sent {
		for k := range c {
			delta[k] += float64(c[k].Load())
		}
	}
	for k := range delta {
		delta[k] -= float64(before[k])
		all += delta[k]
	}
	pairs := float64(len(peers) * (len(peers) - 1))
	rate := func(x float64) string { return fmt.Sprintf("%.1f", x/wall.Seconds()/pairs) }
	raft := delta[1] + delta[7] // single messages and batches
	other := all - raft - delta[2] - delta[6]
	fmt.Printf("| %d | %s | %.1f %% | %s | %s | %s | %s | %s |\n", partitions, conv,
		100*float64(cpu1-cpu0)/float64(wall), rate(all), rate(raft), rate(delta[2]), rate(delta[6]), rate(other))
	return nil
}

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
// The kinds are counted by number (1 partition raft, 2 metadata raft,
// 6 node liveness), so the command also builds against trees that
// predate a kind.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
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
		if err := one(n, *settle, *measure, *converge); err != nil {
			return err
		}
	}
	return nil
}

// countingBus counts what a node sends, by kind.
type countingBus struct {
	transport.Bus
	sent *[256]atomic.Int64
}

func (b countingBus) Send(m transport.Message) error {
	b.sent[m.Kind].Add(1)
	return b.Bus.Send(m)
}

func one(partitions int, settle, measure, converge time.Duration) error {
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
	tp, err := nodes[0].CreateTopic(ctx, s, "t", partitions)
	if err != nil {
		return err
	}
	start := time.Now()
	servable, conv := 0, "no"
	for {
		servable = 0
		for p := range uint32(partitions) {
			if lead, err := nodes[0].Leader(ctx, tp, p); err == nil && lead != 0 {
				servable++
			}
		}
		if servable == partitions {
			conv = fmt.Sprintf("in %.1f s", time.Since(start).Seconds())
			break
		}
		if time.Since(start) > converge {
			conv = fmt.Sprintf("no: %d of %d with a leader after %.0f s", servable, partitions, time.Since(start).Seconds())
			break
		}
		time.Sleep(500 * time.Millisecond)
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
	t0 := time.Now()
	time.Sleep(measure)
	cpu1, _ := processCPU()
	wall := time.Since(t0)
	var delta [256]float64
	var all float64
	for _, c := range sent {
		for k := range c {
			d := float64(c[k].Load() - before[k])
			delta[k] += d
			all += d
		}
	}
	pairs := float64(len(peers) * (len(peers) - 1))
	rate := func(x float64) string { return fmt.Sprintf("%.1f", x/wall.Seconds()/pairs) }
	other := all - delta[1] - delta[2] - delta[6]
	fmt.Printf("| %d | %s | %.1f %% | %s | %s | %s | %s | %s |\n", partitions, conv,
		100*float64(cpu1-cpu0)/float64(wall), rate(all), rate(delta[1]), rate(delta[2]), rate(delta[6]), rate(other))
	return nil
}

// Command r1probe runs case R1 of the compare command's replicated section
// on parkway alone — one producer, each Produce of one 100-byte message
// waiting for its quorum ack, to the partition leader of three nodes over
// loopback TCP, each with its own data directory and the topic under
// FsyncInterval 2m — and reports what attributes its tail: the latency
// percentiles of each round, the counters of the three nodes' metrics that
// moved during the last round (quiesces, wakes, compactions, fsyncs), and
// on request an execution trace (each Produce a "produce" region) or a
// CPU profile of the last round.
//
//	go -C bench run ./cmd/r1probe -d 3s -rounds 3
//	go -C bench run ./cmd/r1probe -d 3s -trace r1.trace -slow 1ms
//
// The timed rounds run on one cluster, after a warm-up of 2,000 produces.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/transport"
)

func main() {
	var o options
	flag.DurationVar(&o.dur, "d", 3*time.Second, "length of each timed round")
	flag.IntVar(&o.rounds, "rounds", 1, "timed rounds")
	flag.BoolVar(&o.disk, "disk", true, "give each node a data directory (false: everything in memory)")
	flag.StringVar(&o.trace, "trace", "", "write an execution trace of the last round to this file")
	flag.StringVar(&o.cpu, "cpuprofile", "", "write a CPU profile of the last round to this file")
	flag.DurationVar(&o.slow, "slow", 0, "list the last round's requests slower than this, with their start (0: none)")
	flag.Uint64Var(&o.compact, "compact", 0, "ClusterConfig.CompactEntries (0: the default)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "r1probe:", err)
		os.Exit(1)
	}
}

type options struct {
	dur, slow  time.Duration
	rounds     int
	disk       bool
	trace, cpu string
	compact    uint64
}

const warm = 2000

func run(ctx context.Context, o options) (err error) {
	dir, err := os.MkdirTemp("", "r1probe")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	peers := []transport.NodeID{1, 2, 3}
	var buses []*transport.TCPBus
	var nodes []*parkway.Node
	defer func() {
		for _, n := range nodes {
			err = errors.Join(err, n.Close())
		}
		for _, b := range buses {
			err = errors.Join(err, b.Close())
		}
	}()
	for _, id := range peers {
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, transport.TCPOptions{InsecurePlaintext: true})
		if err != nil {
			return err
		}
		buses = append(buses, b)
	}
	for _, b := range buses {
		for _, p := range buses {
			if err := b.AddPeer(p.ID(), p.Addr().String()); err != nil {
				return err
			}
		}
	}
	for _, id := range peers {
		cfg := parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{
			ID: id, Peers: peers, Bus: buses[id-1], CompactEntries: o.compact}}
		if o.disk {
			cfg.DataDir = filepath.Join(dir, fmt.Sprint(id))
			cfg.MaxOpenFiles = partition.DefaultMaxOpenFiles() / len(peers)
		}
		n, err := parkway.Open(cfg)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	first := nodes[0]
	st, err := first.Admin().CreateStream(ctx, "bench")
	if err != nil {
		return err
	}
	topic, err := first.Admin().CreateTopic(ctx, st, "bench", 1, parkway.WithFsync(parkway.FsyncInterval, 2*time.Minute))
	if err != nil {
		return err
	}
	msg := parkway.Message{Payload: make([]byte, 100)}
	to := parkway.PartitionID(0)
	if _, err := first.Produce(ctx, topic, to, msg); err != nil {
		return err
	}
	var lead transport.NodeID
	for deadline := time.Now().Add(30 * time.Second); lead == 0; {
		if lead, err = first.Cluster().Leader(ctx, topic, 0); err != nil {
			return err
		}
		if lead == 0 {
			if time.Now().After(deadline) {
				return errors.New("no partition leader after 30s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	n := nodes[lead-1]
	for range warm {
		if _, err := n.Produce(ctx, topic, to, msg); err != nil {
			return err
		}
	}
	for r := range o.rounds {
		last := r == o.rounds-1
		before := counters(nodes)
		if last {
			stop, err := startProfiles(o)
			if err != nil {
				return err
			}
			defer stop()
		}
		type req struct{ at, took time.Duration }
		var reqs []req
		t0 := time.Now()
		for time.Since(t0) < o.dur {
			s := time.Now()
			rg := trace.StartRegion(ctx, "produce")
			_, err := n.Produce(ctx, topic, to, msg)
			rg.End()
			if err != nil {
				return err
			}
			reqs = append(reqs, req{s.Sub(t0), time.Since(s)})
		}
		took := make([]time.Duration, len(reqs))
		for i, q := range reqs {
			took[i] = q.took
		}
		slices.Sort(took)
		q := func(p float64) time.Duration { return took[int(p*float64(len(took)-1))] }
		fmt.Printf("round %d: %d msgs %.0f/s p50 %v p90 %v p99 %v p99.9 %v max %v\n", r, len(took),
			float64(len(took))/o.dur.Seconds(), q(.5), q(.9), q(.99), q(.999), took[len(took)-1])
		after := counters(nodes)
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if d := after[k] - before[k]; d != 0 && !strings.Contains(k, "bytes") {
				fmt.Printf("  %s +%v\n", k, d)
			}
		}
		if last && o.slow > 0 {
			for i, q := range reqs {
				if q.took > o.slow {
					fmt.Printf("  slow #%d at %v: %v\n", i, q.at, q.took)
				}
			}
		}
	}
	return nil
}

// startProfiles starts the trace and CPU profile o asks for; stop ends them.
func startProfiles(o options) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
		stops = nil
	}
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return stop, err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	if o.cpu != "" {
		f, err := os.Create(o.cpu)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	return stop, nil
}

// counters gathers every counter and histogram count of the nodes'
// metrics, keyed by node, name and labels.
func counters(nodes []*parkway.Node) map[string]float64 {
	out := map[string]float64{}
	for i, n := range nodes {
		reg := prometheus.NewRegistry()
		if err := reg.Register(n.Metrics()); err != nil {
			continue
		}
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue()
				if h := m.GetHistogram(); h != nil {
					v = float64(h.GetSampleCount())
				}
				var lbl []string
				for _, l := range m.GetLabel() {
					lbl = append(lbl, l.GetName()+"="+l.GetValue())
				}
				out[fmt.Sprintf("node%d %s %s", i+1, mf.GetName(), strings.Join(lbl, " "))] = v
			}
		}
	}
	return out
}

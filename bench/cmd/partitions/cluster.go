package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// A cluster in this process (-nodes N, N > 1): N nodes over the
// in-memory network, each with its own data directory dir/node<i> and
// descriptor budget (-budget, MaxOpenFiles). Topics take the default
// replication factor, min(3, N), so with 3 nodes every node holds a
// replica of every partition: its segment files and its raft log.

type cluster struct {
	net   *transport.Network
	nodes []*parkway.Node
	regs  []*prometheus.Registry
}

func openCluster(dir string, nodes, shards, budget int) (*cluster, error) {
	c := &cluster{net: transport.NewNetwork(transport.NetworkOptions{})}
	var peers []transport.NodeID
	for i := range nodes {
		peers = append(peers, transport.NodeID(i+1))
	}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{
			DataDir: filepath.Join(dir, fmt.Sprintf("node%d", id)), FS: counter, Shards: shards,
			MaxOpenFiles: budget, RequestTimeout: time.Minute,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: c.net.Endpoint(id)},
		})
		if err != nil {
			_ = c.close()
			return nil, fmt.Errorf("open node %d: %w", id, err)
		}
		reg := prometheus.NewRegistry()
		if err := reg.Register(n.Metrics()); err != nil {
			_ = n.Close()
			_ = c.close()
			return nil, err
		}
		c.nodes, c.regs = append(c.nodes, n), append(c.regs, reg)
	}
	return c, nil
}

func (c *cluster) close() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.Close())
	}
	errs = append(errs, c.net.Close())
	return errors.Join(errs...)
}

// waitAll waits until every node materialised count partitions.
func (c *cluster) waitAll(ctx context.Context, count int) error {
	for _, reg := range c.regs {
		if err := waitMaterialised(ctx, reg, count); err != nil {
			return err
		}
	}
	return nil
}

// readAll reads every partition once through n (a Poll answered by its
// leader), inflight at once, each read given up after wait; it returns
// how many were answered and the first error of the others.
func readAll(ctx context.Context, n *parkway.Node, topics []parkway.Topic, count, inflight int, wait time.Duration) (int, error) {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range inflight {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= count {
					return
				}
				t := topics[i/perTopic]
				rctx, cancel := context.WithTimeout(ctx, wait)
				_, err := n.Poll(rctx, t, uint32(i%perTopic), parkway.AtOffset(0), 1)
				cancel()
				if err == nil {
					ok.Add(1)
					continue
				}
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("poll partition %d of %v: %w", i%perTopic, t, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return int(ok.Load()), first
}

// fdPeak samples the process's open descriptors every 10 ms until stop
// is called, which returns the most seen.
func fdPeak() (stop func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func() {
		if fds, err := os.ReadDir("/proc/self/fd"); err == nil && int64(len(fds)) > peak.Load() {
			peak.Store(int64(len(fds)))
		}
	}
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		sample()
		return int(peak.Load())
	}
}

func clusterCreate(dir string, count, nodes, shards, budget int, timeout time.Duration) error {
	stopPeak := fdPeak()
	c, err := openCluster(dir, nodes, shards, budget)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	topics, err := createTopics(ctx, c.nodes[0], count)
	if err == nil {
		err = c.waitAll(ctx, count)
	}
	built := time.Since(start)
	if err == nil {
		err = produceAll(ctx, c.nodes[0], topics, count, 64)
	}
	if err != nil {
		_ = c.close()
		return fmt.Errorf("create (after %v, peak %d descriptors): %w", time.Since(start).Round(time.Millisecond), stopPeak(), err)
	}
	if err := c.close(); err != nil {
		return err
	}
	fmt.Printf("created %d partitions on %d nodes (budget %d each): all materialised %v, with one message each %v; peak open descriptors %d\n",
		count, nodes, budget, built.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), stopPeak())
	return nil
}

func clusterOpen(dir string, count, nodes, shards, budget int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stopPeak := fdPeak()
	start, cpu0 := time.Now(), cpuNow()
	c, err := openCluster(dir, nodes, shards, budget)
	if err != nil {
		return fmt.Errorf("open (peak %d descriptors): %w", stopPeak(), err)
	}
	defer c.close()
	opened := time.Since(start)
	if err := c.waitAll(ctx, count); err != nil {
		return fmt.Errorf("reopen (after %v, peak %d descriptors): %w", time.Since(start).Round(time.Millisecond), stopPeak(), err)
	}
	all, allCPU := time.Since(start), cpuNow()-cpu0
	topics, err := lookupTopics(ctx, c.nodes[0], count)
	if err != nil {
		return err
	}
	answered, rerr := readAll(ctx, c.nodes[0], topics, count, 64, 10*time.Second)
	if rerr != nil {
		fmt.Printf("reads not answered within 10 s: %d, the first: %v\n", count-answered, rerr)
	}
	served, servedCPU := time.Since(start), cpuNow()-cpu0
	peak := stopPeak()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, _ := os.ReadDir("/proc/self/fd")
	fmt.Printf("reopen %d nodes × %d replicated partitions (%d shards, budget %d each): Open returned %v, all materialised %v (CPU %v), "+
		"reads of every partition through node 1 done %v (CPU %v, %d answered); peak open descriptors %d, after %d; VmRSS %s, VmHWM %s, Go heap in use %.0f MiB\n",
		nodes, count, shards, budget, opened.Round(time.Millisecond), all.Round(time.Millisecond), allCPU.Round(time.Millisecond),
		served.Round(time.Millisecond), servedCPU.Round(time.Millisecond), answered, peak, len(fds),
		procStatus("VmRSS"), procStatus("VmHWM"), float64(ms.HeapInuse)/(1<<20))
	return nil
}

// lookupTopics finds the topics createTopics made for count partitions.
func lookupTopics(ctx context.Context, n *parkway.Node, count int) ([]parkway.Topic, error) {
	s, err := n.Stream(ctx, "many")
	if err != nil {
		return nil, err
	}
	var topics []parkway.Topic
	for i := 0; i*perTopic < count; i++ {
		t, err := n.Topic(ctx, s, fmt.Sprintf("t%d", i))
		if err != nil {
			return nil, err
		}
		topics = append(topics, t)
	}
	return topics, nil
}

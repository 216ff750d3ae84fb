package parkway_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// benchNode opens a 2-shard in-memory node with one topic of two
// partitions, materialised (a first produce to each waits it out).
func benchNode(b *testing.B, dir string) (*parkway.Node, parkway.Topic) {
	b.Helper()
	n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	ctx := context.Background()
	s, err := n.Admin().CreateStream(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	t, err := n.Admin().CreateTopic(ctx, s, "t", 2)
	if err != nil {
		b.Fatal(err)
	}
	for p := range uint32(2) {
		if _, err := n.Produce(ctx, t, parkway.PartitionID(p), parkway.Message{Payload: []byte("warm")}); err != nil {
			b.Fatal(err)
		}
	}
	return n, t
}

// BenchmarkProduce measures produce of 100-byte messages through a Node
// with 2 shards: one message per call, and batches of 100. The msgs/s
// metric is per message in both cases.
func BenchmarkProduce(b *testing.B) {
	payload := make([]byte, 100)
	for _, tc := range []struct {
		name  string
		batch int
		dir   bool
	}{{"single/mem", 1, false}, {"batch100/mem", 100, false}, {"single/file", 1, true}, {"batch100/file", 100, true}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := ""
			if tc.dir {
				dir = b.TempDir()
			}
			n, t := benchNode(b, dir)
			msgs := make([]parkway.Message, tc.batch)
			for i := range msgs {
				msgs[i].Payload = payload
			}
			ctx := context.Background()
			b.SetBytes(int64(100 * tc.batch))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n.Produce(ctx, t, parkway.PartitionID(0), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*tc.batch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkPoll measures polling up to 100 messages of 100 bytes per call
// from a partition holding 10,000 (an in-memory read stops at a chunk's
// end: the next poll reads on from Next).
func BenchmarkPoll(b *testing.B) {
	n, t := benchNode(b, "")
	ctx := context.Background()
	msgs := make([]parkway.Message, 100)
	for i := range msgs {
		msgs[i].Payload = make([]byte, 100)
	}
	for range 100 {
		if _, err := n.Produce(ctx, t, parkway.PartitionID(0), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(100 * 100)
	b.ReportAllocs()
	var off uint64
	read := 0
	for b.Loop() {
		batch, err := n.Poll(ctx, t, 0, parkway.AtOffset(off), 100)
		if err != nil || len(batch.Messages) == 0 {
			b.Fatalf("poll at %d: %d messages, %v", off, len(batch.Messages), err)
		}
		read += len(batch.Messages)
		off = batch.Next % 9_900
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkDurability measures the storage paths of issue "durable
// storage" in one run, on the machine's real disk:
//
//   - never/batch100: batched produce (100 × 100-byte messages) to a
//     FsyncNever topic, against bufio-limit, a plain buffered append of the
//     same record bytes (100-byte payload + 48-byte header) to one file —
//     the ratio of the two is the storage overhead;
//   - always/producers=N: single-message produces from N concurrent
//     goroutines to one FsyncAlways partition; msgs/fsync shows group
//     commit sharing one fsync among concurrent producers.
func BenchmarkDurability(b *testing.B) {
	payload := make([]byte, 100)
	b.Run("never/batch100", func(b *testing.B) {
		n, s := durableNode(b, nil)
		tp, err := n.Admin().CreateTopic(context.Background(), s, "never", 1, parkway.WithFsync(parkway.FsyncNever, 0))
		if err != nil {
			b.Fatal(err)
		}
		msgs := make([]parkway.Message, 100)
		for i := range msgs {
			msgs[i].Payload = payload
		}
		b.SetBytes(100 * 148)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), msgs...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("bufio-limit", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "limit.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 64<<10)
		record := make([]byte, 148)
		b.SetBytes(100 * 148)
		for b.Loop() {
			for range 100 {
				if _, err := w.Write(record); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
	})
	for _, c := range []struct {
		policy    parkway.FsyncPolicy
		producers int
	}{{parkway.FsyncAlways, 1}, {parkway.FsyncAlways, 8}, {parkway.FsyncAlways, 64}, {parkway.FsyncNever, 64}} {
		producers := c.producers
		b.Run(fmt.Sprintf("%v/producers=%d", c.policy, producers), func(b *testing.B) {
			syncs := errorfs.OnIndex(-1, nil, errorfs.OpSync)
			writes := errorfs.OnIndex(-1, nil, errorfs.OpWriteAt)
			n, s := durableNode(b, errorfs.InjectorFunc(func(op errorfs.Op) error {
				_ = syncs.MaybeError(op)
				return writes.MaybeError(op)
			}))
			tp, err := n.Admin().CreateTopic(context.Background(), s, "t", 1, parkway.WithFsync(c.policy, 0))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
				b.Fatal(err)
			}
			before, writesBefore := syncs.Count(), writes.Count()
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for range producers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if fsyncs := syncs.Count() - before; fsyncs > 0 {
				b.ReportMetric(float64(b.N)/float64(fsyncs), "msgs/fsync")
			}
			if w := writes.Count() - writesBefore; w > 0 {
				b.ReportMetric(float64(b.N)/float64(w), "msgs/write")
			}
		})
	}
}

// durableNode opens a file-backed node on a temporary directory of the
// real disk, counting filesystem operations through inj when given.
func durableNode(b *testing.B, inj errorfs.Injector) (*parkway.Node, parkway.Stream) {
	b.Helper()
	cfg := parkway.Config{DataDir: b.TempDir(), Shards: 2}
	if inj != nil {
		cfg.FS = errorfs.New(vfs.Default, inj)
	}
	n, err := parkway.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	s, err := n.Admin().CreateStream(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return n, s
}

// BenchmarkCluster measures quorum-acknowledged produce on three nodes in
// one process over the in-memory network (100-byte messages, one topic
// partition, produced through its leader): one producer (latency p50/p99)
// and 64 concurrent producers (pipelined throughput).
//
// storage=mem keeps everything in memory (no DataDir); storage=disk gives
// each node a data directory on the real filesystem, where every raft
// group's log is persisted, with the topic's fsync policy: always (each
// raft Ready synced before it is acknowledged) or never.
func BenchmarkCluster(b *testing.B) {
	type storage struct {
		name   string
		disk   bool
		policy parkway.FsyncPolicy
	}
	for _, st := range []storage{{"mem", false, parkway.FsyncNever}, {"disk-fsync=never", true, parkway.FsyncNever},
		{"disk-fsync=always", true, parkway.FsyncAlways}} {
		for _, producers := range []int{1, 64} {
			b.Run(fmt.Sprintf("storage=%s/producers=%d", st.name, producers), func(b *testing.B) {
				benchCluster(b, st.disk, st.policy, producers, false)
			})
		}
	}
}

// BenchmarkClusterForwarded is BenchmarkCluster's storage=mem case
// produced through a follower: each produce is forwarded to the
// partition's leader and waits there for the answer (the client call's
// forward), one producer (latency) and 64 concurrent ones.
func BenchmarkClusterForwarded(b *testing.B) {
	for _, producers := range []int{1, 64} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			benchCluster(b, false, parkway.FsyncNever, producers, true)
		})
	}
}

// benchCluster produces through the partition's leader, or with
// forwarded through a follower.
func benchCluster(b *testing.B, disk bool, policy parkway.FsyncPolicy, producers int, forwarded bool) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	nodes := map[transport.NodeID]*parkway.Node{}
	for _, id := range peers {
		cfg := parkway.Config{Shards: 2,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}}
		if disk {
			cfg.DataDir = b.TempDir()
		}
		n, err := parkway.Open(cfg)
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
	tp, err := nodes[1].Admin().CreateTopic(ctx, s, "t", 1, parkway.WithFsync(policy, 0))
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
	n := nodes[lead]
	if forwarded {
		n = nodes[lead%3+1]
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	cpu0 := processCPU(b)
	b.ResetTimer()
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
	// The process's CPU time (the three nodes) per message: what the
	// machine's load does not change as it changes the rate.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkPipelined compares two ways of keeping 4,096 produces in flight
// to one partition (file store, FsyncNever): a goroutine per outstanding
// Produce, and one goroutine with a ring of ProduceAsync acknowledgements
// (the oldest awaited before its slot is reused), as an asynchronous
// publisher does; with 100-byte and 64 KiB payloads (the bench module's
// cases 2, 2a and 7).
func BenchmarkPipelined(b *testing.B) {
	const window = 4096
	for _, size := range []int{100, 64 << 10} {
		payload := make([]byte, size)
		setup := func(b *testing.B) (*parkway.Node, parkway.Topic) {
			n, s := durableNode(b, nil)
			tp, err := n.Admin().CreateTopic(context.Background(), s, "t", 1, parkway.WithFsync(parkway.FsyncNever, 0))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := n.Produce(context.Background(), tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			return n, tp
		}
		b.Run(fmt.Sprintf("goroutines/size=%d", size), func(b *testing.B) {
			n, tp := setup(b)
			ctx := context.Background()
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for range window {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run(fmt.Sprintf("async/size=%d", size), func(b *testing.B) {
			n, tp := setup(b)
			ctx := context.Background()
			ring := make([]*parkway.PendingAck, window)
			b.ResetTimer()
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
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkConvergence is the time from CreateTopic to the ack of a
// produce sent at once (the partition is built on disk meanwhile), per
// topic, over b.N topics in one stream: p50 and p99 of the whole, and of
// the produce alone. FsyncInterval topics (the build itself syncs
// nothing) and FsyncAlways topics (the first produce syncs the new
// partition's layout and its message).
func BenchmarkConvergence(b *testing.B) {
	for _, policy := range []parkway.FsyncPolicy{parkway.FsyncInterval, parkway.FsyncAlways} {
		b.Run(policy.String(), func(b *testing.B) {
			n, s := durableNode(b, nil)
			ctx := context.Background()
			total := make([]time.Duration, b.N)
			prod := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				tp, err := n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", i), 1, parkway.WithFsync(policy, time.Second))
				if err != nil {
					b.Fatal(err)
				}
				created := time.Now()
				if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: make([]byte, 100)}); err != nil {
					b.Fatal(err)
				}
				total[i], prod[i] = time.Since(start), time.Since(created)
			}
			b.StopTimer()
			slices.Sort(total)
			slices.Sort(prod)
			b.ReportMetric(float64(total[len(total)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(total[len(total)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(prod[len(prod)/2].Microseconds()), "produce-p50-µs")
			b.ReportMetric(float64(prod[len(prod)*99/100].Microseconds()), "produce-p99-µs")
		})
	}
}

// BenchmarkLargePayloadInterval is the bench module's case 7 under
// FsyncInterval: 4,096 goroutines each producing one 64 KiB message at a
// time to one partition, in the partition's first fsync interval (an
// interval of a minute holds the whole run in it; the bench module's
// rounds, 1 s and more at the default 1 s interval, spend most of theirs
// there). Besides B/op (bytes allocated per message) it reports the bytes
// written to files per message, counted through the vfs seam: 64 KiB of
// payload and its record header are the floor.
func BenchmarkLargePayloadInterval(b *testing.B) {
	const window, size = 4096, 64 << 10
	var written atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpWrite || op.Kind == errorfs.OpWriteAt {
			written.Add(int64(op.Len))
		}
		return nil
	})
	n, s := durableNode(b, count)
	ctx := context.Background()
	tp, err := n.Admin().CreateTopic(ctx, s, "t", 1, parkway.WithFsync(parkway.FsyncInterval, time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	var next atomic.Int64
	written.Store(0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range window {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(written.Load())/float64(b.N), "written-B/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

package bench

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// BenchmarkFsyncAlwaysPartitions is case 4 under fsync on every write, as
// the compare run sets it up (one node, 2 shards, a topic of 8 FsyncAlways
// partitions, 8 goroutines each producing one 100-byte message per call
// to its own partition and waiting for it), with what the compare run
// cannot show: how many messages each journal fdatasync carried
// (msgs/jsync, the shards' group commit sharing one write, which the
// journal leader's linger is for) and each fsync of any file (msgs/fsync),
// counted through the vfs seam, beside the rate and the CPU per message.
// Counts are less noisy than rates on a shared machine.
//
//	go test -run '^$' -bench FsyncAlwaysPartitions -benchtime 5000x .
func BenchmarkFsyncAlwaysPartitions(b *testing.B) {
	var syncs, jsyncs atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync {
			syncs.Add(1)
			if strings.HasSuffix(op.Path, ".journal") {
				jsyncs.Add(1)
			}
		}
		return nil
	})
	node, err := parkway.Open(parkway.Config{DataDir: b.TempDir(), Shards: 2, FS: errorfs.New(vfs.Default, count)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = node.Close() })
	ctx := context.Background()
	s, err := node.Admin().CreateStream(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	tp, err := node.Admin().CreateTopic(ctx, s, "bench", concurrent, parkway.WithFsync(parkway.FsyncAlways, 0))
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	for part := range concurrent {
		// The first produce to each partition waits for it to be built.
		if _, err := node.Produce(ctx, tp, parkway.PartitionID(uint32(part)), parkway.Message{Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	syncs0, jsyncs0 := syncs.Load(), jsyncs.Load()
	cpu0, cpuOK := processCPU()
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for part := range concurrent {
		to := parkway.PartitionID(uint32(part))
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := node.Produce(ctx, tp, to, parkway.Message{Payload: payload}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu1, _ := processCPU()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if n := jsyncs.Load() - jsyncs0; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "msgs/jsync")
	}
	if n := syncs.Load() - syncs0; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "msgs/fsync")
	}
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/msg")
	}
}

package parkway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

// BenchmarkCreateTopicProduce is the materialisation barrier's own case
// (the bench module's case 6): create a topic with one partition and
// produce the first message into it at once, timed from the create call to
// the produce's ack. Every sub-benchmark opens a node on a fresh directory;
// "existing=N" first creates N materialised topics, so the figures show
// whether the latency grows with the number of topics. p50 and p99 are
// over the timed iterations; create-p50 is the median of the CreateTopic
// call alone (its metadata commit). The "-prebuild" variants set
// Config.PrebuildPartitions.
func BenchmarkCreateTopicProduce(b *testing.B) {
	payload := make([]byte, 100)
	for _, fsync := range []struct {
		name     string
		opt      parkway.TopicOption
		mem      bool // no DataDir: the engine's path without the filesystem's
		prebuild bool // Config.PrebuildPartitions
	}{
		{"interval", parkway.WithFsync(parkway.FsyncInterval, time.Second), false, false},
		{"always", parkway.WithFsync(parkway.FsyncAlways, 0), false, false},
		{"memory", parkway.WithFsync(parkway.FsyncNever, 0), true, false},
		{"interval-prebuild", parkway.WithFsync(parkway.FsyncInterval, time.Second), false, true},
		{"always-prebuild", parkway.WithFsync(parkway.FsyncAlways, 0), false, true},
	} {
		// 5,000 rather than 10,000: a file partition holds three
		// descriptors open (log, index, time index), and 10,000
		// partitions exceed a common limit of 20,000 open files.
		for _, existing := range []int{0, 1_000, 5_000} {
			b.Run(fmt.Sprintf("fsync=%s/existing=%d", fsync.name, existing), func(b *testing.B) {
				ctx := context.Background()
				dir := ""
				if !fsync.mem {
					dir = b.TempDir()
				}
				n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir, PrebuildPartitions: fsync.prebuild})
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = n.Close() }()
				// A stream holds at most 4,096 topics (12-bit ids): a new
				// stream takes over every topicsPerStream.
				const topicsPerStream = 4000
				var s parkway.Stream
				next := 0
				create := func() (parkway.Topic, error) {
					if next%topicsPerStream == 0 {
						var err error
						if s, err = n.Admin().CreateStream(ctx, fmt.Sprintf("bench-%d", next/topicsPerStream)); err != nil {
							return parkway.Topic{}, err
						}
					}
					next++
					return n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t-%d", next), 1, fsync.opt)
				}
				topics := make([]parkway.Topic, existing)
				for i := range topics {
					if topics[i], err = create(); err != nil {
						b.Fatal(err)
					}
				}
				// One message into each: every partition materialised
				// and non-empty before the clock starts.
				for _, t := range topics {
					if _, err := n.Produce(ctx, t, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
						b.Fatal(err)
					}
				}
				lat := make([]time.Duration, 0, 1024)
				created := make([]time.Duration, 0, 1024) // create call returned
				b.ResetTimer()
				for b.Loop() {
					t0 := time.Now()
					t, err := create()
					if err != nil {
						b.Fatal(err)
					}
					created = append(created, time.Since(t0))
					if _, err := n.Produce(ctx, t, parkway.PartitionID(0), parkway.Message{Payload: payload}); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				slices.Sort(lat)
				b.ReportMetric(float64(quantile(lat, 0.50).Microseconds()), "p50-µs")
				b.ReportMetric(float64(quantile(lat, 0.99).Microseconds()), "p99-µs")
				slices.Sort(created)
				b.ReportMetric(float64(quantile(created, 0.50).Microseconds()), "create-p50-µs")
			})
		}
	}
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

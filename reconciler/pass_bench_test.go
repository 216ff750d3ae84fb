//go:build unix

package reconciler_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// BenchmarkCreatePasses is what a shard's reconciler spends on one create
// of a one-partition topic with n partitions already held: the pass that
// builds it and the pass after (run because the first did work, as it is
// while the new topic's first frames are parked). That second pass was a
// full diff of all n (issue 33); it should cost the same at every n.
func BenchmarkCreatePasses(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(itoa(n), func(b *testing.B) {
			h := newHarness(b, 1, nil)
			h.apply(metadata.CreateStream{Name: "s"})
			for i := range n / 1000 {
				h.apply(metadata.CreateTopic{Stream: 0, Name: "big" + itoa(i), Partitions: 1000})
			}
			h.pass(0)
			h.pass(0)
			var stream uint32
			i := 0
			cpu0 := processCPU(b)
			for b.Loop() {
				if i%4000 == 0 { // a stream holds at most 4,096 topics
					stream = h.apply(metadata.CreateStream{Name: "s" + itoa(i)}).Stream
				}
				h.apply(metadata.CreateTopic{Stream: stream, Name: "t" + itoa(i), Partitions: 1})
				i++
				if rep := h.pass(0); rep.Built != 1 {
					b.Fatalf("pass after a create %+v: want one built", rep)
				}
				h.pass(0)
			}
			// Beside the wall time, which a shared machine inflates:
			// the process's CPU (all threads, the shard's pump too).
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

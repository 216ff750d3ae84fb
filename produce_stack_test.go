package parkway_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/parkway-io/parkway"
)

// TestSyncProduceStack pins the stack a synchronous Produce needs: 4,096
// goroutines producing to one partition at once, as a service's request
// handlers do, each with a stack of 4 KiB at the end (bench/RESULTS.md,
// "Issue 33: case 2, synchronous producers on one node"). Every producer
// keeps its stack while it waits, and every call touches it on
// whichever core it runs: with 8 KiB stacks (the path one frame too deep
// somewhere: resolving the partition, the call with its response and
// call-step values copied through every frame, the waited lane's
// contended lock), 4,096 producers hold twice the memory and cost more
// per message. Counted, not timed: the stack memory in use over the
// producers. Frame sizes are the compiler's, per architecture: checked
// on the 64-bit ones parkway is measured on.
func TestSyncProduceStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation deepens every frame")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("frame sizes measured on amd64 and arm64")
	}
	n, tp := openTopic(t, parkway.Config{Shards: 1}, 1)
	// A context that can end, as a handler's can: the wait is a select.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p0 := parkway.PartitionID(0)
	payload := make([]byte, 100)
	if _, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	const producers, each = 4096, 4
	// A collection shrinks the stacks it scans: none while counting.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var (
		produced, exited sync.WaitGroup
		mu               sync.Mutex
		failed           error
	)
	release := make(chan struct{})
	for range producers {
		produced.Add(1)
		exited.Go(func() {
			beneath(callerFrames, func() {
				for range each {
					if _, err := n.Produce(ctx, tp, p0, parkway.Message{Payload: payload}); err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						break
					}
				}
			})
			produced.Done()
			<-release // alive, its stack as the calls left it
		})
	}
	produced.Wait()
	runtime.ReadMemStats(&after)
	close(release)
	exited.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	per := float64(after.StackInuse-before.StackInuse) / producers
	t.Logf("stack in use per producer: %.0f bytes", per)
	if per > 6<<10 {
		t.Errorf("%.1f KiB of stack per synchronous producer, want 4 (8 when a call's path outgrows 4 KiB)", per/1024)
	}
}

// callerFrames is the stack the producers' own callers use beneath
// Produce, as a request handler's do (a few frames of a server and its
// router): 256 bytes, where the path of a produce left 4 KiB stacks
// about 450 bytes for them when this test was written, and none before.
const callerFrames = 256

// beneath calls f beneath about bytes of stack frames.
//
//go:noinline
func beneath(bytes int, f func()) {
	if bytes <= 0 {
		f()
		return
	}
	var pad [128]byte
	pad[bytes%128] = 1
	beneath(bytes-128-int(pad[0]), f)
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

// sample is what one timed run of a case on one system measured.
type sample struct {
	msgs    int           // messages produced or consumed (case 6: topics)
	bytes   int64         // payload bytes of those messages
	elapsed time.Duration // wall time of the timed section
	mallocs uint64        // heap allocations in the whole process during it
	lat     []time.Duration
}

// meter times a case's measured section. Set-up (opening the system,
// prefilling for a consume case, creating a consumer) happens before
// start and is not measured.
type meter struct {
	profile string // CPU profile file for this run, or ""
	file    *os.File
	t0      time.Time
	mem     runtime.MemStats
	s       sample
	started bool
}

// start collects garbage first, so a run does not pay for the previous
// run's heap, then begins the clock (and the CPU profile, when asked).
func (m *meter) start() error {
	if m.started {
		return errors.New("meter started twice")
	}
	m.started = true
	runtime.GC()
	if m.profile != "" {
		f, err := os.Create(m.profile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return errors.Join(fmt.Errorf("cpu profile: %w", err), f.Close())
		}
		m.file = f
	}
	runtime.ReadMemStats(&m.mem)
	m.t0 = time.Now()
	return nil
}

// stop ends the clock; it records msgs messages of payload bytes each.
func (m *meter) stop(msgs, payload int) error {
	m.s.elapsed = time.Since(m.t0)
	mallocs := m.mem.Mallocs
	runtime.ReadMemStats(&m.mem)
	m.s.mallocs = m.mem.Mallocs - mallocs
	m.s.msgs, m.s.bytes = msgs, int64(msgs)*int64(payload)
	return m.finishProfile()
}

// finishProfile stops a running CPU profile; safe to call twice.
func (m *meter) finishProfile() error {
	if m.file == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := m.file.Close()
	m.file = nil
	return err
}

// metric is one row of a case in the report.
type metric int

const (
	msgsPerSec metric = iota
	mbPerSec
	p50
	p99
	allocsPerMsg
)

// higherIsBetter says how to read the metric's ratio.
func (k metric) higherIsBetter() bool { return k == msgsPerSec || k == mbPerSec }

func (k metric) label() string {
	switch k {
	case msgsPerSec:
		return "msgs/s"
	case mbPerSec:
		return "MB/s (payload)"
	case p50:
		return "p50 latency"
	case p99:
		return "p99 latency"
	case allocsPerMsg:
		return "allocs/msg (process)"
	}
	return "?"
}

// caseSpec is one case of the comparison.
type caseSpec struct {
	id      string // the case number
	key     string // -run matches "<set>/<key>"
	title   string
	payload int // bytes
	count   int // messages (case 6: topics)
	parts   int // partitions (JetStream: streams) the case needs
	metrics []metric
	run     func(ctx context.Context, in instance, c caseSpec, m *meter) error
}

// The pipelining depth of case 2 and the batch sizes of cases 3 and 5.
const (
	produceBatch = 100
	consumeBatch = 1000
	concurrent   = 8
)

// cases lists the cases of one durability set with its sizes; a case
// whose count is 0 is left out.
func cases(sz SetSizes) []caseSpec {
	all := []caseSpec{
		{id: "1", key: "produce-wait", title: "produce and wait, one message per call", payload: 100,
			count: sz.ProduceWait, parts: 1, metrics: []metric{msgsPerSec, p50, p99, allocsPerMsg}, run: asCase(runProduceWait)},
		{id: "2", key: "pipelined", title: "pipelined produce, 4,096 outstanding", payload: 100,
			count: sz.Pipelined, parts: 1, metrics: []metric{msgsPerSec, mbPerSec, allocsPerMsg}, run: asCase(runPipelined)},
		{id: "2a", key: "pipelined-async", title: "pipelined produce, async API, 4,096 outstanding", payload: 100,
			count: sz.PipelinedAsync, parts: 1, metrics: []metric{msgsPerSec, mbPerSec, allocsPerMsg}, run: asCase(runPipelinedAsync)},
		{id: "3", key: "batch", title: "batched produce, 100 messages per call", payload: 100,
			count: sz.Batch, parts: 1, metrics: []metric{msgsPerSec, mbPerSec, allocsPerMsg}, run: asCase(runBatch)},
		{id: "4", key: "partitions", title: "8 partitions, 8 goroutines, one message per call", payload: 100,
			count: sz.Partitions, parts: concurrent, metrics: []metric{msgsPerSec, allocsPerMsg}, run: runPartitions},
		{id: "5", key: "consume", title: "consume from offset 0, 1,000 per call", payload: 100,
			count: sz.Consume, parts: 1, metrics: []metric{msgsPerSec, mbPerSec}, run: runConsume},
		{id: "6", key: "convergence", title: "create a topic and produce at once: time to first ack", payload: 100,
			count: sz.Topics, parts: 0, metrics: []metric{p50, p99}, run: runConvergence},
		{id: "7", key: "pipelined-1KiB", title: "case 2 with 1 KiB payloads", payload: 1 << 10,
			count: sz.Pipelined1K, parts: 1, metrics: []metric{msgsPerSec, mbPerSec}, run: asCase(runPipelined)},
		{id: "7", key: "pipelined-64KiB", title: "case 2 with 64 KiB payloads", payload: 64 << 10,
			count: sz.Pipelined64K, parts: 1, metrics: []metric{msgsPerSec, mbPerSec}, run: asCase(runPipelined)},
		{id: "7", key: "consume-1KiB", title: "case 5 with 1 KiB payloads", payload: 1 << 10,
			count: sz.Consume1K, parts: 1, metrics: []metric{msgsPerSec, mbPerSec}, run: runConsume},
		{id: "7", key: "consume-64KiB", title: "case 5 with 64 KiB payloads", payload: 64 << 10,
			count: sz.Consume64K, parts: 1, metrics: []metric{msgsPerSec, mbPerSec}, run: runConsume},
	}
	out := all[:0]
	for _, c := range all {
		if c.count > 0 {
			out = append(out, c)
		}
	}
	return out
}

// asCase adapts a run function that only produces to caseSpec.run.
func asCase(run func(context.Context, producer, caseSpec, *meter) error) func(context.Context, instance, caseSpec, *meter) error {
	return func(ctx context.Context, in instance, c caseSpec, m *meter) error { return run(ctx, in, c, m) }
}

// runProduceWait is case 1: one message per call, each call waiting for
// its ack; every call's latency is recorded.
func runProduceWait(ctx context.Context, in producer, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	lat := make([]time.Duration, c.count)
	if err := m.start(); err != nil {
		return err
	}
	for i := range lat {
		t := time.Now()
		if err := in.produceOne(ctx, 0, payload); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		lat[i] = time.Since(t)
	}
	m.s.lat = lat
	return m.stop(c.count, c.payload)
}

// runPipelined is case 2 (and case 7's variants): maxPending messages
// outstanding at a time.
func runPipelined(ctx context.Context, in producer, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	if err := m.start(); err != nil {
		return err
	}
	if err := in.pipelined(ctx, 0, payload, c.count, maxPending); err != nil {
		return err
	}
	return m.stop(c.count, c.payload)
}

// runPipelinedAsync is case 2a: case 2 with the ring of pending acks on
// both sides (parkway's ProduceAsync, JetStream's PublishAsync).
func runPipelinedAsync(ctx context.Context, in producer, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	if err := m.start(); err != nil {
		return err
	}
	if err := in.pipelinedAsync(ctx, 0, payload, c.count, maxPending); err != nil {
		return err
	}
	return m.stop(c.count, c.payload)
}

// runBatch is case 3: produceBatch messages per call, one call at a time.
func runBatch(ctx context.Context, in producer, c caseSpec, m *meter) error {
	produce := in.batchProducer(0, make([]byte, c.payload), produceBatch)
	if err := m.start(); err != nil {
		return err
	}
	for i := range c.count / produceBatch {
		if err := produce(ctx); err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
	}
	return m.stop(c.count, c.payload)
}

// runPartitions is case 4: goroutine g produces count/8 messages to
// partition g (JetStream: stream g), one message per call. The first
// error stops the others; all have returned before the clock stops.
func runPartitions(ctx context.Context, in instance, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	per := c.count / concurrent
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	if err := m.start(); err != nil {
		return err
	}
	for g := range concurrent {
		wg.Go(func() {
			for i := range per {
				if err := in.produceOne(ctx, g, payload); err != nil {
					cancel(fmt.Errorf("partition %d, message %d: %w", g, i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return m.stop(per*concurrent, c.payload)
}

// runConsume is case 5 (and case 7's variants): the partition is filled
// with count messages in batches (not timed), then read from offset 0 in
// calls of up to consumeBatch messages until count have been read.
func runConsume(ctx context.Context, in instance, c caseSpec, m *meter) error {
	produce := in.batchProducer(0, make([]byte, c.payload), produceBatch)
	for i := range (c.count + produceBatch - 1) / produceBatch {
		if err := produce(ctx); err != nil {
			return fmt.Errorf("prefill batch %d: %w", i, err)
		}
	}
	r, err := in.reader(ctx, 0)
	if err != nil {
		return err
	}
	if err := m.start(); err != nil {
		return errors.Join(err, r.close())
	}
	got := 0
	for got < c.count {
		n, err := r.read(ctx, min(consumeBatch, c.count-got))
		if err != nil {
			return errors.Join(fmt.Errorf("read at message %d: %w", got, err), r.close())
		}
		if n == 0 {
			return errors.Join(fmt.Errorf("read at message %d of %d returned nothing", got, c.count), r.close())
		}
		got += n
	}
	if err := m.stop(got, c.payload); err != nil {
		return errors.Join(err, r.close())
	}
	return r.close()
}

// runConvergence is case 6: count times, create a topic (JetStream: a
// stream) and produce one message to it at once; the latency is from the
// create call to the produce's ack.
func runConvergence(ctx context.Context, in instance, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	names := make([]string, c.count)
	for i := range names {
		names[i] = fmt.Sprintf("conv-%d", i)
	}
	lat := make([]time.Duration, c.count)
	if err := m.start(); err != nil {
		return err
	}
	for i, name := range names {
		t := time.Now()
		if err := in.createAndProduce(ctx, name, payload); err != nil {
			return err
		}
		lat[i] = time.Since(t)
	}
	m.s.lat = lat
	return m.stop(c.count, c.payload)
}

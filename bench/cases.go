package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// sample is what one timed run of a case on one system measured.
type sample struct {
	msgs    int           // messages produced or consumed (case 6: topics)
	bytes   int64         // payload bytes of those messages
	elapsed time.Duration // wall time of the timed section
	// cpu is the process's user+system CPU time over the timed section
	// (getrusage), or -1 where it cannot be measured.
	cpu     time.Duration
	mallocs uint64 // heap allocations in the whole process during it
	lat     []time.Duration
	// What the process carried into the timed section, after the GC that
	// precedes it: a round must not inherit the previous rounds' state.
	goroutines int
	heap       uint64 // live heap bytes
	dir        string // the round's data directory ("" when it has none)
}

// meter times a case's measured section. Set-up (opening the system,
// prefilling for a consume case, creating readers) happens before start
// and is not measured.
//
// A round lasts at least minRound: the case's loops ask budget whether to
// take more work, and it says yes until both the case's floor count is
// done and minRound has passed since start. Work already started when the
// time is up is finished and counted, so a round's figures are per
// message over whatever it did.
type meter struct {
	profile string // CPU profile file for this run, or ""
	// prewarmMiB is Config.PrewarmMiB: touched and released by start.
	prewarmMiB int
	minRound   time.Duration // ≤ 0: run exactly the floor counts
	file       *os.File
	t0         time.Time
	cpu0       time.Duration
	cpuOK      bool
	mem        runtime.MemStats
	over       atomic.Bool // minRound of clock time has passed since start
	timer      *time.Timer
	s          sample
	started    bool
	// What the clock counted before its last pause.
	accElapsed, accCPU time.Duration
	accMallocs         uint64
}

// start collects garbage first, so a run does not pay for the previous
// run's heap, then begins the clock (and the CPU profile, when asked).
func (m *meter) start() error {
	if m.started {
		return errors.New("meter started twice")
	}
	m.started = true
	if err := prewarm(m.prewarmMiB); err != nil {
		return fmt.Errorf("prewarm: %w", err)
	}
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
	m.s.goroutines, m.s.heap = runtime.NumGoroutine(), m.mem.HeapAlloc
	m.cpu0, m.cpuOK = processCPU()
	m.t0 = time.Now()
	m.arm(m.minRound)
	return nil
}

// arm sets the round's timer to mark it over after d more of clock time.
func (m *meter) arm(d time.Duration) {
	if d <= 0 {
		m.over.Store(true)
		return
	}
	m.timer = time.AfterFunc(d, func() { m.over.Store(true) })
}

// pause stops the clock, and the round's timer, until resume: what the
// case does in between (opening more readers) is not measured. Only the
// driver's goroutine may call it, with no other work in flight.
func (m *meter) pause() {
	m.accElapsed += time.Since(m.t0)
	if m.timer != nil {
		m.timer.Stop() // if it already fired, over is set
	}
	if cpu, ok := processCPU(); ok {
		m.accCPU += cpu - m.cpu0
	}
	mallocs := m.mem.Mallocs
	runtime.ReadMemStats(&m.mem)
	m.accMallocs += m.mem.Mallocs - mallocs
}

// resume restarts the clock where pause stopped it.
func (m *meter) resume() {
	runtime.ReadMemStats(&m.mem)
	m.cpu0, _ = processCPU()
	m.t0 = time.Now()
	if !m.over.Load() {
		m.arm(m.minRound - m.accElapsed)
	}
}

// budget returns the round's "take more work?" test for a loop whose floor
// is floor units: true while fewer than floor are done or the round's
// minimum length has not passed. It is safe for concurrent use; one
// atomic load per call.
func (m *meter) budget(floor int) func(done int) bool {
	return func(done int) bool { return done < floor || !m.over.Load() }
}

// stop ends the clock; it records msgs messages of payload bytes each.
func (m *meter) stop(msgs, payload int) error {
	m.s.elapsed = m.accElapsed + time.Since(m.t0)
	m.s.cpu = -1
	if cpu, ok := processCPU(); ok && m.cpuOK {
		m.s.cpu = m.accCPU + cpu - m.cpu0
	}
	if m.timer != nil {
		m.timer.Stop()
	}
	mallocs := m.mem.Mallocs
	runtime.ReadMemStats(&m.mem)
	m.s.mallocs = m.accMallocs + m.mem.Mallocs - mallocs
	m.s.msgs, m.s.bytes = msgs, int64(msgs)*int64(payload)
	return m.finishProfile()
}

// finishProfile stops a running CPU profile and the round's timer; safe
// to call twice.
func (m *meter) finishProfile() error {
	if m.timer != nil {
		m.timer.Stop()
	}
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
	cpuPerMsg
	p999
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
	case p999:
		return "p99.9 latency"
	case allocsPerMsg:
		return "allocs/msg (process)"
	case cpuPerMsg:
		return "CPU/msg (process user+sys)"
	}
	return "?"
}

// caseSpec is one case of the comparison.
type caseSpec struct {
	id      string // the case number
	key     string // -run matches "<set>/<key>"
	title   string
	payload int // bytes
	// count is the floor of messages per round (consume cases: the
	// messages prefilled and read per pass; case 6: the exact number
	// of topics created).
	count   int
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
			count: sz.ProduceWait, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, p50, p99, allocsPerMsg}, run: asCase(runProduceWait)},
		{id: "2", key: "pipelined", title: "pipelined produce, 4,096 outstanding", payload: 100,
			count: sz.Pipelined, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}, run: asCase(runPipelined)},
		{id: "2a", key: "pipelined-async", title: "pipelined produce, async API, 4,096 outstanding", payload: 100,
			count: sz.PipelinedAsync, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}, run: asCase(runPipelinedAsync)},
		{id: "3", key: "batch", title: "batched produce, 100 messages per call", payload: 100,
			count: sz.Batch, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec, allocsPerMsg}, run: asCase(runBatch)},
		{id: "4", key: "partitions", title: "8 partitions, 8 goroutines, one message per call", payload: 100,
			count: sz.Partitions, parts: concurrent, metrics: []metric{msgsPerSec, cpuPerMsg, allocsPerMsg}, run: runPartitions},
		{id: "5", key: "consume", title: "consume from offset 0, 1,000 per call", payload: 100,
			count: sz.Consume, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec}, run: runConsume},
		{id: "6", key: "convergence", title: "create a topic and produce at once: time to first ack", payload: 100,
			count: sz.Topics, parts: 0, metrics: []metric{p50, p99, p999, cpuPerMsg}, run: runConvergence},
		{id: "6", key: convergenceAtOnceKey, title: "create a topic and produce to it issued together: time to the produce's ack (JetStream cannot publish to a stream not yet added: AddStream, then Publish)", payload: 100,
			count: sz.Topics, parts: 0, metrics: []metric{p50, p99, p999, cpuPerMsg}, run: runConvergenceAtOnce},
		{id: "7", key: "pipelined-1KiB", title: "case 2 with 1 KiB payloads", payload: 1 << 10,
			count: sz.Pipelined1K, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec}, run: asCase(runPipelined)},
		{id: "7", key: "pipelined-64KiB", title: "case 2 with 64 KiB payloads", payload: 64 << 10,
			count: sz.Pipelined64K, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec}, run: asCase(runPipelined)},
		{id: "7", key: "consume-1KiB", title: "case 5 with 1 KiB payloads", payload: 1 << 10,
			count: sz.Consume1K, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec}, run: runConsume},
		{id: "7", key: "consume-64KiB", title: "case 5 with 64 KiB payloads", payload: 64 << 10,
			count: sz.Consume64K, parts: 1, metrics: []metric{msgsPerSec, cpuPerMsg, mbPerSec}, run: runConsume},
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
	m.s.lat = make([]time.Duration, 0, c.count)
	if err := m.start(); err != nil {
		return err
	}
	n, err := timeEach(m, m.budget(c.count), func(i int) error {
		if err := in.produceOne(ctx, 0, payload); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.stop(n, c.payload)
}

// timeEach is how a latency case (and the raw fsync limit) times its
// operations: it calls op(i) for i = 0, 1, ... while more(i) says so,
// times each call, and appends the latencies to the meter's sample, from
// which the report takes p50, p99 and p99.9. It returns how many calls
// succeeded; the first error stops it.
func timeEach(m *meter, more func(done int) bool, op func(i int) error) (int, error) {
	n := 0
	for ; more(n); n++ {
		t := time.Now()
		if err := op(n); err != nil {
			return n, err
		}
		m.s.lat = append(m.s.lat, time.Since(t))
	}
	return n, nil
}

// exactly is a budget of n units and no time.
func exactly(n int) func(int) bool { return func(done int) bool { return done < n } }

// runPipelined is case 2 (and case 7's variants): maxPending messages
// outstanding at a time.
func runPipelined(ctx context.Context, in producer, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	if err := m.start(); err != nil {
		return err
	}
	n, err := in.pipelined(ctx, 0, payload, maxPending, m.budget(c.count))
	if err != nil {
		return err
	}
	return m.stop(n, c.payload)
}

// runPipelinedAsync is case 2a: case 2 with the ring of pending acks on
// both sides (parkway's ProduceAsync, JetStream's PublishAsync).
func runPipelinedAsync(ctx context.Context, in producer, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	if err := m.start(); err != nil {
		return err
	}
	n, err := in.pipelinedAsync(ctx, 0, payload, maxPending, m.budget(c.count))
	if err != nil {
		return err
	}
	return m.stop(n, c.payload)
}

// runBatch is case 3: produceBatch messages per call, one call at a time.
func runBatch(ctx context.Context, in producer, c caseSpec, m *meter) error {
	produce := in.batchProducer(0, make([]byte, c.payload), produceBatch)
	if err := m.start(); err != nil {
		return err
	}
	n := 0
	for more := m.budget(c.count); more(n); n += produceBatch {
		if err := produce(ctx); err != nil {
			return fmt.Errorf("batch %d: %w", n/produceBatch, err)
		}
	}
	return m.stop(n, c.payload)
}

// runPartitions is case 4: goroutine g produces to partition g (JetStream:
// stream g), one message per call, at least count/8 messages and until the
// round's time is up. The first error stops the others; all have returned
// before the clock stops.
func runPartitions(ctx context.Context, in instance, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		total atomic.Int64
	)
	if err := m.start(); err != nil {
		return err
	}
	more := m.budget(c.count / concurrent)
	for g := range concurrent {
		wg.Go(func() {
			n := 0
			for ; more(n); n++ {
				if err := in.produceOne(ctx, g, payload); err != nil {
					cancel(fmt.Errorf("partition %d, message %d: %w", g, n, err))
					break
				}
			}
			total.Add(int64(n))
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return m.stop(int(total.Load()), c.payload)
}

// maxReadersAhead bounds how many readers a consume case opens at a time.
const maxReadersAhead = 1_000

// runConsume is case 5 (and case 7's variants): the partition is filled
// with count messages in batches (not timed) and read once from offset 0
// (not timed: it warms both systems' caches alike, and its length sizes
// the batches of readers). The timed section then reads the partition
// from offset 0 again, in calls of up to consumeBatch messages, pass after
// pass, each pass through its own reader (JetStream: a new durable
// consumer; parkway: a new offset), until at least one pass is done and
// the round's time is up. Readers are opened before the clock, in
// batches; when a batch is used up the clock pauses while the next one is
// opened, so opening readers is never measured.
func runConsume(ctx context.Context, in instance, c caseSpec, m *meter) (err error) {
	produce := in.batchProducer(0, make([]byte, c.payload), produceBatch)
	for i := range (c.count + produceBatch - 1) / produceBatch {
		if err := produce(ctx); err != nil {
			return fmt.Errorf("prefill batch %d: %w", i, err)
		}
	}
	var opened []reader
	defer func() {
		for _, r := range opened {
			err = errors.Join(err, r.close())
		}
	}()
	open := func(n int) ([]reader, error) {
		rs := make([]reader, 0, n)
		for range n {
			r, err := in.reader(ctx, 0)
			if err != nil {
				return nil, err
			}
			opened = append(opened, r)
			rs = append(rs, r)
		}
		return rs, nil
	}
	first, err := open(1)
	if err != nil {
		return err
	}
	t := time.Now()
	if _, err := readPass(ctx, first[0], c.count, func(int) bool { return true }); err != nil {
		return fmt.Errorf("untimed first pass: %w", err)
	}
	batch := 1
	if m.minRound > 0 {
		// The passes the first one says the round needs, and one more.
		batch = int(min(maxReadersAhead, m.minRound/max(time.Since(t), time.Microsecond)+1))
	}
	readers, err := open(batch)
	if err != nil {
		return err
	}
	if err := m.start(); err != nil {
		return err
	}
	more := m.budget(c.count)
	got := 0
	for more(got) {
		if len(readers) == 0 {
			m.pause()
			readers, err = open(batch)
			m.resume()
			if err != nil {
				return err
			}
		}
		n, err := readPass(ctx, readers[0], c.count, func(read int) bool { return more(got + read) })
		got += n
		if err != nil {
			return err
		}
		readers = readers[1:]
	}
	return m.stop(got, c.payload)
}

// readPass reads up to count messages through r, in calls of up to
// consumeBatch, while more says so (asked before every call), and returns
// how many it read.
func readPass(ctx context.Context, r reader, count int, more func(read int) bool) (int, error) {
	read := 0
	for read < count && more(read) {
		n, err := r.read(ctx, min(consumeBatch, count-read))
		if err != nil {
			return read, fmt.Errorf("read at message %d: %w", read, err)
		}
		if n == 0 {
			return read, fmt.Errorf("read at message %d of %d returned nothing", read, count)
		}
		read += n
	}
	return read, nil
}

// runConvergence is case 6: count times, create a topic (JetStream: a
// stream) and produce one message to it at once; the latency is from the
// create call to the produce's ack. It creates exactly count topics on
// both sides, however long that takes: the latency depends on how many
// topics already exist, so both systems must reach the same number.
func runConvergence(ctx context.Context, in instance, c caseSpec, m *meter) error {
	return converge(ctx, in, c, m)
}

// convergenceAtOnceKey is the key of case 6's at-once shape.
const convergenceAtOnceKey = "convergence-at-once"

// isConvergence reports whether key is one of case 6's shapes: a fixed
// number of topics per round, not a timed round.
func isConvergence(key string) bool { return key == "convergence" || key == convergenceAtOnceKey }

// runConvergenceAtOnce is case 6 with the create and the produce issued
// together, on a system that can (atOnceCreator); on one that cannot, it
// is case 6.
func runConvergenceAtOnce(ctx context.Context, in instance, c caseSpec, m *meter) error {
	if a, ok := in.(atOnceCreator); ok {
		return converge(ctx, atOnce{a}, c, m)
	}
	return converge(ctx, in, c, m)
}

// atOnceCreator issues a topic's creation and a produce to it together,
// returning at the produce's ack.
type atOnceCreator interface {
	createProduceAtOnce(ctx context.Context, name string, payload []byte) error
}

// atOnce is an atOnceCreator seen as a creator by converge.
type atOnce struct{ a atOnceCreator }

// prepareTopics is the system's, when it has one.
func (a atOnce) prepareTopics(ctx context.Context, n int) error {
	if p, ok := a.a.(topicPreparer); ok {
		return p.prepareTopics(ctx, n)
	}
	return nil
}

func (a atOnce) createAndProduce(ctx context.Context, name string, payload []byte) error {
	return a.a.createProduceAtOnce(ctx, name, payload)
}

// creator creates a topic (JetStream: a stream) of one partition called
// name and produces one message to it, returning at the ack: case 6 and,
// on three replicas, case R6.
type creator interface {
	createAndProduce(ctx context.Context, name string, payload []byte) error
}

// converge is case 6's timed loop on any system that creates topics.
func converge(ctx context.Context, in creator, c caseSpec, m *meter) error {
	payload := make([]byte, c.payload)
	names := make([]string, c.count)
	for i := range names {
		names[i] = convergenceTopic(i)
	}
	m.s.lat = make([]time.Duration, 0, c.count)
	if p, ok := in.(topicPreparer); ok {
		if err := p.prepareTopics(ctx, c.count); err != nil {
			return err
		}
	}
	if err := m.start(); err != nil {
		return err
	}
	if _, err := timeEach(m, exactly(c.count), func(i int) error {
		return in.createAndProduce(ctx, names[i], payload)
	}); err != nil {
		return err
	}
	return m.stop(c.count, c.payload)
}

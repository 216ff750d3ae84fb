// Command idle measures what an idle cluster costs: three nodes in this
// process over the in-memory network, two shards each, one topic of N
// partitions. After the partitions converge (every one has a leader, as
// node 1 sees it), a settling pause and a synchronous collection and
// scavenge of the heap (debug.FreeOSMemory), it measures over a window the
// process CPU (getrusage: user + system, all threads) and the messages
// each node sends to each peer, by kind; the live heap at the window's
// start per replica (HeapAlloc over 3N: the whole process, the nodes'
// fixed costs included) and the resident set beside them. From the
// repository root:
//
//	go -C bench run ./cmd/idle                          # 1,000 and 10,000 partitions
//	go -C bench run ./cmd/idle -partitions 1000 -measure 20s
//	go -C bench run ./cmd/idle -partitions 10000 -burst  # all topics created at once, timed
//	go -C bench run ./cmd/idle -partitions 10000 -burst -runs 3 -converge 15m
//	go -C bench run ./cmd/idle -partitions 1000,10000,50000 -converge 15m
//	go -C bench run ./cmd/idle -partitions 300000 -burst -converge 30m -createprofile create
//	go -C bench run ./cmd/idle -partitions 10000 -burst -measure 130s  # a window that holds the runtime's forced collection
//
// By default the topics (1,000 partitions each, the per-topic maximum)
// are created one at a time, each once the previous one converged. With
// -burst they are all created back to back, and the command reports the
// time from the first CreateTopic until one produce to each partition
// (through node 1, 64 in flight, each retried until acknowledged) was
// acknowledged: until all are servable. The CPU the creation took
// (getrusage, all threads) is reported beside it, and -createprofile
// writes a CPU profile of it (where the time goes: the metadata commit,
// the reconcilers' passes, the builds, the first elections).
//
// The resident set is read at the window's start, after the creation's
// garbage was returned to the OS; the peak resident set (VmHWM) beside it
// is the creation's high-water mark.
//
// The command says what it is doing as it goes (stderr): each progress
// line carries the resident set, its peak and the memory the machine
// still has available, so a run the kernel kills for memory (SIGKILL,
// which no process can report) leaves its trend behind; a run ended by
// SIGTERM, SIGINT, SIGHUP or a closed pipe says so, with the phase it
// was in and how far it got, and exits non-zero. The window's row counts
// the garbage collections in it and the CPU they took (runtime/metrics'
// estimate), beside the process CPU, and what a collection marks per
// replica (the scannable heap and the heap objects at the window's
// start): over a multi-gigabyte heap the runtime's forced collection
// every two minutes can be most of an idle cluster's cost, and a window
// longer than two minutes holds one.
//
// After the clusters, unless -machine=false, a second table gives what
// the machine charges for memory in the same run (machineBaseline): a
// child process that holds each cluster's resident set and only wakes,
// as often as the cluster's threads were switched in, and one that holds
// nothing; on a virtual machine whose every context switch costs in
// proportion to the memory a process holds, that is most of a large
// idle cluster's CPU, and it is not parkway's.
//
// The kinds are counted by number (1 partition raft, 7 batches of them,
// 2 metadata raft, 6 node liveness), so the command also builds against
// trees that predate a kind. A batch counts as one message.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

func main() {
	reportSignals()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

// phase is what the command is doing now, for a run ended by a signal to
// say where it was ended.
var phase atomic.Pointer[string]

func setPhase(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	phase.Store(&p)
	fmt.Fprintf(os.Stderr, "%s (%s)\n", p, memoryLine())
}

// reportSignals makes an ending by signal visible: SIGTERM, SIGINT and
// SIGHUP (a timeout or a closed terminal) and SIGPIPE (the reader of the
// command's output gone, which otherwise ends a Go program without a
// word) each print the phase and the memory figures to stderr and exit
// with status 2. Only SIGKILL (the kernel's out-of-memory killer, or
// kill -9) cannot be reported: the progress lines' memory figures are
// then the trace. The signals are caught from its return on.
func reportSignals() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		sig := <-c
		p := "starting"
		if q := phase.Load(); q != nil {
			p = *q
		}
		fmt.Fprintf(os.Stderr, "idle: ended by %v while %s (%s)\n", sig, p, memoryLine())
		os.Exit(2)
	}()
}

// memoryLine is the process's resident set and peak and the machine's
// available memory, for progress lines.
func memoryLine() string {
	return fmt.Sprintf("resident %s, peak %s, machine available %s", residentSet("VmRSS:"), residentSet("VmHWM:"), memAvailable())
}

// memAvailable is MemAvailable: of /proc/meminfo, or "-".
func memAvailable() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "-"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "-"
}

func run() error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	parts := fs.String("partitions", "1000,10000", "comma-separated partition counts, one cluster each")
	settle := fs.Duration("settle", 10*time.Second, "pause after convergence before measuring")
	measure := fs.Duration("measure", 12*time.Second, "measurement window (at least 10 s for a stable figure)")
	converge := fs.Duration("converge", 3*time.Minute, "give up waiting for convergence after this long (then measure anyway)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of each measurement window to <this>-<partitions>.pprof")
	memProfile := fs.String("memprofile", "", "write a heap profile at the start of each measurement window to <this>-<partitions>.pprof")
	traceOut := fs.String("trace", "", "write an execution trace of the first 2 s of each measurement window to <this>-<partitions>.trace (what wakes an idle cluster)")
	burst := fs.Bool("burst", false, "create every topic at once and time it until a produce to every partition is acknowledged")
	logLevel := fs.String("log", "off", "log the nodes' diagnostics to stderr at this level (warn, info, debug)")
	runs := fs.Int("runs", 1, "measure each partition count this many times, each on a fresh cluster")
	createProfile := fs.String("createprofile", "", "with -burst, write a CPU profile of the creation (first CreateTopic to the last acknowledged produce) to <this>-<partitions>.pprof")
	machine := fs.Bool("machine", true, "after each cluster, measure the machine's own charge for its memory in a child process (see machineBaseline)")
	holdKB := fs.Int64("machine-hold", -1, "internal: be the machine baseline's child, holding this many kB resident")
	wakes := fs.Float64("machine-wakes", 0, "internal: the child's timer wakes per second")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *holdKB >= 0 {
		return machineChild(*holdKB, *wakes, *measure)
	}
	fmt.Printf("GOMAXPROCS %d, NumCPU %d, %s\n\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
	fmt.Println("| partitions | converged | idle CPU (% of one core) | msgs/s per ordered node pair: all | partition raft | metadata raft | liveness | other | live heap per replica (whole process / 3N) | resident set | peak resident set | load average (1 min) before / after |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	var facts []window
	for _, f := range strings.Split(*parts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad partition count %q", f)
		}
		for range max(*runs, 1) {
			w, err := one(n, *settle, *measure, *converge, *profile, *memProfile, *traceOut, *createProfile, *burst, *logLevel)
			if err != nil {
				return err
			}
			if *machine {
				facts = append(facts, w)
			}
		}
	}
	return machineBaseline(facts, *measure)
}

// maxPerTopic is the most partitions a topic may have.
const maxPerTopic = 1000

// countingBus counts what a node sends, by kind.
type countingBus struct {
	transport.Bus
	sent *[256]atomic.Int64
}

func (b countingBus) Send(m transport.Message) error {
	b.sent[m.Kind].Add(1)
	return b.Bus.Send(m)
}

func one(partitions int, settle, measure, converge time.Duration, profile, memProfile, traceOut, createProfile string, burst bool, logLevel string) (w window, err error) {
	ctx := context.Background()
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	sent := make([]*[256]atomic.Int64, len(peers))
	var nodes []*parkway.Node
	defer func() {
		t := time.Now()
		setPhase("%d partitions: closing the nodes", partitions)
		for _, n := range nodes {
			_ = n.Close()
		}
		setPhase("%d partitions: nodes closed in %.1f s", partitions, time.Since(t).Seconds())
	}()
	setPhase("%d partitions: opening three nodes", partitions)
	for i, id := range peers {
		sent[i] = new([256]atomic.Int64)
		var logger hclog.Logger
		if lvl := hclog.LevelFromString(logLevel); lvl != hclog.NoLevel && lvl != hclog.Off {
			logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("node%d", id), Level: lvl, Output: os.Stderr})
		}
		n, err := parkway.Open(parkway.Config{Shards: 2, RequestTimeout: 30 * time.Second, Logger: logger,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: countingBus{Bus: net.Endpoint(id), sent: sent[i]}}})
		if err != nil {
			return w, err
		}
		nodes = append(nodes, n)
	}
	s, err := nodes[0].Admin().CreateStream(ctx, "idle")
	if err != nil {
		return w, err
	}
	var conv string
	if burst {
		var stop func()
		if stop, err = startProfile(createProfile, partitions); err != nil {
			return w, err
		}
		load0 := loadAverage()
		cpu0, _ := processCPU()
		conv, err = createBurst(ctx, nodes[0], s, partitions, converge)
		cpu1, _ := processCPU()
		stop()
		conv += fmt.Sprintf("; creation CPU %.1f s (load %s / %s)", time.Duration(cpu1-cpu0).Seconds(), load0, loadAverage())
	} else {
		conv, err = createSequential(ctx, nodes[0], s, partitions, converge)
	}
	if err != nil {
		return w, err
	}
	setPhase("%d partitions: settling %v", partitions, settle)
	time.Sleep(settle)
	setPhase("%d partitions: collecting and returning the creation's garbage (debug.FreeOSMemory)", partitions)
	// Return the creation's garbage to the OS before the window opens:
	// debug.FreeOSMemory collects and scavenges synchronously, where a
	// plain runtime.GC leaves the runtime's background scavenger
	// returning the freed heap (madvise) inside the window — seconds of
	// CPU at 10,000 partitions that belong to the creation, not to an
	// idle cluster.
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapPer := float64(ms.HeapAlloc) / float64(3*partitions)
	// What every collection marks, per replica: the scannable heap (the
	// bytes of objects up to their last pointer) and the objects.
	scan := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}, {Name: "/gc/heap/objects:objects"}}
	metrics.Read(scan)
	var scanPer, objectsPer float64
	if scan[0].Value.Kind() == metrics.KindUint64 && scan[1].Value.Kind() == metrics.KindUint64 {
		scanPer = float64(scan[0].Value.Uint64()) / float64(3*partitions)
		objectsPer = float64(scan[1].Value.Uint64()) / float64(3*partitions)
	}
	rss, peak := residentSet("VmRSS:"), residentSet("VmHWM:")
	setPhase("%d partitions: memory the runtime holds at the window's start: %s", partitions, memoryClasses())
	if memProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%d.pprof", memProfile, partitions))
		if err != nil {
			return w, err
		}
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return w, err
		}
	}
	var before [256]int64
	for _, c := range sent {
		for k := range c {
			before[k] += c[k].Load()
		}
	}
	sw0, _ := processSwitches()
	cpu0, ok := processCPU()
	if !ok {
		return w, fmt.Errorf("getrusage unavailable")
	}
	stopProfile, err := startProfile(profile, partitions)
	if err != nil {
		return w, err
	}
	var stopTrace *time.Timer
	if traceOut != "" {
		f, err := os.Create(fmt.Sprintf("%s-%d.trace", traceOut, partitions))
		if err != nil {
			return w, err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return w, err
		}
		stopTrace = time.AfterFunc(2*time.Second, trace.Stop)
		defer func() {
			if stopTrace.Stop() {
				trace.Stop()
			}
		}()
	}
	setPhase("%d partitions: measuring for %v", partitions, measure)
	load0 := loadAverage()
	rt0 := runtimeCounts()
	t0 := time.Now()
	time.Sleep(measure)
	cpu1, _ := processCPU()
	sw1, _ := processSwitches()
	stopProfile()
	wall := time.Since(t0)
	rt1 := runtimeCounts()
	// What the runtime did in the window beside parkway's own work: its
	// collections (a forced one every two minutes, or one an allocation
	// triggered) mark the whole live heap, which grows with the count.
	gcCPU := rt1.gcCPU - rt0.gcCPU
	conv += fmt.Sprintf("; window: %d GC cycles, GC CPU %.2f s (%.2f %% of one core), %d goroutines; per replica at its start: %.0f B scannable heap, %.1f heap objects",
		rt1.gcs-rt0.gcs, gcCPU, 100*gcCPU/wall.Seconds(), rt1.goroutines, scanPer, objectsPer)
	var delta [256]float64
	var all float64
	for _, c := range sent {
		for k := range c {
			delta[k] += float64(c[k].Load())
		}
	}
	for k := range delta {
		delta[k] -= float64(before[k])
		all += delta[k]
	}
	pairs := float64(len(peers) * (len(peers) - 1))
	rate := func(x float64) string { return fmt.Sprintf("%.1f", x/wall.Seconds()/pairs) }
	raft := delta[1] + delta[7] // single messages and batches
	other := all - raft - delta[2] - delta[6]
	_, err = fmt.Printf("| %d | %s | %.2f %% | %s | %s | %s | %s | %s | %.0f B | %s | %s | %s / %s |\n", partitions, conv,
		100*float64(cpu1-cpu0)/float64(wall), rate(all), rate(raft), rate(delta[2]), rate(delta[6]), rate(other),
		heapPer, rss, peak, load0, loadAverage())
	w = window{partitions: partitions, rssKB: kB(rss), peakKB: kB(peak),
		cpuPct: 100 * float64(cpu1-cpu0) / float64(wall), switchesPerSec: float64(sw1-sw0) / wall.Seconds()}
	return w, err
}

// startProfile starts a CPU profile to <prefix>-<partitions>.pprof, and
// returns what stops it and closes the file; an empty prefix profiles
// nothing.
func startProfile(prefix string, partitions int) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s-%d.pprof", prefix, partitions))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// createSequential creates the partitions as topics of maxPerTopic, one
// at a time, each once the previous one converged (every partition has a
// leader, as n sees it), so what is measured is the idle cost of N
// partitions, not whether N can be built at once. It reports how long
// that took, or how far it got within converge.
func createSequential(ctx context.Context, n *parkway.Node, s parkway.Stream, partitions int, converge time.Duration) (string, error) {
	start := time.Now()
	servable := 0
	for left := partitions; left > 0; left -= maxPerTopic {
		tp, err := n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", partitions-left), min(left, maxPerTopic))
		if err != nil {
			return "", err
		}
		got, ok := waitLeaders(ctx, n, []parkway.Topic{tp}, partitions-left, min(left, maxPerTopic), start, converge, partitions)
		servable += got
		if !ok {
			return fmt.Sprintf("no: %d of %d with a leader after %.0f s", servable, partitions, time.Since(start).Seconds()), nil
		}
	}
	return fmt.Sprintf("in %.1f s", time.Since(start).Seconds()), nil
}

// createBurst creates every topic back to back, then produces one
// message to each partition through n (64 in flight), each retried until
// acknowledged or until converge has passed since the first CreateTopic:
// the partitions are servable when every produce is acknowledged. (A
// sweep of Leader calls, one shard round trip per partition, is too slow
// to poll 10,000 partitions whose shards are busy building them.)
func createBurst(ctx context.Context, n *parkway.Node, s parkway.Stream, partitions int, converge time.Duration) (string, error) {
	setPhase("%d partitions: creating the topics", partitions)
	start := time.Now()
	var topics []parkway.Topic
	for left := partitions; left > 0; left -= maxPerTopic {
		tp, err := n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", partitions-left), min(left, maxPerTopic))
		if err != nil {
			return "", err
		}
		topics = append(topics, tp)
	}
	created := time.Since(start)
	setPhase("%d partitions: created in %.1f s, producing one message to each", partitions, created.Seconds())
	var next, acked, retries atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= partitions {
					return
				}
				tp := topics[i/maxPerTopic]
				for time.Since(start) < converge {
					_, err := n.Produce(ctx, tp, parkway.PartitionID(uint32(i%maxPerTopic)), parkway.Message{Payload: []byte("x")})
					if err == nil {
						if a := acked.Add(1); a%1000 == 0 {
							setPhase("%d partitions: %d acknowledged a produce after %.1f s", partitions, a, time.Since(start).Seconds())
						}
						break
					}
					retries.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if a := acked.Load(); a < int64(partitions) {
		setPhase("%d partitions: the convergence limit (%v) passed with %d acknowledged, at %.1f s", partitions, converge, a, time.Since(start).Seconds())
		return fmt.Sprintf("no: %d of %d acknowledged a produce after %.0f s", a, partitions, time.Since(start).Seconds()), nil
	}
	return fmt.Sprintf("created (%d CreateTopic of ≤ %d) in %.1f s, one produce to each acknowledged at %.1f s (%d produces retried after an error)",
		len(topics), maxPerTopic, created.Seconds(), time.Since(start).Seconds(), retries.Load()), nil
}

// waitLeaders polls until every partition of topics (count partitions,
// numbered from first in topics of maxPerTopic) has a leader as n sees
// it, or until converge has passed since start (false). It reports how
// many have one; total labels the progress lines.
func waitLeaders(ctx context.Context, n *parkway.Node, topics []parkway.Topic, first, count int, start time.Time, converge time.Duration, total int) (int, bool) {
	type part struct {
		t parkway.Topic
		p uint32
	}
	var waiting []part
	for i := range count {
		waiting = append(waiting, part{topics[i/maxPerTopic], uint32(i % maxPerTopic)})
	}
	done := first
	led := 0
	for {
		kept := waiting[:0]
		for _, w := range waiting {
			if lead, err := n.Cluster().Leader(ctx, w.t, w.p); err == nil && lead != 0 {
				led++
			} else {
				kept = append(kept, w)
			}
		}
		waiting = kept
		setPhase("%d partitions: %d with a leader after %.1f s", total, done+led, time.Since(start).Seconds())
		if len(waiting) == 0 {
			return led, true
		}
		if time.Since(start) > converge {
			return led, false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// runtimeSample is what runtimeCounts reads of the runtime.
type runtimeSample struct {
	gcs, goroutines uint64
	gcCPU           float64 // seconds
}

// runtimeCounts reads the completed GC cycles, the live goroutines and
// the CPU the collector has used (runtime/metrics: an estimate from its
// workers' time, mark and pauses).
func runtimeCounts() runtimeSample {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/goroutines:goroutines"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	var r runtimeSample
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.gcs = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		r.goroutines = s[1].Value.Uint64()
	}
	if s[2].Value.Kind() == metrics.KindFloat64 {
		r.gcCPU = s[2].Value.Float64()
	}
	return r
}

// loadAverage is the machine's one-minute load average ("n/a" where
// /proc/loadavg is missing).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "n/a"
}

// residentSet is the process's resident set (field VmRSS: of
// /proc/self/status) or its peak (VmHWM:), or "-" where that file is
// missing.
func residentSet(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "-"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			return strings.TrimSpace(v)
		}
	}
	return "-"
}

// memoryClasses is where the runtime's mapped memory is, from
// runtime/metrics' /memory/classes: the live objects, the free room
// inside their spans (the creation's garbage leaves spans partly filled,
// and a span is returned to the OS only when it is empty), free spans
// not yet returned, goroutine stacks and the runtime's own metadata. Of
// a resident set well above the live heap, it says which part is which.
func memoryClasses() string {
	names := []string{
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/heap/stacks:bytes",
		"/memory/classes/metadata/other:bytes",
		"/memory/classes/metadata/mspan/inuse:bytes",
		"/memory/classes/metadata/mcache/inuse:bytes",
		"/memory/classes/other:bytes",
		"/memory/classes/profiling/buckets:bytes",
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	var b strings.Builder
	for i, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		name := strings.TrimSuffix(strings.TrimPrefix(names[i], "/memory/classes/"), ":bytes")
		fmt.Fprintf(&b, "%s %.0f MB", name, float64(x.Value.Uint64())/1e6)
	}
	return b.String()
}

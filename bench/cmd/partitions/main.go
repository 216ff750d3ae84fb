// Command partitions measures a single node with many partitions on disk:
// the time to build many partitions at once, and the time, resident
// memory and descriptors of reopening a node that holds many. From the
// repository root:
//
//	go -C bench run ./cmd/partitions -build 9000          # build 9,000 partitions on a fresh node
//	go -C bench run ./cmd/partitions -reopen 100000 -dir D # create 100,000 once in D (kept), then reopen D
//	go -C bench run ./cmd/partitions -reopen 5000 -nodes 3 -budget 1000 # the same, 3 nodes in this process
//
// -build creates the partitions as topics of 1,000 partitions each (the
// per-topic maximum) in one stream on a fresh 2-shard node with a data
// directory, and reports the time from the first CreateTopic until every
// partition is materialised, then the time to produce one message to
// each (FsyncAlways, the default: the first Sync of a partition also
// makes its directories durable), 64 produces in flight.
//
// -reopen creates the partitions in -dir (with one message each) if the
// directory holds no node yet, in a child process, then reopens it in
// another child process: the time from parkway.Open until every
// partition is materialised, and that process's resident set (VmRSS,
// VmHWM) and open descriptors after it. Each measurement runs in a
// process of its own, so creating the data does not inflate the RSS of
// the reopen. With -nodes N (N > 1) the node is a cluster of N nodes in
// the process (cluster.go): partitions are replicated, each with a raft
// log, and the reopen also reads every partition once through node 1 and
// reports the peak of the process's open descriptors.
//
// -cpu sweeps CPU per produced message over partition counts (see
// cpu.go):
//
//	go -C bench run ./cmd/partitions -cpu 8,1000,10000   # both policies, 3 rounds of ≥ 2 s each
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/bench"
	"github.com/parkway-io/parkway/vfs"
)

const perTopic = 1000

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "partitions:", err)
		os.Exit(1)
	}
}

func run() error {
	build := flag.Int("build", 0, "build this many partitions on a fresh node and time it")
	reopen := flag.Int("reopen", 0, "create this many partitions in -dir (once), then time reopening it")
	dir := flag.String("dir", "", "data directory for -reopen (kept between runs; default: a temporary one, removed)")
	phase := flag.String("phase", "", "internal: create or open, run in a child process")
	shards := flag.Int("shards", 2, "shards of the node")
	nodes := flag.Int("nodes", 1, "with -reopen: nodes of a cluster in this process (replicated partitions, see cluster.go)")
	budget := flag.Int("budget", 0, "MaxOpenFiles of each node (0: the default)")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up on a phase after this long")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run (or of the phase) to this file")
	cpuCounts := flag.String("cpu", "", "partition-count sweep: CPU per message at each of these partition counts (e.g. 8,1000,10000)")
	fsyncs := flag.String("fsync", "interval,always", "fsync policies of the -cpu sweep")
	rounds := flag.Int("rounds", 3, "rounds per cell of the -cpu sweep")
	round := flag.Duration("round", 2*time.Second, "minimum length of a -cpu round")
	inflight := flag.Int("inflight", 4096, "unacknowledged produces of the -cpu sweep")
	profDir := flag.String("profdir", "", "write a CPU profile of each -cpu round into this directory")
	flag.Parse()
	if *cpuCounts != "" {
		counts, err := parseCounts(*cpuCounts)
		if err != nil {
			return err
		}
		policies, err := parsePolicies(*fsyncs)
		if err != nil {
			return err
		}
		return sweepCPU(counts, policies, *shards, *rounds, *inflight, *round, *timeout, *profDir)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	switch {
	case *phase == "create" && *nodes > 1:
		return clusterCreate(*dir, *reopen, *nodes, *shards, *budget, *timeout)
	case *phase == "open" && *nodes > 1:
		return clusterOpen(*dir, *reopen, *nodes, *shards, *budget, *timeout)
	case *phase == "create":
		return create(*dir, *reopen, *shards, *timeout)
	case *phase == "open":
		return open(*dir, *reopen, *shards, *timeout)
	case *build > 0:
		return buildMany(*build, *shards, *timeout)
	case *reopen > 0:
		return reopenMany(*dir, *reopen, *shards, *nodes, *budget, *timeout)
	}
	flag.Usage()
	return errors.New("one of -build, -reopen or -cpu is required")
}

// materialised sums parkway_partitions_materialised_total over shards.
func materialised(reg *prometheus.Registry) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "parkway_partitions_materialised_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

// waitMaterialised polls the counter until it reaches n.
func waitMaterialised(ctx context.Context, reg *prometheus.Registry, n int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		got, err := materialised(reg)
		if err != nil {
			return err
		}
		if got >= float64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%.0f of %d partitions materialised: %w", got, n, ctx.Err())
		case <-t.C:
		}
	}
}

// syncCounter is the operating system's filesystem, counting file and
// directory fsyncs.
type syncCounter struct {
	vfs.FS
	files, dirs atomic.Int64
}

type countedFile struct {
	vfs.File
	c *syncCounter
}

func (c *syncCounter) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countedFile{f, c}, nil
}

func (f countedFile) Sync() error {
	f.c.files.Add(1)
	return f.File.Sync()
}

func (c *syncCounter) SyncDir(dir string) error {
	c.dirs.Add(1)
	return c.FS.SyncDir(dir)
}

// fsyncs returns the file and directory fsyncs so far.
func (c *syncCounter) fsyncs() (files, dirs int64) { return c.files.Load(), c.dirs.Load() }

var counter = &syncCounter{FS: vfs.Default}

func openNode(dir string, shards int) (*parkway.Node, *prometheus.Registry, error) {
	n, err := parkway.Open(parkway.Config{DataDir: dir, FS: counter, Shards: shards, RequestTimeout: time.Minute})
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(n.Metrics()); err != nil {
		_ = n.Close()
		return nil, nil, err
	}
	return n, reg, nil
}

// createTopics creates count partitions in topics of perTopic.
func createTopics(ctx context.Context, n *parkway.Node, count int) ([]parkway.Topic, error) {
	s, err := n.Admin().CreateStream(ctx, "many")
	if err != nil {
		return nil, err
	}
	var topics []parkway.Topic
	for i := 0; count > 0; i++ {
		parts := min(count, perTopic)
		t, err := n.Admin().CreateTopic(ctx, s, fmt.Sprintf("t%d", i), parts)
		if err != nil {
			return nil, err
		}
		topics = append(topics, t)
		count -= parts
	}
	return topics, nil
}

// produceAll produces one message to every partition, inflight at once.
func produceAll(ctx context.Context, n *parkway.Node, topics []parkway.Topic, count, inflight int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inflight)
	for range inflight {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= count {
					return
				}
				t := topics[i/perTopic]
				if _, err := n.Produce(ctx, t, parkway.PartitionID(uint32(i%perTopic)), parkway.Message{Payload: []byte("x")}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func buildMany(count, shards int, timeout time.Duration) error {
	dir, err := os.MkdirTemp("", "parkway-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n, reg, err := openNode(dir, shards)
	if err != nil {
		return err
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start, cpu0 := time.Now(), cpuNow()
	topics, err := createTopics(ctx, n, count)
	if err != nil {
		return err
	}
	created := time.Since(start)
	if err := waitMaterialised(ctx, reg, count); err != nil {
		return err
	}
	built, builtCPU := time.Since(start), cpuNow()-cpu0
	buildFiles, buildDirs := counter.fsyncs()
	start, cpu0 = time.Now(), cpuNow()
	if err := produceAll(ctx, n, topics, count, 64); err != nil {
		return err
	}
	produced, producedCPU := time.Since(start), cpuNow()-cpu0
	files, dirs := counter.fsyncs()
	fmt.Printf("build %d partitions (%d shards): create topics %v, all materialised %v (CPU %v, fsyncs: %d files, %d directories); "+
		"first produce to each (FsyncAlways, 64 in flight) %v (CPU %v, fsyncs: %d files, %d directories)\n",
		count, shards, created.Round(time.Millisecond), built.Round(time.Millisecond), builtCPU.Round(time.Millisecond), buildFiles, buildDirs,
		produced.Round(time.Millisecond), producedCPU.Round(time.Millisecond), files-buildFiles, dirs-buildDirs)
	return nil
}

// reopenMany runs the create phase (unless dir holds a node) and the open
// phase, each in a child process.
func reopenMany(dir string, count, shards, nodes, budget int, timeout time.Duration) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "parkway-reopen-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	marker := filepath.Join(dir, "metadata")
	if nodes > 1 {
		marker = filepath.Join(dir, "node1", "metadata")
	}
	if _, err := os.Stat(marker); err != nil {
		if err := child("create", dir, count, shards, nodes, budget, timeout); err != nil {
			return err
		}
	} else {
		fmt.Printf("%s holds a node: not created again\n", dir)
	}
	return child("open", dir, count, shards, nodes, budget, timeout)
}

func child(phase, dir string, count, shards, nodes, budget int, timeout time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-phase", phase, "-dir", dir, "-reopen", fmt.Sprint(count), "-shards", fmt.Sprint(shards),
		"-nodes", fmt.Sprint(nodes), "-budget", fmt.Sprint(budget), "-timeout", timeout.String())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func create(dir string, count, shards int, timeout time.Duration) error {
	n, reg, err := openNode(dir, shards)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	topics, err := createTopics(ctx, n, count)
	if err != nil {
		_ = n.Close()
		return err
	}
	if err := waitMaterialised(ctx, reg, count); err != nil {
		_ = n.Close()
		return err
	}
	if err := produceAll(ctx, n, topics, count, 64); err != nil {
		_ = n.Close()
		return err
	}
	if err := n.Close(); err != nil {
		return err
	}
	fmt.Printf("created %d partitions with one message each in %v\n", count, time.Since(start).Round(time.Millisecond))
	return nil
}

func open(dir string, count, shards int, timeout time.Duration) error {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start, cpu0 := time.Now(), cpuNow()
	n, reg, err := openNode(dir, shards)
	if err != nil {
		return err
	}
	defer n.Close()
	opened := time.Since(start)
	if err := waitMaterialised(ctx, reg, count); err != nil {
		return err
	}
	all, allCPU := time.Since(start), cpuNow()-cpu0
	files, dirs := counter.fsyncs()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, _ := os.ReadDir("/proc/self/fd")
	fmt.Printf("reopen %d partitions (%d shards): Open returned %v, all materialised %v (CPU %v, fsyncs: %d files, %d directories); VmRSS %s, VmHWM %s, Go heap in use %.0f MiB, open descriptors %d\n",
		count, shards, opened.Round(time.Millisecond), all.Round(time.Millisecond), allCPU.Round(time.Millisecond), files, dirs,
		procStatus("VmRSS"), procStatus("VmHWM"), float64(ms.HeapInuse)/(1<<20), len(fds))
	return nil
}

// cpuNow is the process's CPU time so far (0 where unknown).
func cpuNow() time.Duration {
	d, _ := bench.ProcessCPU()
	return d
}

// procStatus returns a field of /proc/self/status ("n/a" off Linux).
func procStatus(field string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "n/a"
}

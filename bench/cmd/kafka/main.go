// Command kafka measures parkway's Kafka listener (package kafka) against
// franz-go's kfake, each broker in a process of its own driven over
// loopback by this process with a franz-go producer (idempotent, acks=all,
// default batching and linger), so each broker's own CPU is measured
// apart from the client's: the broker process answers getrusage
// (RUSAGE_SELF, user + system) at the start and end of every round.
//
// Brokers:
//
//	listener-memory  a parkway node without a data directory, the listener on it
//	listener-disk    a parkway node on disk, the topic FsyncInterval (-interval),
//	                 or FsyncAlways (-fsync always)
//	kfake            franz-go's kfake, in memory
//
// and, for the protocol's cost, parkway's own ProduceAsync in one process
// (no network, no client library: a ring of 512 pending acks from one
// goroutine, messages spread over the partitions), in memory and on disk
// at the same settings; its CPU is the whole process's, producer included.
//
// Every round lasts -round (at least 1 s) and the figure is the median of
// -rounds. From the repository root:
//
//	go -C bench run ./cmd/kafka
//	go -C bench run ./cmd/kafka -rounds 5 -round 3s -only listener-memory,kfake
//	go -C bench run ./cmd/kafka -only listener-memory -profile /tmp/prof
//	go -C bench run ./cmd/kafka -size 1024
//	go -C bench run ./cmd/kafka -fsync always -only listener-disk,async-disk
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/bench"
	"github.com/parkway-io/parkway/kafka"
)

const topicName = "bench"

var brokers = []string{"listener-memory", "listener-disk", "kfake", "async-memory", "async-disk"}

type options struct {
	round    time.Duration
	rounds   int
	parts    int
	size     int
	interval time.Duration
	fsync    string
	profile  string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	var o options
	fs.DurationVar(&o.round, "round", 2*time.Second, "length of one round (at least 1s)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per broker; the median is reported")
	fs.IntVar(&o.parts, "partitions", 4, "partitions of the topic")
	fs.IntVar(&o.size, "size", 100, "record value size in bytes")
	fs.DurationVar(&o.interval, "interval", 2*time.Minute, "FsyncInterval of the on-disk cases (the compare command's interval)")
	fs.StringVar(&o.fsync, "fsync", "interval", "fsync policy of the on-disk cases: interval (-interval) or always")
	fs.StringVar(&o.profile, "profile", "", "write each broker process's CPU profile to DIR/<broker>.pprof")
	only := fs.String("only", strings.Join(brokers, ","), "comma-separated brokers to run")
	child := fs.String("broker", "", "internal: serve this broker in this process (the child side)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *child != "" {
		return serveChild(*child, o)
	}
	if o.round < time.Second {
		return errors.New("-round must be at least 1s")
	}
	if o.fsync != "interval" && o.fsync != "always" {
		return fmt.Errorf("-fsync %q: want interval or always", o.fsync)
	}
	var results []result
	for _, b := range strings.Split(*only, ",") {
		if !slices.Contains(brokers, b) {
			return fmt.Errorf("unknown broker %q (have %s)", b, strings.Join(brokers, ", "))
		}
		r, err := measure(b, o)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "%s: %.0f records/s, broker CPU %.2f µs/record, client CPU %.2f µs/record\n", b, r.rate, r.brokerCPU, r.clientCPU)
	}
	report(os.Stdout, results, o)
	return nil
}

// result is one broker's medians over the rounds.
type result struct {
	broker    string
	rate      float64 // acknowledged records per second
	brokerCPU float64 // broker process CPU per record, µs
	clientCPU float64 // this process's CPU per record, µs (0 for the async cases)
	rounds    []float64
}

func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func report(w io.Writer, rs []result, o options) {
	fsync := "FsyncAlways"
	if o.fsync == "interval" {
		fsync = "FsyncInterval " + o.interval.String()
	}
	fmt.Fprintf(w, "%d-byte records, %d partitions, on disk %s, %d rounds of %v (median), %d CPUs, load average %s at the end\n\n",
		o.size, o.parts, fsync, o.rounds, o.round, runtime.NumCPU(), load())
	fmt.Fprintln(w, "| broker | records/s | broker CPU µs/record | client CPU µs/record | rounds (records/s) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- |")
	by := map[string]result{}
	for _, r := range rs {
		by[r.broker] = r
		var rounds []string
		for _, x := range r.rounds {
			rounds = append(rounds, fmt.Sprintf("%.0f", x))
		}
		client := fmt.Sprintf("%.2f", r.clientCPU)
		if strings.HasPrefix(r.broker, "async") {
			client = "(in the broker's)"
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %s | %s |\n", r.broker, r.rate, r.brokerCPU, client, strings.Join(rounds, ", "))
	}
	fmt.Fprintln(w)
	ratio := func(what, a, b string) {
		ra, oka := by[a]
		rb, okb := by[b]
		if !oka || !okb {
			return
		}
		fmt.Fprintf(w, "- %s: rate %.2f×, broker CPU per record %.2f×\n", what, ra.rate/rb.rate, ra.brokerCPU/rb.brokerCPU)
	}
	ratio("listener (memory) / kfake", "listener-memory", "kfake")
	ratio("listener (disk) / kfake", "listener-disk", "kfake")
	ratio("listener (memory) / ProduceAsync (memory)", "listener-memory", "async-memory")
	ratio("listener (disk) / ProduceAsync (disk)", "listener-disk", "async-disk")
}

// measure starts broker b in a child process and runs the rounds.
func measure(b string, o options) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	args := []string{"-broker", b, "-partitions", strconv.Itoa(o.parts), "-size", strconv.Itoa(o.size), "-interval", o.interval.String(), "-fsync", o.fsync}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return result{}, err
		}
		args = append(args, "-profile", o.profile)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return result{}, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	out := bufio.NewScanner(outPipe)
	ask := func(line string) ([]string, error) {
		if line != "" {
			if _, err := fmt.Fprintln(in, line); err != nil {
				return nil, err
			}
		}
		if !out.Scan() {
			return nil, fmt.Errorf("broker process ended: %v", out.Err())
		}
		return strings.Fields(out.Text()), nil
	}
	r, err := drive(b, o, ask)
	in.Close()
	return r, errors.Join(err, cmd.Wait())
}

func drive(b string, o options, ask func(string) ([]string, error)) (result, error) {
	ready, err := ask("")
	if err != nil {
		return result{}, err
	}
	if len(ready) != 2 || ready[0] != "ready" {
		return result{}, fmt.Errorf("broker said %q", ready)
	}
	res := result{broker: b}
	var rates, bcpu, ccpu []float64
	if strings.HasPrefix(b, "async") {
		for range o.rounds {
			f, err := ask("run " + o.round.String())
			if err != nil {
				return res, err
			}
			if len(f) != 4 || f[0] != "ran" {
				return res, fmt.Errorf("broker said %q", f)
			}
			n, _ := strconv.ParseFloat(f[1], 64)
			el, _ := strconv.ParseFloat(f[2], 64)
			cpu, _ := strconv.ParseFloat(f[3], 64)
			rates = append(rates, n/(el/1e9))
			bcpu = append(bcpu, cpu/1e3/n)
			ccpu = append(ccpu, 0)
		}
	} else {
		cl, err := kgo.NewClient(kgo.SeedBrokers(ready[1]), kgo.DefaultProduceTopic(topicName),
			kgo.RequiredAcks(kgo.AllISRAcks())) // idempotent is kgo's default
		if err != nil {
			return res, err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		value := payload(o.size)
		// Warm every partition (kgo's sticky partitioner moves on per batch).
		for range 20 * o.parts {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				return res, fmt.Errorf("warm: %w", err)
			}
		}
		brokerCPU := func() (float64, error) {
			f, err := ask("cpu")
			if err != nil {
				return 0, err
			}
			if len(f) != 2 || f[0] != "cpu" {
				return 0, fmt.Errorf("broker said %q", f)
			}
			return strconv.ParseFloat(f[1], 64)
		}
		for range o.rounds {
			b0, err := brokerCPU()
			if err != nil {
				return res, err
			}
			c0, _ := bench.ProcessCPU()
			n, el, err := produceFor(ctx, cl, value, o.round)
			if err != nil {
				return res, err
			}
			c1, _ := bench.ProcessCPU()
			b1, err := brokerCPU()
			if err != nil {
				return res, err
			}
			rates = append(rates, float64(n)/el.Seconds())
			bcpu = append(bcpu, (b1-b0)/1e3/float64(n))
			ccpu = append(ccpu, float64((c1-c0).Nanoseconds())/1e3/float64(n))
		}
	}
	res.rounds = slices.Clone(rates)
	res.rate, res.brokerCPU, res.clientCPU = median(rates), median(bcpu), median(ccpu)
	return res, nil
}

// produceFor produces records for d, then flushes; it returns how many
// were acknowledged and the time from the first produce to the flush.
func produceFor(ctx context.Context, cl *kgo.Client, value []byte, d time.Duration) (int64, time.Duration, error) {
	var acked atomic.Int64
	var failed atomic.Pointer[error]
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
	}
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; ; i++ {
		if i%256 == 0 && time.Now().After(deadline) {
			break
		}
		cl.Produce(ctx, &kgo.Record{Value: value}, cb)
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, err
	}
	el := time.Since(start)
	if e := failed.Load(); e != nil {
		return 0, 0, *e
	}
	return acked.Load(), el, nil
}

// payload is size random bytes, the same for every record: data that
// does not compress (kgo compresses batches with snappy by default, and
// zeros would shrink to nothing and make the brokers' work unlike a real
// one's).
func payload(size int) []byte {
	b := make([]byte, size)
	rand.Read(b)
	return b
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// --- the broker process ----------------------------------------------------

func rusageSelf() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// serveChild runs broker b until its standard input closes, answering the
// driver's lines: "cpu" (this process's CPU so far, ns) and, for the async
// cases, "run D" (produce for D; answers count, elapsed ns, CPU ns).
func serveChild(b string, o options) (err error) {
	if o.profile != "" {
		f, err := os.Create(filepath.Join(o.profile, b+".pprof"))
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	ctx := context.Background()
	var (
		addr    string
		stop    func() error
		produce func(time.Duration) (int, time.Duration, error)
	)
	switch b {
	case "kfake":
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.parts), topicName))
		if err != nil {
			return err
		}
		addr = c.ListenAddrs()[0]
		stop = func() error { c.Close(); return nil }
	default:
		dir := ""
		if strings.HasSuffix(b, "-disk") {
			if dir, err = os.MkdirTemp("", "parkway-kafka-bench-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		// Two shards, as the compare command: the reference machine has two cores.
		node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 2})
		if err != nil {
			return err
		}
		var opts []parkway.TopicOption
		switch {
		case dir != "" && o.fsync == "always":
			opts = append(opts, parkway.WithFsync(parkway.FsyncAlways, 0))
		case dir != "":
			opts = append(opts, parkway.WithFsync(parkway.FsyncInterval, o.interval))
		}
		s, err := node.Admin().CreateStream(ctx, kafka.DefaultStream)
		if err != nil {
			return errors.Join(err, node.Close())
		}
		topic, err := node.Admin().CreateTopic(ctx, s, topicName, o.parts, opts...)
		if err != nil {
			return errors.Join(err, node.Close())
		}
		if strings.HasPrefix(b, "async") {
			addr = "-"
			stop = node.Close
			produce = func(d time.Duration) (int, time.Duration, error) { return produceAsync(ctx, node, topic, o, d) }
			// Warm every partition, as the Kafka cases do.
			if _, _, err := produce(100 * time.Millisecond); err != nil {
				return errors.Join(err, node.Close())
			}
			break
		}
		srv, err := kafka.NewServer(node, kafka.Config{})
		if err != nil {
			return errors.Join(err, node.Close())
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return errors.Join(err, node.Close())
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		addr = l.Addr().String()
		stop = func() error {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err := srv.Shutdown(sctx)
			<-served
			return errors.Join(err, node.Close())
		}
	}
	fmt.Printf("ready %s\n", addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "cpu":
			fmt.Printf("cpu %d\n", rusageSelf())
		case len(f) == 2 && f[0] == "run" && produce != nil:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				return errors.Join(err, stop())
			}
			c0 := rusageSelf()
			n, el, err := produce(d)
			if err != nil {
				return errors.Join(err, stop())
			}
			fmt.Printf("ran %d %d %d\n", n, el.Nanoseconds(), rusageSelf()-c0)
		default:
			fmt.Println("unknown")
		}
	}
	return stop()
}

// produceAsync produces single messages through ProduceAsync for d from
// one goroutine, keeping a ring of 512 pending acks (the oldest awaited
// before its slot is reused), spreading them over the partitions.
func produceAsync(ctx context.Context, node *parkway.Node, topic parkway.Topic, o options, d time.Duration) (int, time.Duration, error) {
	const window = 512
	value := payload(o.size)
	ring := make([]*parkway.PendingAck, window)
	start := time.Now()
	deadline := start.Add(d)
	n := 0
	for ; n%256 != 0 || time.Now().Before(deadline); n++ {
		slot := n % window
		if p := ring[slot]; p != nil {
			if _, err := p.Wait(ctx); err != nil {
				return 0, 0, err
			}
		}
		ring[slot] = node.ProduceAsync(ctx, topic, parkway.PartitionID(uint32(n%o.parts)), parkway.Message{Payload: value})
	}
	for _, p := range ring {
		if p != nil {
			if _, err := p.Wait(ctx); err != nil {
				return 0, 0, err
			}
		}
	}
	return n, time.Since(start), nil
}

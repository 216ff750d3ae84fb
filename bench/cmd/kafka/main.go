// Command kafka measures parkway's Kafka listener (package kafka) against
// franz-go's kfake and against nats-server with JetStream, each broker in
// a process of its own driven over loopback by this process, so each
// broker's own CPU is measured apart from the client's: the broker process
// answers getrusage (RUSAGE_SELF, user + system) at the start and end of
// every round.
//
// Brokers:
//
//	listener-memory   a parkway node without a data directory, the listener on it
//	listener-disk     a parkway node on disk, its topics FsyncInterval (-interval)
//	                  or FsyncAlways (-fsync always)
//	kfake             franz-go's kfake, in memory
//	jetstream-memory  nats-server with JetStream, memory-storage streams
//	jetstream-disk    nats-server with JetStream, file-storage streams, its
//	                  sync_interval -interval or sync_always (-fsync always)
//	async-memory,     parkway's own ProduceAsync in one process (no network,
//	async-disk        no client library: a ring of 512 pending acks from one
//	                  goroutine, messages spread over the partitions), in
//	                  memory and on disk at the listener's settings; its CPU
//	                  is the whole process's, producer included (produce only)
//
// Modes (-modes):
//
//	produce  for -round, a franz-go producer (idempotent, acks=all, default
//	         batching, linger and compression) to a topic of -partitions;
//	         JetStream: nats.go async publish to -partitions streams of one
//	         subject each (a ring of 4,096 pending acks, the compare
//	         command's depth), round-robin
//	consume  a franz-go consumer (a new client each round, reset to the
//	         start) catching up -records records preloaded in -partitions
//	         partitions; JetStream: one pull consumer per stream (ack none,
//	         deliver all, nats.go's Messages iterator fetching in batches)
//	create   a produce to a topic that does not exist yet, auto-created by
//	         the client's Metadata request, until its ack (kgo, no linger,
//	         one client reused); JetStream: add a stream, then publish to
//	         it and wait for the ack. -creates samples, p50 and p99
//
// Every broker starts once; the rounds of a mode alternate between the
// brokers (round 1 of every broker, then round 2, ...), so a change in the
// machine's load hits all of them. The figure is the median of -rounds.
// From the repository root:
//
//	go -C bench run ./cmd/kafka
//	go -C bench run ./cmd/kafka -fsync always -only listener-disk,jetstream-disk,async-disk -modes produce,create
//	go -C bench run ./cmd/kafka -size 1024 -modes produce
//	go -C bench run ./cmd/kafka -only listener-memory -modes consume -profile /tmp/prof
//	go tool pprof -top /tmp/prof/listener-memory-consume-r*.pprof
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parkway-io/parkway/bench"
)

const (
	produceTopic = "bench"   // the produce mode's topic (streams bench-<i>)
	catchUpTopic = "catchup" // the consume mode's topic (streams catchup-<i>)
)

var brokers = []string{"listener-memory", "listener-disk", "kfake", "jetstream-memory", "jetstream-disk", "async-memory", "async-disk"}

var modes = []string{"produce", "consume", "create"}

type options struct {
	round    time.Duration
	rounds   int
	parts    int
	size     int
	records  int
	creates  int
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
	fs.DurationVar(&o.round, "round", 2*time.Second, "length of one produce round (at least 1s)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per broker and mode; the median is reported")
	fs.IntVar(&o.parts, "partitions", 4, "partitions of the topics (JetStream: streams)")
	fs.IntVar(&o.size, "size", 100, "record value size in bytes")
	fs.IntVar(&o.records, "records", 1_000_000, "records the consume mode catches up on each round")
	fs.IntVar(&o.creates, "creates", 300, "topics the create mode creates per broker, over all rounds")
	fs.DurationVar(&o.interval, "interval", 2*time.Minute, "FsyncInterval and sync_interval of the on-disk cases (the compare command's interval)")
	fs.StringVar(&o.fsync, "fsync", "interval", "fsync policy of the on-disk cases: interval (-interval) or always")
	fs.StringVar(&o.profile, "profile", "", "write each broker process's CPU profile of each round to DIR/<broker>-<mode>-r<round>.pprof")
	only := fs.String("only", strings.Join(brokers, ","), "comma-separated brokers to run")
	modeList := fs.String("modes", strings.Join(modes, ","), "comma-separated modes to run")
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
	if o.rounds < 1 || o.parts < 1 || o.size < 1 || o.records < o.parts || o.creates < o.rounds {
		return errors.New("-rounds, -partitions and -size must be positive, -records at least -partitions, -creates at least -rounds")
	}
	o.records -= o.records % o.parts // the same count in every partition
	names := strings.Split(*only, ",")
	for _, b := range names {
		if !slices.Contains(brokers, b) {
			return fmt.Errorf("unknown broker %q (have %s)", b, strings.Join(brokers, ", "))
		}
	}
	var ms []string
	for _, m := range strings.Split(*modeList, ",") {
		if !slices.Contains(modes, m) {
			return fmt.Errorf("unknown mode %q (have %s)", m, strings.Join(modes, ", "))
		}
		ms = append(ms, m)
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}
	command := strings.Join(append([]string{"go -C bench run ./cmd/kafka"}, os.Args[1:]...), " ")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	started := time.Now()
	var bs []*broker
	defer func() {
		for _, b := range bs {
			if err := b.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", b.name, err)
			}
		}
	}()
	for _, name := range names {
		b, err := startBroker(ctx, name, o)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		bs = append(bs, b)
	}
	rep := report{o: o, command: command}
	for _, m := range ms {
		var err error
		switch m {
		case "produce":
			err = rep.produce(ctx, bs)
		case "consume":
			err = rep.consume(ctx, bs)
		case "create":
			err = rep.create(ctx, bs)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	rep.wall = time.Since(started)
	rep.write(os.Stdout)
	return nil
}

// broker is one broker child process and this process's client of it.
type broker struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	// t drives the broker over loopback; nil for the async cases, which
	// run their producer inside the child.
	t target
}

// target is what the driver needs of a broker it reaches over loopback;
// kafkaTarget and jetStreamTarget implement it.
type target interface {
	// setUpProduce prepares the produce mode (topics or streams exist and
	// every partition took a record) outside the timed rounds.
	setUpProduce(ctx context.Context, value []byte) error
	// produce produces for d and waits for every ack; it returns the
	// records acknowledged and the time from the first produce to the
	// last ack.
	produce(ctx context.Context, value []byte, d time.Duration) (int, time.Duration, error)
	// preload writes n records of value to the consume mode's topic.
	preload(ctx context.Context, value []byte, n int) error
	// catchUp reads the consume mode's n records from the start with a
	// new consumer and returns how long that took.
	catchUp(ctx context.Context, n int) (time.Duration, error)
	// createFirst creates topic name (auto-created by the produce, or the
	// stream added first) and produces value to it, waiting for the ack.
	createFirst(ctx context.Context, name string, value []byte) error
	close()
}

func startBroker(ctx context.Context, name string, o options) (*broker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-broker", name, "-partitions", strconv.Itoa(o.parts), "-size", strconv.Itoa(o.size),
		"-interval", o.interval.String(), "-fsync", o.fsync}
	b := &broker{name: name, cmd: exec.Command(exe, args...)}
	b.cmd.Stderr = os.Stderr
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	outPipe, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	b.out = bufio.NewScanner(outPipe)
	ready, err := b.ask("")
	if err == nil && (len(ready) != 2 || ready[0] != "ready") {
		err = fmt.Errorf("broker said %q", ready)
	}
	if err == nil {
		switch {
		case strings.HasPrefix(name, "async"):
		case strings.HasPrefix(name, "jetstream"):
			b.t, err = newJetStreamTarget(ready[1], name == "jetstream-memory", o)
		default:
			b.t, err = newKafkaTarget(ctx, ready[1])
		}
	}
	if err != nil {
		return nil, errors.Join(err, b.stop())
	}
	return b, nil
}

// ask sends line (if any) to the child and reads its answer.
func (b *broker) ask(line string) ([]string, error) {
	if line != "" {
		if _, err := fmt.Fprintln(b.in, line); err != nil {
			return nil, err
		}
	}
	if !b.out.Scan() {
		return nil, fmt.Errorf("broker process ended: %v", b.out.Err())
	}
	return strings.Fields(b.out.Text()), nil
}

// cpu is the child's CPU time so far, user and system.
func (b *broker) cpu() (time.Duration, error) {
	f, err := b.ask("cpu")
	if err != nil {
		return 0, err
	}
	if len(f) != 2 || f[0] != "cpu" {
		return 0, fmt.Errorf("broker said %q", f)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err
}

// profile starts (path != "") or stops the child's CPU profile.
func (b *broker) profile(path string) error {
	line := "unprofile"
	if path != "" {
		line = "profile " + path
	}
	f, err := b.ask(line)
	if err == nil && (len(f) != 1 || f[0] != "ok") {
		err = fmt.Errorf("broker said %q", f)
	}
	return err
}

func (b *broker) stop() error {
	if b.t != nil {
		b.t.close()
	}
	b.in.Close()
	return b.cmd.Wait()
}

// timed runs work as one round of mode on b: the child's CPU and this
// process's are read around it, and the child profiles it with -profile.
func (b *broker) timed(o options, mode string, round int, work func() error) (brokerCPU, clientCPU time.Duration, err error) {
	if o.profile != "" {
		if err := b.profile(filepath.Join(o.profile, fmt.Sprintf("%s-%s-r%d.pprof", b.name, mode, round+1))); err != nil {
			return 0, 0, err
		}
	}
	b0, err := b.cpu()
	if err != nil {
		return 0, 0, err
	}
	c0, _ := bench.ProcessCPU()
	if err := work(); err != nil {
		return 0, 0, err
	}
	c1, _ := bench.ProcessCPU()
	b1, err := b.cpu()
	if err != nil {
		return 0, 0, err
	}
	if o.profile != "" {
		if err := b.profile(""); err != nil {
			return 0, 0, err
		}
	}
	return b1 - b0, c1 - c0, nil
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

func loadAverage() string {
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

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/bench"
	"github.com/parkway-io/parkway/kafka"
)

// serveChild runs broker b until its standard input closes, answering the
// driver's lines: "cpu" (this process's CPU so far, ns), "profile PATH"
// and "unprofile" (start and stop a CPU profile) and, for the async
// cases, "run D" (produce for D; answers the count and the elapsed ns).
func serveChild(b string, o options) error {
	var (
		addr    string
		stop    func() error
		produce func(time.Duration) (int, time.Duration, error)
		err     error
	)
	switch {
	case b == "kfake":
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.parts), produceTopic, catchUpTopic),
			kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(kafka.DefaultPartitions))
		if err != nil {
			return err
		}
		addr = c.ListenAddrs()[0]
		stop = func() error { c.Close(); return nil }
	case strings.HasPrefix(b, "jetstream"):
		if addr, stop, err = serveJetStream(o); err != nil {
			return err
		}
	default:
		if addr, stop, produce, err = serveParkway(b, o); err != nil {
			return err
		}
	}
	var prof *os.File
	fmt.Printf("ready %s\n", addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "cpu":
			cpu, _ := bench.ProcessCPU()
			fmt.Printf("cpu %d\n", cpu.Nanoseconds())
		case len(f) == 2 && f[0] == "profile" && prof == nil:
			if prof, err = os.Create(f[1]); err == nil {
				err = pprof.StartCPUProfile(prof)
			}
			if err != nil {
				return errors.Join(err, stop())
			}
			fmt.Println("ok")
		case len(f) == 1 && f[0] == "unprofile" && prof != nil:
			pprof.StopCPUProfile()
			if err := prof.Close(); err != nil {
				return errors.Join(err, stop())
			}
			prof = nil
			fmt.Println("ok")
		case len(f) == 2 && f[0] == "run" && produce != nil:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				return errors.Join(err, stop())
			}
			n, el, err := produce(d)
			if err != nil {
				return errors.Join(err, stop())
			}
			fmt.Printf("ran %d %d\n", n, el.Nanoseconds())
		default:
			fmt.Println("unknown")
		}
	}
	return stop()
}

// runAsync asks an async child to produce for d.
func (b *broker) runAsync(d time.Duration) (int, time.Duration, error) {
	f, err := b.ask("run " + d.String())
	if err != nil {
		return 0, 0, err
	}
	if len(f) != 3 || f[0] != "ran" {
		return 0, 0, fmt.Errorf("broker said %q", f)
	}
	var n int
	var el int64
	if _, err := fmt.Sscan(f[1]+" "+f[2], &n, &el); err != nil {
		return 0, 0, err
	}
	return n, time.Duration(el), nil
}

// serveParkway opens a parkway node (on disk for the -disk brokers, its
// topics and auto-created ones at -fsync) with the produce and catch-up
// topics, and either serves the Kafka listener on a loopback port or,
// for the async brokers, returns the in-process producer.
func serveParkway(b string, o options) (addr string, stop func() error, produce func(time.Duration) (int, time.Duration, error), err error) {
	ctx := context.Background()
	// Two shards, as the compare command: the reference machine has two cores.
	cfg := parkway.Config{Shards: 2}
	if strings.HasSuffix(b, "-disk") {
		if cfg.DataDir, err = os.MkdirTemp("", "parkway-kafka-bench-"); err != nil {
			return "", nil, nil, err
		}
		cfg.Fsync, cfg.FsyncInterval = parkway.FsyncInterval, o.interval
		if o.fsync == "always" {
			cfg.Fsync, cfg.FsyncInterval = parkway.FsyncAlways, 0
		}
	}
	node, err := parkway.Open(cfg)
	if err != nil {
		return "", nil, nil, errors.Join(err, removeDir(cfg.DataDir))
	}
	closeNode := func() error { return errors.Join(node.Close(), removeDir(cfg.DataDir)) }
	s, err := node.Admin().CreateStream(ctx, kafka.DefaultStream)
	if err != nil {
		return "", nil, nil, errors.Join(err, closeNode())
	}
	topic, err := node.Admin().CreateTopic(ctx, s, produceTopic, o.parts)
	if err == nil {
		_, err = node.Admin().CreateTopic(ctx, s, catchUpTopic, o.parts)
	}
	if err != nil {
		return "", nil, nil, errors.Join(err, closeNode())
	}
	if strings.HasPrefix(b, "async") {
		produce = func(d time.Duration) (int, time.Duration, error) { return produceAsync(ctx, node, topic, o, d) }
		// Warm every partition, as the Kafka cases do.
		if _, _, err := produce(100 * time.Millisecond); err != nil {
			return "", nil, nil, errors.Join(err, closeNode())
		}
		return "-", closeNode, produce, nil
	}
	srv, err := kafka.NewServer(node, kafka.Config{})
	if err != nil {
		return "", nil, nil, errors.Join(err, closeNode())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, errors.Join(err, closeNode())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	stop = func() error {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-served
		return errors.Join(err, closeNode())
	}
	return l.Addr().String(), stop, nil, nil
}

func removeDir(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
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

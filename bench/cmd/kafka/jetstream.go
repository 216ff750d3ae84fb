package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxPending bounds the unacknowledged async publishes, as in the
// compare command's JetStream cases.
const maxPending = 4096

// serveJetStream starts nats-server with JetStream on a loopback port in
// this (the broker) process. File-storage streams follow -fsync:
// sync_interval -interval, or sync_always; the server's settings are
// read back, so the run fails rather than compare other durabilities.
func serveJetStream(o options) (addr string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "parkway-kafka-bench-js-")
	if err != nil {
		return "", nil, err
	}
	always := o.fsync == "always"
	srv, err := server.NewServer(&server.Options{
		ServerName:   "bench",
		Host:         "127.0.0.1",
		Port:         server.RANDOM_PORT,
		JetStream:    true,
		StoreDir:     dir,
		NoLog:        true,
		NoSigs:       true,
		SyncAlways:   always,
		SyncInterval: o.interval,
	})
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("nats-server: new: %w", err), os.RemoveAll(dir))
	}
	srv.Start()
	stop = func() error {
		srv.Shutdown()
		srv.WaitForShutdown()
		return os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		return "", nil, errors.Join(errors.New("nats-server: not ready for connections after 10s"), stop())
	}
	jsc := srv.JetStreamConfig()
	if jsc == nil || jsc.SyncAlways != always || (!always && jsc.SyncInterval != o.interval) {
		return "", nil, errors.Join(fmt.Errorf("nats-server: JetStream config %+v, want sync_always=%v sync_interval=%v", jsc, always, o.interval), stop())
	}
	return srv.ClientURL(), stop, nil
}

// jetStreamTarget drives nats-server over loopback with nats.go: one
// stream of one subject per partition, as the compare command's cases.
type jetStreamTarget struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	storage jetstream.StorageType
	parts   int
	// produce are the produce mode's streams (= subjects).
	produceStreams []string
}

func newJetStreamTarget(url string, memory bool, o options) (*jetStreamTarget, error) {
	nc, err := nats.Connect(url, nats.Name("bench"))
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if memory {
		storage = jetstream.MemoryStorage
	}
	return &jetStreamTarget{nc: nc, js: js, storage: storage, parts: o.parts}, nil
}

func (j *jetStreamTarget) close() { j.nc.Close() }

func (j *jetStreamTarget) addStream(ctx context.Context, name string) error {
	_, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: j.storage, Replicas: 1})
	if err != nil {
		return fmt.Errorf("nats: add stream %s: %w", name, err)
	}
	return nil
}

// streams adds the streams prefix-0 … prefix-<parts-1>.
func (j *jetStreamTarget) streams(ctx context.Context, prefix string) ([]string, error) {
	var names []string
	for i := range j.parts {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if err := j.addStream(ctx, name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

func (j *jetStreamTarget) setUpProduce(ctx context.Context, value []byte) error {
	names, err := j.streams(ctx, produceTopic)
	if err != nil {
		return err
	}
	j.produceStreams = names
	for _, s := range names {
		if _, err := j.js.Publish(ctx, s, value); err != nil {
			return fmt.Errorf("nats: warm %s: %w", s, err)
		}
	}
	return nil
}

func (j *jetStreamTarget) produce(ctx context.Context, value []byte, d time.Duration) (int, time.Duration, error) {
	begin := time.Now()
	deadline := begin.Add(d)
	n, err := j.pipelined(ctx, j.produceStreams, value, func(i int) bool { return i%256 != 0 || time.Now().Before(deadline) })
	return n, time.Since(begin), err
}

// pipelined publishes value round-robin to subjects with PublishAsync
// while more(i) holds, keeping a ring of maxPending ack futures: the
// oldest is awaited (its error checked) before its slot is reused, the
// rest at the end. It returns how many were acknowledged.
func (j *jetStreamTarget) pipelined(ctx context.Context, subjects []string, value []byte, more func(int) bool) (int, error) {
	ring := make([]jetstream.PubAckFuture, maxPending)
	n := 0
	for ; more(n); n++ {
		slot := n % len(ring)
		if f := ring[slot]; f != nil {
			if err := awaitAck(ctx, f); err != nil {
				return 0, err
			}
		}
		f, err := j.js.PublishAsync(subjects[n%len(subjects)], value)
		if err != nil {
			return 0, fmt.Errorf("nats: publish async: %w", err)
		}
		ring[slot] = f
	}
	for _, f := range ring {
		if f != nil {
			if err := awaitAck(ctx, f); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func awaitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return fmt.Errorf("nats: publish: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *jetStreamTarget) preload(ctx context.Context, value []byte, n int) error {
	names, err := j.streams(ctx, catchUpTopic)
	if err != nil {
		return err
	}
	_, err = j.pipelined(ctx, names, value, func(i int) bool { return i < n })
	return err
}

// catchUp reads every catch-up stream from its start with a pull
// consumer of its own (ack none, as a Kafka consumer acknowledges
// nothing per record; nats.go's Messages iterator, which fetches in
// batches of its default size and asks for the next batch before the
// last is used up), all streams at once, until n records have arrived.
func (j *jetStreamTarget) catchUp(ctx context.Context, n int) (time.Duration, error) {
	begin := time.Now()
	per := n / j.parts
	errs := make([]error, j.parts)
	var wg sync.WaitGroup
	for i := range j.parts {
		wg.Go(func() { errs[i] = j.catchUpStream(ctx, fmt.Sprintf("%s-%d", catchUpTopic, i), per) })
	}
	wg.Wait()
	return time.Since(begin), errors.Join(errs...)
}

func (j *jetStreamTarget) catchUpStream(ctx context.Context, stream string, n int) error {
	cons, err := j.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("nats: consumer on %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("nats: messages of %s: %w", stream, err)
	}
	defer it.Stop()
	for got := 0; got < n; got++ {
		if _, err := it.Next(); err != nil {
			return fmt.Errorf("nats: next of %s after %d: %w", stream, got, err)
		}
	}
	return nil
}

func (j *jetStreamTarget) createFirst(ctx context.Context, name string, value []byte) error {
	if err := j.addStream(ctx, name); err != nil {
		return err
	}
	if _, err := j.js.Publish(ctx, name, value); err != nil {
		return fmt.Errorf("nats: first publish to %s: %w", name, err)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaTarget drives a Kafka broker (the listener or kfake) with franz-go.
type kafkaTarget struct {
	addr string
	// prod is the producer of the produce and consume modes (idempotent,
	// kgo's default; acks=all; default batching, linger, compression).
	prod *kgo.Client
	// create is the create mode's client: auto-creation allowed, no
	// linger, so a sample is the round trips and the creation, not the
	// client waiting to fill a batch.
	create *kgo.Client
	// requests counts the Produce requests prod wrote: how many records
	// a request carried, which the broker's per-request costs are
	// spread over, depends on how fast the broker answers.
	// requestBytes counts their bytes, what the broker reads and checks.
	requests, requestBytes atomic.Int64
}

// produceHook counts the Produce requests a client wrote and their bytes.
type produceHook struct{ n, bytes *atomic.Int64 }

func (h produceHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // Produce
		h.n.Add(1)
		h.bytes.Add(int64(written))
	}
}

func newKafkaTarget(_ context.Context, addr string) (*kafkaTarget, error) {
	k := &kafkaTarget{addr: addr}
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(produceTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithHooks(produceHook{&k.requests, &k.requestBytes}))
	if err != nil {
		return nil, err
	}
	create, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		prod.Close()
		return nil, err
	}
	k.prod, k.create = prod, create
	return k, nil
}

func (k *kafkaTarget) produceRequests() (requests, bytes int64) {
	return k.requests.Load(), k.requestBytes.Load()
}

func (k *kafkaTarget) close() {
	k.prod.Close()
	k.create.Close()
}

// setUpProduce warms every partition of the produce topic (which the
// broker process created): kgo's sticky partitioner moves on per batch.
func (k *kafkaTarget) setUpProduce(ctx context.Context, value []byte) error {
	for range 80 {
		if err := k.prod.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			return fmt.Errorf("warm: %w", err)
		}
	}
	return nil
}

func (k *kafkaTarget) produce(ctx context.Context, value []byte, d time.Duration) (int, time.Duration, error) {
	deadline := time.Now().Add(d)
	return k.produceRecords(ctx, func(i int) bool { return i%256 != 0 || time.Now().Before(deadline) }, produceTopic, value)
}

// produceRecords produces records of value to topic while more(i) holds
// (i the records produced so far), then flushes; it returns the records
// acknowledged and the time from the first produce to the flush.
func (k *kafkaTarget) produceRecords(ctx context.Context, more func(int) bool, topic string, value []byte) (int, time.Duration, error) {
	var acked atomic.Int64
	var failed atomic.Pointer[error]
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
	}
	begin := time.Now()
	for i := 0; more(i); i++ {
		k.prod.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, cb)
	}
	if err := k.prod.Flush(ctx); err != nil {
		return 0, 0, err
	}
	el := time.Since(begin)
	if e := failed.Load(); e != nil {
		return 0, 0, *e
	}
	return int(acked.Load()), el, nil
}

func (k *kafkaTarget) preload(ctx context.Context, value []byte, n int) error {
	got, _, err := k.produceRecords(ctx, func(i int) bool { return i < n }, catchUpTopic, value)
	if err == nil && got != n {
		err = fmt.Errorf("%d of %d records acknowledged", got, n)
	}
	return err
}

// catchUp reads the catch-up topic from the start with a new consumer
// (default fetch sizes), until n records have arrived.
func (k *kafkaTarget) catchUp(ctx context.Context, n int) (time.Duration, error) {
	begin := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.ConsumeTopics(catchUpTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 {
			return 0, fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		got += fs.NumRecords()
	}
	el := time.Since(begin)
	if got != n {
		return 0, fmt.Errorf("read %d records, the topic holds %d", got, n)
	}
	return el, nil
}

func (k *kafkaTarget) createFirst(ctx context.Context, name string, value []byte) error {
	err := k.create.ProduceSync(ctx, &kgo.Record{Topic: name, Value: value}).FirstErr()
	if err != nil {
		return errors.Join(fmt.Errorf("produce to new topic %s", name), err)
	}
	return nil
}

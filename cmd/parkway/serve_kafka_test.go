//go:build unix

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestServeKafka produces through the Kafka listener of `parkway serve`,
// stops the process with SIGTERM (the listener drains before the node
// closes), restarts it on the same directory, and reads every
// acknowledged record back through the listener.
func TestServeKafka(t *testing.T) {
	dir := t.TempDir()
	const n = 300
	s := startServe(t, nil, "--data-dir", dir, "--shards", "1", "--kafka", "127.0.0.1:0", "--kafka-partitions", "3")
	s.waitReady()
	if s.kafka == "" {
		t.Fatalf("no kafka address in the serving line:\n%s", s.log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(s.kafka))
	if err != nil {
		t.Fatal(err)
	}
	// -1 partitions: the listener's default, --kafka-partitions.
	if res, err := kadm.NewClient(adm).CreateTopics(ctx, -1, -1, nil, "orders"); err != nil || res["orders"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["orders"].Err)
	}
	adm.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(s.kafka), kgo.DefaultProduceTopic("orders"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint("v", i))}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Every record must have been acknowledged: ProduceSync reports it.
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("last")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, s.log())
	}

	s = startServe(t, nil, "--data-dir", dir, "--shards", "1", "--kafka", "127.0.0.1:0", "--kafka-partitions", "3")
	s.waitReady()
	cons, err := kgo.NewClient(kgo.SeedBrokers(s.kafka), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	partitions := map[int32]bool{}
	for len(seen) < n+1 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after the restart %d of %d records read back", len(seen), n+1)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			partitions[r.Partition] = true
		})
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("%s read %d times", v, c)
		}
	}
	if len(partitions) != 3 {
		t.Fatalf("records in %d partitions, want 3 (--kafka-partitions)", len(partitions))
	}
	cons.Close()
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d after the second SIGTERM:\n%s", code, s.log())
	}
}

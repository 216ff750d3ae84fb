package kafka

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestProduceConsumeEveryCodec produces keyed records with headers through
// franz-go's idempotent producer with each compression codec, to a topic
// the produce auto-creates, and consumes them back from the earliest
// offset: keys, values, headers, timestamps and offsets intact. On each
// of the listener's two produce paths: a node in memory keeps each batch
// as the client sent it and hands it back so; a node on disk and a
// 3-node cluster decode each batch into parkway messages and encode them
// again for the fetch (appendBatch), so there each codec's records cross
// parkway's own message format both ways.
func TestProduceConsumeEveryCodec(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		f := serve(t, Config{DefaultPartitions: 2})
		produceConsumeEveryCodec(t, f.client)
	})
	t.Run("disk", func(t *testing.T) {
		node, err := parkway.Open(parkway.Config{Shards: 2, DataDir: t.TempDir()})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := node.Close(); err != nil {
				t.Errorf("node Close: %v", err)
			}
		})
		if node.KeepsEncoded() {
			t.Fatal("a node on disk keeps batches as sent: this case would not test the messages path")
		}
		l := listen(t, node, Config{DefaultPartitions: 2})
		f := &fixture{node: node, srv: l.srv, addr: l.addr}
		produceConsumeEveryCodec(t, f.client)
	})
	t.Run("cluster", func(t *testing.T) {
		c := startCluster(t)
		produceConsumeEveryCodec(t, func(t testing.TB, opts ...kgo.Opt) *kgo.Client {
			return c.client([]int32{2}, opts...)
		})
	})
}

// produceConsumeEveryCodec is TestProduceConsumeEveryCodec's case on one
// listener (or cluster), whose clients client makes.
func produceConsumeEveryCodec(t *testing.T, client func(testing.TB, ...kgo.Opt) *kgo.Client) {
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "codec-" + c.name
			prod := client(t, kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
			const n = 200
			base := time.Now().Truncate(time.Millisecond)
			var want []*kgo.Record
			for i := range n {
				r := &kgo.Record{
					Key:       []byte(fmt.Sprintf("key-%d", i%7)),
					Value:     bytes.Repeat([]byte(fmt.Sprintf("value-%d;", i)), 10),
					Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}},
					Timestamp: base.Add(time.Duration(i) * time.Millisecond),
				}
				want = append(want, r)
				prod.Produce(ctxFor(t), r, nil)
			}
			if err := prod.Flush(ctxFor(t)); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			for i, r := range want {
				if r.Offset < 0 {
					t.Fatalf("record %d not acknowledged", i)
				}
			}
			cons := client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := consume(t, cons, n)
			if len(got) != n {
				t.Fatalf("consumed %d records, want %d", len(got), n)
			}
			byKey := map[string]*kgo.Record{}
			for _, r := range want {
				byKey[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = r
			}
			for _, r := range got {
				w := byKey[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]
				if w == nil {
					t.Fatalf("consumed %d/%d, which no produce acknowledged", r.Partition, r.Offset)
				}
				if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) {
					t.Fatalf("%d/%d: got %q=%q, want %q=%q", r.Partition, r.Offset, r.Key, r.Value, w.Key, w.Value)
				}
				if len(r.Headers) != 1 || r.Headers[0].Key != "h" || !bytes.Equal(r.Headers[0].Value, w.Headers[0].Value) {
					t.Fatalf("%d/%d: headers %v, want %v", r.Partition, r.Offset, r.Headers, w.Headers)
				}
				if !r.Timestamp.Equal(w.Timestamp) {
					t.Fatalf("%d/%d: timestamp %v, want %v", r.Partition, r.Offset, r.Timestamp, w.Timestamp)
				}
				delete(byKey, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
			}
		})
	}
}

// TestConsumeFromLatest: a consumer starting at the end sees only what is
// produced after it started, its fetch waiting at the partition; on one
// node and on a 3-node cluster (clusterOfOnePartition).
func TestConsumeFromLatest(t *testing.T) {
	t.Run("node", func(t *testing.T) { consumeFromLatest(t, serve(t, Config{}).client) })
	t.Run("cluster", func(t *testing.T) { consumeFromLatest(t, clusterOfOnePartition(t)) })
}

// clusterOfOnePartition starts a 3-node cluster whose listeners
// auto-create topics of one partition, and returns a maker of clients
// that bootstrap from every listener.
func clusterOfOnePartition(t *testing.T) func(testing.TB, ...kgo.Opt) *kgo.Client {
	c := startClusterWith(t, 3, func(cfg *Config) { cfg.DefaultPartitions = 1 })
	return func(_ testing.TB, opts ...kgo.Opt) *kgo.Client { return c.client([]int32{1, 2, 3}, opts...) }
}

func consumeFromLatest(t *testing.T, client func(testing.TB, ...kgo.Opt) *kgo.Client) {
	prod := client(t, kgo.DefaultProduceTopic("latest"), kgo.AllowAutoTopicCreation())
	for i := range 5 {
		if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord(fmt.Sprint("old-", i))).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	cons := client(t, kgo.ConsumeTopics("latest"), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(200*time.Millisecond))
	// The consumer has its start once ListOffsets answered: wait until
	// it is fetching (its offset moved from the unset value).
	adm := kadm.NewClient(client(t))
	ends, err := adm.ListEndOffsets(ctxFor(t), "latest")
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v %v", err, ends.Error())
	}
	if o, _ := ends.Lookup("latest", 0); o.Offset != 5 {
		t.Fatalf("end offset %d, want 5", o.Offset)
	}
	done := make(chan []*kgo.Record, 1)
	go func() { done <- consume(t, cons, 3) }()
	// The consumer resolves "latest" asynchronously; produce until it has
	// seen the new records, which are the only ones it may see.
	deadline := time.Now().Add(testTimeout)
	var got []*kgo.Record
	for i := 0; got == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never received the new records")
		}
		if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord(fmt.Sprint("new-", i))).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		select {
		case got = <-done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, r := range got {
		if !strings.HasPrefix(string(r.Value), "new-") || r.Offset < 5 {
			t.Fatalf("a consumer from the end got %q at %d", r.Value, r.Offset)
		}
	}
}

// TestAdminCreateDeleteTopics drives CreateTopics, Metadata and
// DeleteTopics through kadm.
func TestAdminCreateDeleteTopics(t *testing.T) {
	f := serve(t, Config{DisableAutoCreate: true})
	adm := kadm.NewClient(f.client(t))
	ctx := ctxFor(t)
	res, err := adm.CreateTopics(ctx, 3, -1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "orders", "payments")
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			t.Fatalf("CreateTopics %s: %v", r.Topic, r.Err)
		}
		if r.ID == [16]byte{} {
			t.Fatalf("CreateTopics %s: no topic ID", r.Topic)
		}
	}
	again, err := adm.CreateTopics(ctx, 1, -1, nil, "orders")
	if err != nil || again["orders"].Err == nil || !strings.Contains(again["orders"].Err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("creating an existing topic: %v / %v, want TOPIC_ALREADY_EXISTS", err, again["orders"].Err)
	}
	bad, _ := adm.CreateTopics(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "compacted")
	if bad["compacted"].Err == nil || !strings.Contains(bad["compacted"].Err.Error(), "INVALID_CONFIG") {
		t.Fatalf("a compacted topic: %v, want INVALID_CONFIG", bad["compacted"].Err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if len(topics) != 2 || len(topics["orders"].Partitions) != 3 || topics["orders"].ID != res["orders"].ID {
		t.Fatalf("ListTopics: %+v", topics)
	}
	// DescribeConfigs shows the retention set at creation;
	// IncrementalAlterConfigs changes it and the fsync policy.
	configOf := func(topic, key string) string {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || len(rcs) != 1 || rcs[0].Err != nil {
			t.Fatalf("DescribeTopicConfigs(%s): %v %+v", topic, err, rcs)
		}
		for _, c := range rcs[0].Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value
			}
		}
		t.Fatalf("%s has no config %s", topic, key)
		return ""
	}
	if v := configOf("orders", "retention.ms"); v != "3600000" {
		t.Fatalf("orders' retention.ms is %s, want 3600000", v)
	}
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("1048576")},
		{Op: kadm.SetConfig, Name: "parkway.fsync", Value: kadm.StringPtr("interval")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "orders")
	if err != nil || altered[0].Err != nil {
		t.Fatalf("AlterTopicConfigs: %v %+v", err, altered)
	}
	if configOf("orders", "retention.bytes") != "1048576" || configOf("orders", "parkway.fsync") != "interval" || configOf("orders", "retention.ms") != "-1" {
		t.Fatal("the altered configs do not read back")
	}
	orders, err := f.srv.topics.lookup(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := f.node.Admin().TopicInfo(ctx, orders); err != nil || info.Config.RetentionBytes != 1<<20 || info.Config.Fsync != parkway.FsyncInterval || info.Config.RetentionAge != 0 {
		t.Fatalf("parkway's topic config: %+v %v", info.Config, err)
	}
	if bad, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("2")}}, "orders"); err != nil || bad[0].Err == nil {
		t.Fatalf("an unsupported config was accepted: %v %+v", err, bad)
	}

	// CreatePartitions grows a topic; DeleteRecords truncates a partition.
	grown, err := adm.UpdatePartitions(ctx, 5, "payments")
	if err != nil || grown["payments"].Err != nil {
		t.Fatalf("UpdatePartitions: %v %v", err, grown["payments"].Err)
	}
	if shrink, _ := adm.UpdatePartitions(ctx, 2, "payments"); shrink["payments"].Err == nil {
		t.Fatal("shrinking a topic was not refused")
	}
	prod := f.client(t, kgo.DefaultProduceTopic("payments"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i)), Partition: 4}).FirstErr(); err != nil {
			t.Fatalf("produce to the new partition 4: %v", err)
		}
	}
	var cut kadm.Offsets
	cut.AddOffset("payments", 4, 7, -1)
	deleted, err := adm.DeleteRecords(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := deleted.Lookup("payments", 4); d.Err != nil || d.LowWatermark != 7 {
		t.Fatalf("DeleteRecords: %+v", d)
	}
	starts, err := adm.ListStartOffsets(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("payments", 4); o.Offset != 7 {
		t.Fatalf("partition 4 starts at %d after DeleteRecords, want 7", o.Offset)
	}

	del, err := adm.DeleteTopics(ctx, "orders")
	if err != nil || del["orders"].Err != nil {
		t.Fatalf("DeleteTopics: %v %v", err, del["orders"].Err)
	}
	// A fresh client: franz-go serves a metadata request from its cache
	// for a while.
	topics, err = kadm.NewClient(f.client(t)).ListTopics(ctx)
	if err != nil || topics.Has("orders") || !topics.Has("payments") {
		t.Fatalf("after delete: %v %v", topics.Names(), err)
	}
	gone, err := adm.DeleteTopics(ctx, "orders")
	if err != nil || gone["orders"].Err == nil {
		t.Fatalf("deleting a deleted topic: %v %v, want an error", err, gone["orders"].Err)
	}
}

// TestWaitingFetchWokenByProduce: a fetch at the end with a long MaxWait
// is answered by the produce that gives it a record, not by its
// deadline.
func TestWaitingFetchWokenByProduce(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 3})
	prod := f.client(t, kgo.DefaultProduceTopic("wake"), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(ctxFor(t), &kgo.Record{Value: []byte("first"), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, f.addr)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 12, 20_000, 1, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "wake"
	for p := range int32(3) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes = p, 1<<20
		if p == 0 {
			fp.FetchOffset = 1 // past "first"
		}
		ft.Partitions = append(ft.Partitions, fp)
	}
	req.Topics = append(req.Topics, ft)
	got := make(chan *kmsg.FetchResponse, 1)
	start := time.Now()
	go func() { got <- r.request(req).(*kmsg.FetchResponse) }()
	if err := prod.ProduceSync(ctxFor(t), &kgo.Record{Value: []byte("second"), Partition: 2}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	resp := <-got
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the fetch was answered after %v: by its deadline, not the produce", d)
	}
	p2 := resp.Topics[0].Partitions[2]
	var rb kmsg.RecordBatch
	if p2.ErrorCode != 0 || len(p2.RecordBatches) == 0 || rb.ReadFrom(p2.RecordBatches) != nil || rb.NumRecords != 1 {
		t.Fatalf("partition 2: code %d, %d bytes of batches", p2.ErrorCode, len(p2.RecordBatches))
	}
	if resp.Topics[0].Partitions[1].RecordBatches == nil {
		t.Fatal("an empty partition's record set is null: librdkafka refuses that (it wants 0 bytes)")
	}
	if p2.HighWatermark != 1 || resp.Topics[0].Partitions[0].HighWatermark != 1 {
		t.Fatalf("high watermarks %d and %d, want 1 and 1", resp.Topics[0].Partitions[0].HighWatermark, p2.HighWatermark)
	}
}

// TestFetchMinBytesSendsRecordsOnce: a fetch that finds fewer bytes than
// its MinBytes answers with what it found, each record once (waiting for
// more used to poll the same offset again and send the records twice).
func TestFetchMinBytesSendsRecordsOnce(t *testing.T) {
	f := serve(t, Config{})
	prod := f.client(t, kgo.DefaultProduceTopic("minbytes"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord("only")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, f.addr)
	req := fetchRequest("minbytes", 0, 1<<20)
	req.MaxWaitMillis, req.MinBytes = 300, 1<<20
	p := r.request(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	var b kmsg.RecordBatch
	if err := b.ReadFrom(p.RecordBatches); err != nil || b.NumRecords != 1 || len(p.RecordBatches) != batchLengthEnd+int(b.Length) {
		t.Fatalf("the response holds %d bytes of batches (%v), want exactly one batch of one record", len(p.RecordBatches), err)
	}
}

// TestConsumeFromTimestamp: a consumer starting at a timestamp (ListOffsets
// by time, over parkway's append-time index) gets the records appended at
// or after it and none before; on one node and on a 3-node cluster.
func TestConsumeFromTimestamp(t *testing.T) {
	t.Run("node", func(t *testing.T) { consumeFromTimestamp(t, serve(t, Config{}).client) })
	t.Run("cluster", func(t *testing.T) { consumeFromTimestamp(t, clusterOfOnePartition(t)) })
}

func consumeFromTimestamp(t *testing.T, client func(testing.TB, ...kgo.Opt) *kgo.Client) {
	prod := client(t, kgo.DefaultProduceTopic("timed"), kgo.AllowAutoTopicCreation())
	for i := range 5 {
		if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord(fmt.Sprint("early-", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// The cut is a millisecond after the last early append: wait for the
	// clock to pass it (a condition on the clock, not a pause).
	cut := time.Now().Add(time.Millisecond).Truncate(time.Millisecond).Add(time.Millisecond)
	for time.Now().Before(cut) {
		runtime.Gosched()
	}
	for i := range 3 {
		if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord(fmt.Sprint("late-", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons := client(t, kgo.ConsumeTopics("timed"), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(cut.UnixMilli())))
	got := consume(t, cons, 3)
	for i, r := range got {
		if want := fmt.Sprint("late-", i); string(r.Value) != want || r.Offset != int64(5+i) {
			t.Fatalf("record %d: %q at %d, want %q at %d", i, r.Value, r.Offset, want, 5+i)
		}
	}
}

package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestClusterAutoCreateProduce: on a 3-node cluster, a Produce to a topic
// nobody created, sent straight to a listener with no Metadata first, is
// answered at once — acknowledged (parked inside parkway until the new
// partition elects its leader, then appended) or NOT_LEADER_OR_FOLLOWER
// naming the leader — never UNKNOWN_TOPIC_OR_PARTITION; and a franz-go
// producer to a topic it auto-creates through Metadata has every record
// acknowledged once, at the offsets the partition holds them at.
func TestClusterAutoCreateProduce(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	r := dialRaw(t, c.brokers[3])
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 12, -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "fresh-raw"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = appendBatch(nil, []parkway.Message{{Timestamp: 1000, Payload: []byte("first")}}, -1)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p := r.request(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	switch p.ErrorCode {
	case 0:
		if p.BaseOffset != 0 {
			t.Fatalf("the first produce to an auto-created topic at offset %d", p.BaseOffset)
		}
	case 6: // NOT_LEADER_OR_FOLLOWER
		if p.CurrentLeader.LeaderID <= 0 || p.CurrentLeader.LeaderID == 3 {
			t.Fatalf("NOT_LEADER_OR_FOLLOWER naming leader %d", p.CurrentLeader.LeaderID)
		}
	default:
		t.Fatalf("the first produce to an auto-created topic: code %d", p.ErrorCode)
	}
	t.Logf("the raw produce at broker 3: code %d", p.ErrorCode)

	const n = 20
	prod := c.client([]int32{2}, kgo.DefaultProduceTopic("fresh"), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	acked := map[int64]string{}
	for i := range n {
		v := fmt.Sprint("r", i)
		rec, err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: 0}).First()
		if err != nil {
			t.Fatalf("produce %d to an auto-created topic: %v", i, err)
		}
		acked[rec.Offset] = v
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.nodes[1].Poll(ctx, topic, 0, parkway.AtFirst(), 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Messages) != n {
		t.Fatalf("the partition holds %d records, want %d", len(b.Messages), n)
	}
	for _, m := range b.Messages {
		if acked[int64(m.Offset)] != string(m.Payload) {
			t.Fatalf("offset %d holds %q, acknowledged %q", m.Offset, m.Payload, acked[int64(m.Offset)])
		}
	}
}

package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataEpoch asks broker id's listener for the leader and leader epoch
// of topic's partition 0.
func (c *cluster) metadataEpoch(r *raw, topic string) (lead, epoch int32) {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp := r.request(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, -1
	}
	p := resp.Topics[0].Partitions[0]
	return p.Leader, p.LeaderEpoch
}

// agreedEpoch waits until every live listener names the same leader and
// leader epoch of topic's partition 0, a leader other than not.
func (c *cluster) agreedEpoch(topic string, not int32) (lead, epoch int32) {
	c.t.Helper()
	raws := map[int32]*raw{}
	for id := range c.servers {
		raws[id] = dialRaw(c.t, c.brokers[id])
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen := map[[2]int32]bool{}
		for _, r := range raws {
			l, e := c.metadataEpoch(r, topic)
			seen[[2]int32{l, e}] = true
		}
		if len(seen) == 1 {
			for k := range seen {
				lead, epoch = k[0], k[1]
			}
			if lead > 0 && lead != not {
				return lead, epoch
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the listeners never agreed on a leader and epoch: %v", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLeaderEpochs: the partition's raft term is its Kafka leader
// epoch (KIP-320). Every listener's Metadata names the same one; the
// leader fences a Fetch, ListOffsets or OffsetForLeaderEpoch carrying an
// older epoch (FENCED_LEADER_EPOCH) or a newer one (UNKNOWN_LEADER_EPOCH);
// fetched batches carry it; OffsetForLeaderEpoch answers an epoch's end.
// When the leader dies the epoch grows, and a franz-go consumer that read
// under the old one validates its position at the new leader
// (OffsetForLeaderEpoch) and reads on, every record once, no data loss
// reported.
func TestClusterLeaderEpochs(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	adm := kadm.NewClient(c.client([]int32{1}))
	if res, err := adm.CreateTopics(ctx, 1, 3, nil, "epochs"); err != nil || res["epochs"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["epochs"].Err)
	}
	prod := c.client([]int32{1, 2, 3}, kgo.DefaultProduceTopic("epochs"))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	produce(0, 20)
	lead, epoch := c.agreedEpoch("epochs", 0)
	if epoch <= 0 {
		t.Fatalf("leader %d at epoch %d, want a raft term > 0", lead, epoch)
	}

	r := dialRaw(t, c.brokers[lead])
	fetch := func(current int32) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 12, 0, 1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "epochs"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 1<<20, current
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return r.request(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	if p := fetch(epoch - 1); p.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Errorf("fetch at epoch %d (leader's %d): error %d, want FENCED_LEADER_EPOCH", epoch-1, epoch, p.ErrorCode)
	}
	if p := fetch(epoch + 1); p.ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Errorf("fetch at epoch %d (leader's %d): error %d, want UNKNOWN_LEADER_EPOCH", epoch+1, epoch, p.ErrorCode)
	}
	p := fetch(epoch)
	if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch at the leader's epoch: error %d, %d bytes", p.ErrorCode, len(p.RecordBatches))
	}
	var batch kmsg.RecordBatch
	if err := batch.ReadFrom(p.RecordBatches); err != nil || batch.PartitionLeaderEpoch != epoch {
		t.Fatalf("fetched batch: leader epoch %d (%v), want %d", batch.PartitionLeaderEpoch, err, epoch)
	}

	listOffsets := func(current int32) kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 7
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "epochs"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp, lp.CurrentLeaderEpoch = listLatest, current
		lt.Partitions = append(lt.Partitions, lp)
		req.Topics = append(req.Topics, lt)
		return r.request(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	if p := listOffsets(epoch - 1); p.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Errorf("ListOffsets at an old epoch: error %d, want FENCED_LEADER_EPOCH", p.ErrorCode)
	}
	if p := listOffsets(epoch); p.ErrorCode != 0 || p.Offset != 20 || p.LeaderEpoch != epoch {
		t.Errorf("ListOffsets latest: error %d offset %d epoch %d, want 20 at epoch %d", p.ErrorCode, p.Offset, p.LeaderEpoch, epoch)
	}

	endOf := func(current, asked int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version = 4
		et := kmsg.NewOffsetForLeaderEpochRequestTopic()
		et.Topic = "epochs"
		ep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		ep.CurrentLeaderEpoch, ep.LeaderEpoch = current, asked
		et.Partitions = append(et.Partitions, ep)
		req.Topics = append(req.Topics, et)
		return r.request(req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	if p := endOf(epoch, epoch); p.ErrorCode != 0 || p.LeaderEpoch != epoch || p.EndOffset != 20 {
		t.Errorf("OffsetForLeaderEpoch of the current epoch: error %d, epoch %d, end %d; want %d, 20", p.ErrorCode, p.LeaderEpoch, p.EndOffset, epoch)
	}
	if p := endOf(epoch, epoch+1); p.ErrorCode != 0 || p.LeaderEpoch != -1 || p.EndOffset != -1 {
		t.Errorf("OffsetForLeaderEpoch of a future epoch: error %d, epoch %d, end %d; want -1, -1", p.ErrorCode, p.LeaderEpoch, p.EndOffset)
	}
	if p := endOf(epoch-1, epoch); p.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Errorf("OffsetForLeaderEpoch with an old current epoch: error %d, want FENCED_LEADER_EPOCH", p.ErrorCode)
	}

	// A consumer reads under this epoch; the leader dies.
	var seeds []int32
	for id := range c.servers {
		if id != lead {
			seeds = append(seeds, id)
		}
	}
	cons := c.client(seeds, kgo.ConsumeTopics("epochs"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	got := map[string]int{}
	read := func(n int) {
		t.Helper()
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d records", len(got), n)
			}
			fs.EachError(func(topic string, p int32, err error) {
				t.Fatalf("consuming %s/%d: %v", topic, p, err)
			})
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
		}
	}
	read(20)
	c.kill(lead)
	next, nextEpoch := c.agreedEpoch("epochs", lead)
	if nextEpoch <= epoch {
		t.Fatalf("after the leader's death: leader %d at epoch %d, want an epoch above %d", next, nextEpoch, epoch)
	}
	produce(20, 40)
	read(40)
	for v, n := range got {
		if n != 1 {
			t.Errorf("record %s consumed %d times", v, n)
		}
	}
	validated := testutil.ToFloat64(c.servers[next].metrics.requests.WithLabelValues(apiName(int16(kmsg.OffsetForLeaderEpoch))))
	t.Logf("leader %d at epoch %d died; %d leads at epoch %d; the consumer validated its position %v times there", lead, epoch, next, nextEpoch, validated)
	if validated == 0 {
		t.Errorf("the consumer never asked the new leader OffsetForLeaderEpoch")
	}
}

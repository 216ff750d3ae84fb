package kafka

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTransactionsRefused: transactions are not supported, and every way
// in is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED rather than
// half served: FindCoordinator for a transactional id (single key and
// batched), a Produce naming a transactional id, a transactional batch
// and a control batch (nothing appended), and franz-go's transactional
// producer, whose InitProducerId is refused.
func TestTransactionsRefused(t *testing.T) {
	f := serve(t, Config{})
	r := dialRaw(t, f.addr)
	const refused = 53 // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	if refused != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatal("kerr's code moved")
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKey = 3, coordinatorTransaction, "tx"
	if got := r.request(fc).(*kmsg.FindCoordinatorResponse); got.ErrorCode != refused || got.NodeID != -1 {
		t.Fatalf("FindCoordinator v3 of a transaction: code %d node %d", got.ErrorCode, got.NodeID)
	}
	fc = kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, coordinatorTransaction, []string{"tx1", "tx2"}
	got := r.request(fc).(*kmsg.FindCoordinatorResponse)
	if len(got.Coordinators) != 2 || got.Coordinators[0].ErrorCode != refused || got.Coordinators[1].ErrorCode != refused {
		t.Fatalf("FindCoordinator v4 of transactions: %+v", got.Coordinators)
	}

	// A transactional Produce, and batches that say transactional or
	// control.
	req := kmsg.NewPtrProduceRequest()
	id := "tx"
	req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = 9, -1, 5000, &id
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "txn"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = idemBatch(1, 0, 0, 1)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if code := r.request(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != refused {
		t.Fatalf("a Produce with a transactional id: code %d", code)
	}
	for _, attr := range []uint16{attrTransactional, attrControl} {
		b := idemBatch(1, 0, 0, 1)
		binary.BigEndian.PutUint16(b[21:], attr)
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[batchCRCStart:], castagnoli))
		if code, _ := produceBase(r, "txn", b); code != refused {
			t.Fatalf("a batch with attributes %#x: code %d", attr, code)
		}
	}
	if h, err := f.srv.topics.lookup(ctxFor(t), "txn"); err == nil {
		if po, err := f.node.Admin().PartitionOffsets(ctxFor(t), h, 0, ""); err != nil || po.End != 0 {
			t.Fatalf("the partition ends at %d (%v): a refused batch was appended", po.End, err)
		}
	}

	// franz-go's transactional producer.
	cl := f.client(t, kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("txn"), kgo.AllowAutoTopicCreation())
	// kgo asks for its producer id as the transaction begins (or, if it
	// already had one, as it produces): either is refused.
	err := cl.BeginTransaction()
	if err == nil {
		err = cl.ProduceSync(ctxFor(t), kgo.StringRecord("in a transaction")).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("a transactional producer: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
}

package kafka

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway"
)

// fetchRecords fetches partition 0 of topic from offset 0 in one request
// (no wait) with the given partition budget, and returns the records of
// every batch in the answer.
func fetchRecords(r *raw, topic string, budget int32) (records int) {
	r.t.Helper()
	for _, b := range fetchBatches(r, topic, 0, budget) {
		records += int(b.NumRecords)
	}
	return records
}

// polled is the node's parkway_polled_messages_total over every topic.
func polled(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "parkway_polled_messages_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestFetchFillsBudgetAcrossMemoryChunks: an in-memory partition serves
// a poll up to the end of a run of 1,024 natively produced messages, and
// a fetch polls on until its budget is used, up to the count one poll
// asks for: one fetch with room for all 12,000 records returns 10,000
// (maxFetchMessages), one with a smaller budget more than a run, within
// the budget, without polling a record it then drops. (Records produced
// through the listener are kept as their batches: TestFetchHandsOutKeptBatches.)
func TestFetchFillsBudgetAcrossMemoryChunks(t *testing.T) {
	f := serve(t, Config{DefaultPartitions: 1})
	ctx := ctxFor(t)
	h, err := f.srv.ensure(ctx, "chunks", true)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]parkway.Message, 12_000)
	for i := range msgs {
		msgs[i].Payload = fmt.Appendf(nil, "r%04d", i%10_000)
	}
	for i := 0; i < len(msgs); i += 3000 {
		if _, err := f.node.Produce(ctx, h, parkway.PartitionID(0), msgs[i:i+3000]...); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.node.Metrics())
	r := dialRaw(t, f.addr)
	if n := fetchRecords(r, "chunks", 1<<20); n != maxFetchMessages {
		t.Fatalf("one fetch with a 1 MiB budget returned %d records, want %d (as many as one poll asks for)", n, maxFetchMessages)
	}
	// The budget counts what a poll's does: the records' values here, 5
	// bytes each. 8,002 bytes: a chunk (1,024), then a poll the budget
	// cuts at 576 with 2 bytes left, less than a record: the fetch asks
	// no more (a poll for them would read a record only to drop it).
	before := polled(t, reg)
	if n := fetchRecords(r, "chunks", 8002); n != 1600 {
		t.Fatalf("a fetch with an 8,002-byte budget returned %d records, want 1,600", n)
	}
	if got := polled(t, reg) - before; got != 1600 {
		t.Fatalf("the fetch polled %v messages for the 1,600 it returned", got)
	}
}

package kafka

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// TestISRTable drives the in-sync replica table's state machine with a
// clock of its own: a partition never read answers nothing and wakes the
// refresher once; a read's set answers for its term and placement only,
// never naming a node outside the placement; a used set past
// isrRefreshAge is answered and read again; past isrMaxAge it is not
// answered; a failed read is not retried within isrTick; and an entry
// unused for isrForget is dropped.
func TestISRTable(t *testing.T) {
	tb := newISRTable()
	at := time.Unix(1_000_000, 0)
	k := isrKey{t: parkway.Topic{ID: 1, Name: "a"}, part: 0, created: 7}
	all := []int32{1, 2, 3}
	check := func(what string, isr []int32, ok bool, wantISR []int32, wantOK bool) {
		t.Helper()
		if ok != wantOK || !slices.Equal(isr, wantISR) {
			t.Fatalf("%s: isr %v ok %v, want %v %v", what, isr, ok, wantISR, wantOK)
		}
	}
	read := func(want int) []isrRead {
		t.Helper()
		reads := tb.due(at, isrReads)
		if len(reads) != want {
			t.Fatalf("due: %d reads %+v, want %d", len(reads), reads, want)
		}
		return reads
	}

	isr, ok, wake := tb.lookup(k, 1, 5, all, at)
	check("never read", isr, ok, nil, false)
	if !wake {
		t.Fatal("a partition never read does not wake the refresher")
	}
	if _, _, wake = tb.lookup(k, 1, 5, all, at); wake {
		t.Fatal("a second lookup woke the refresher again before the read started")
	}
	if r := read(1)[0]; r.key != k || r.leader != 1 {
		t.Fatalf("due: %+v", r)
	}
	read(0) // in flight: not due twice
	if _, _, wake = tb.lookup(k, 1, 5, all, at); wake {
		t.Fatal("a lookup woke the refresher while the read is in flight")
	}
	tb.store(k, []int32{1, 3}, 5, true, at)
	isr, ok, _ = tb.lookup(k, 1, 5, all, at)
	check("read in term 5", isr, ok, []int32{1, 3}, true)

	// A new leader (a new term) invalidates the set.
	isr, ok, wake = tb.lookup(k, 3, 6, all, at)
	check("another term", isr, ok, nil, false)
	if !wake {
		t.Fatal("a set of another term does not wake the refresher")
	}
	if r := read(1)[0]; r.leader != 3 {
		t.Fatalf("the read goes to leader %d, want 3", r.leader)
	}
	tb.store(k, []int32{3, 1, 2}, 6, true, at)
	isr, ok, _ = tb.lookup(k, 3, 6, all, at)
	check("read in term 6", isr, ok, []int32{3, 1, 2}, true)

	// A placement change invalidates it; a read started for the old
	// placement and stored after never names a node the new one lacks.
	isr, ok, _ = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("placement changed", isr, ok, nil, false)
	read(1)
	tb.store(k, []int32{3, 1, 2}, 6, true, at)
	isr, ok, _ = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("a stale set for the new placement", isr, ok, []int32{3, 1}, true)

	// A set that leaves out its own leader is not answered.
	tb.store(k, []int32{1}, 6, true, at)
	isr, ok, _ = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("without its leader", isr, ok, nil, false)
	read(1)
	tb.store(k, []int32{3}, 6, true, at)

	// Past isrRefreshAge a used set is answered and read again, without
	// waking the refresher (its tick takes it).
	at = at.Add(isrRefreshAge)
	isr, ok, wake = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("past the refresh age", isr, ok, []int32{3}, true)
	if wake {
		t.Fatal("a set still answered woke the refresher")
	}
	read(1)
	// A failed read keeps the set, and is not retried within isrTick.
	tb.store(k, nil, 0, false, at)
	at = at.Add(isrMaxAge - isrRefreshAge)
	isr, ok, _ = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("at the max age", isr, ok, []int32{3}, true)
	read(1)
	tb.store(k, nil, 0, false, at)
	at = at.Add(time.Millisecond)
	isr, ok, _ = tb.lookup(k, 3, 6, []int32{3, 1}, at)
	check("past the max age", isr, ok, nil, false)
	read(0) // failed a millisecond ago
	at = at.Add(isrTick)
	read(1)
	tb.store(k, []int32{3, 1}, 6, true, at)

	// Unused for isrForget, the entry is dropped.
	at = at.Add(isrForget + time.Millisecond)
	read(0)
	if n := len(tb.entries); n != 0 {
		t.Fatalf("%d entries kept after %v unused", n, isrForget)
	}
}

// TestISRTableDueSpreadsLeaders: the reads due come leader by leader in
// turn, so those in flight at once spread over the leaders; at most the
// free slots are taken, and the rest are taken next.
func TestISRTableDueSpreadsLeaders(t *testing.T) {
	tb := newISRTable()
	at := time.Unix(1_000_000, 0)
	leaders := []int32{1, 1, 1, 2, 3, 3}
	for i, l := range leaders {
		tb.lookup(isrKey{t: parkway.Topic{ID: 1}, part: uint32(i)}, l, 1, []int32{1, 2, 3}, at)
	}
	take := func(limit int, want ...int32) {
		t.Helper()
		var got []int32
		for _, r := range tb.due(at, limit) {
			got = append(got, r.leader)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("reads by leader %v, want %v", got, want)
		}
	}
	take(4, 1, 2, 3, 1)
	take(4, 1, 3)
	take(4)
}

// TestClusterMetadataReadsISRInBackground: Metadata answers the in-sync
// replicas from the refresher's table, so a burst of Metadata requests
// for a topic of 16 partitions asks the partitions' leaders at most once
// per partition per isrRefreshAge (isrTick for a failed read) of the
// burst's duration — not once per partition per request, which would be
// 1,600 reads for 100 requests.
func TestClusterMetadataReadsISRInBackground(t *testing.T) {
	const parts, requests = 16, 100
	c := startCluster(t)
	const topicName = "isr-burst"
	r := dialRaw(t, c.brokers[1])
	r.createTopic(topicName, parts, 3)
	srv := c.servers[1]
	metadata := func() *kmsg.MetadataResponse {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topicName)
		req.Topics = append(req.Topics, mt)
		return r.request(req).(*kmsg.MetadataResponse)
	}
	// answered counts the partitions whose in-sync set the table
	// answers.
	answered := func() int {
		srv.isr.mu.Lock()
		defer srv.isr.mu.Unlock()
		n := 0
		for k, e := range srv.isr.entries {
			if k.t.Name == topicName && e.isr != nil {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(testTimeout); answered() < parts; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d partitions' in-sync sets read", answered(), parts)
		}
		metadata()
	}
	reads := func(result string) float64 {
		return testutil.ToFloat64(srv.metrics.isrReads.WithLabelValues(result))
	}
	okBefore, failedBefore, start := reads("ok"), reads("error"), time.Now()
	for range requests {
		resp := metadata()
		for _, p := range resp.Topics[0].Partitions {
			if len(p.ISR) == 0 {
				t.Fatalf("partition %d answered no in-sync replica", p.Partition)
			}
		}
	}
	elapsed := time.Since(start)
	// A set read is read again at most every isrRefreshAge; a failed
	// read retried at most every isrTick.
	ok, failed := reads("ok")-okBefore, reads("error")-failedBefore
	okBound := float64(parts * (int(elapsed/isrRefreshAge) + 2))
	failedBound := float64(parts * (int(elapsed/isrTick) + 2))
	t.Logf("%d Metadata requests of %d partitions in %v: %v leader reads (bound %v), %v failed (bound %v)", requests, parts, elapsed, ok, okBound, failed, failedBound)
	if ok > okBound || failed > failedBound {
		t.Fatalf("%v in-sync replica reads and %v failed for %d Metadata requests of %d partitions in %v: more than %v and %v", ok, failed, requests, parts, elapsed, okBound, failedBound)
	}
}

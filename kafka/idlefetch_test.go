package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIdleConsumerFetchesWait: a franz-go consumer of a partition that
// gets no records has each fetch held for its MaxWait (a waiting poll at
// the partition) rather than answered at once, so an idle consumer costs
// about one request per MaxWait — not a busy loop of empty fetches. The
// fetches counted over the idle window are bounded by the window over
// MaxWait, plus the ones in flight at its edges.
func TestIdleConsumerFetchesWait(t *testing.T) {
	const maxWait = 300 * time.Millisecond
	f := serve(t, Config{})
	prod := f.client(t, kgo.DefaultProduceTopic("idle"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord("only")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := f.client(t, kgo.ConsumeTopics("idle"), kgo.FetchMaxWait(maxWait))
	consume(t, cons, 1) // the consumer is at the end: from here it is idle
	fetches := func() float64 { return testutil.ToFloat64(f.srv.metrics.requests.WithLabelValues("Fetch")) }
	before, start := fetches(), time.Now()
	ctx, cancel := context.WithTimeout(ctxFor(t), 5*maxWait)
	defer cancel()
	if fs := cons.PollFetches(ctx); len(fs.Records()) != 0 {
		t.Fatalf("an idle partition gave %d records", len(fs.Records()))
	}
	got, elapsed := fetches()-before, time.Since(start)
	bound := float64(elapsed/maxWait) + 2
	t.Logf("%v fetches in %v idle (MaxWait %v, bound %v)", got, elapsed, maxWait, bound)
	if got > bound {
		t.Fatalf("%v fetches in %v of an idle partition with MaxWait %v: more than %v, the fetches are not waiting", got, elapsed, maxWait, bound)
	}
}

// TestIdleTimeoutClosesConnection: a connection that sends no request
// for Config.IdleTimeout is closed by the server (counted as a read
// failure), after being served while it was active.
func TestIdleTimeoutClosesConnection(t *testing.T) {
	f := serve(t, Config{IdleTimeout: 200 * time.Millisecond})
	r := dialRaw(t, f.addr)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	if resp := r.request(av).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: code %d", resp.ErrorCode)
	}
	r.expectClosed()
	if n := testutil.ToFloat64(f.srv.metrics.closed.WithLabelValues("read")); n < 1 {
		t.Fatalf("connections closed on a read timeout: %v, want 1", n)
	}
}

package kafka

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkClusterMetadata1000: one Metadata request for a topic of
// 1,000 partitions (replication 3) at one listener of a 3-node cluster
// on the in-memory bus, once every partition has a leader and the
// listener's in-sync sets are known. Before the in-sync replica table
// (isr.go) every request asked each partition's leader for its set (a
// leader read, forwarded for the two thirds led elsewhere); with it the
// sets are answered from memory and read in the background at most once
// a second per partition. Compare ns/op and allocs/op:
//
//	go test -run XXX -bench ClusterMetadata1000 -benchtime 20x -count 3 ./kafka
func BenchmarkClusterMetadata1000(b *testing.B) {
	const parts, topicName = 1000, "meta-bench"
	c := startCluster(b)
	r := dialRaw(b, c.brokers[1])
	r.createTopic(topicName, parts, 3)
	metadata := func() *kmsg.MetadataResponse {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topicName)
		req.Topics = append(req.Topics, mt)
		return r.request(req).(*kmsg.MetadataResponse)
	}
	led := func(resp *kmsg.MetadataResponse) bool {
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != parts {
			return false
		}
		for _, p := range resp.Topics[0].Partitions {
			if p.Leader < 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(2 * time.Minute); !led(metadata()) || !isrKnown(c.servers[1], topicName, parts); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("timed out waiting for every partition's leader and in-sync set")
		}
	}
	reads := readsOf(c.servers[1])
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if resp := metadata(); len(resp.Topics[0].Partitions) != parts {
			b.Fatalf("%d partitions answered", len(resp.Topics[0].Partitions))
		}
	}
	b.StopTimer()
	b.ReportMetric((readsOf(c.servers[1])-reads)/float64(b.N), "isr-reads/op")
}

// isrKnown reports whether srv's table answers parts in-sync sets of
// topic.
func isrKnown(srv *Server, topic string, parts int) bool {
	srv.isr.mu.Lock()
	defer srv.isr.mu.Unlock()
	n := 0
	for k, e := range srv.isr.entries {
		if k.t.Name == topic && e.isr != nil {
			n++
		}
	}
	return n >= parts
}

// readsOf is the in-sync set reads srv's refresher made.
func readsOf(srv *Server) float64 {
	return testutil.ToFloat64(srv.metrics.isrReads.WithLabelValues("ok")) + testutil.ToFloat64(srv.metrics.isrReads.WithLabelValues("error"))
}

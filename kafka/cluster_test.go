package kafka

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/parkway-io/parkway"
)

// TestClusterOfBrokers runs a listener on each node of a 3-node cluster.
// A client that knows one of them learns all three brokers and each
// partition's raft leader from Metadata, produces to the leaders, and a
// consumer group meets at the coordinator its id hashes to, whichever
// node each member bootstrapped from.
func TestClusterOfBrokers(t *testing.T) {
	bus := parkway.NewNetwork(parkway.NetworkOptions{})
	t.Cleanup(func() { bus.Close() })
	peers := []parkway.NodeID{1, 2, 3}
	nodes := map[int32]*parkway.Node{}
	listeners := map[int32]net.Listener{}
	brokers := map[int32]string{}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1, Cluster: &parkway.Cluster{ID: id, Peers: peers, Bus: bus.Endpoint(id)}})
		if err != nil {
			t.Fatalf("Open node %d: %v", id, err)
		}
		t.Cleanup(func() { _ = n.Close() })
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nodes[int32(id)], listeners[int32(id)], brokers[int32(id)] = n, l, l.Addr().String()
	}
	for id, n := range nodes {
		srv, err := NewServer(n, Config{BrokerID: id, Brokers: brokers, DefaultPartitions: 3})
		if err != nil {
			t.Fatalf("NewServer %d: %v", id, err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(listeners[id]) }()
		t.Cleanup(func() { // before the nodes close (cleanups run last first)
			_ = srv.Close()
			if err := <-served; !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve %d: %v", id, err)
			}
		})
	}
	client := func(seed int32, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers[seed])}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	ctx := ctxFor(t)
	adm := kadm.NewClient(client(1))
	if res, err := adm.CreateTopics(ctx, 3, 3, nil, "replicated"); err != nil || res["replicated"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["replicated"].Err)
	}
	prod := client(2, kgo.DefaultProduceTopic("replicated"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	const n = 300
	for i := range n {
		prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	md, err := adm.Metadata(ctx, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 3 {
		t.Fatalf("metadata names %d brokers, want 3", len(md.Brokers))
	}
	stream, err := nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := nodes[1].Topic(ctx, stream, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]bool{}
	for _, p := range md.Topics["replicated"].Partitions {
		t.Logf("partition %d: leader %d replicas %v err %v", p.Partition, p.Leader, p.Replicas, p.Err)
		leaders[p.Leader] = true
		if len(p.Replicas) != 3 {
			t.Fatalf("partition %d: replicas %v, want 3", p.Partition, p.Replicas)
		}
		if lead, err := nodes[1].Leader(ctx, topic, uint32(p.Partition)); err == nil && lead != 0 && int32(lead) != p.Leader {
			t.Errorf("partition %d: metadata says leader %d, the node %d", p.Partition, p.Leader, lead)
		}
	}

	if len(leaders) < 2 {
		t.Fatalf("every partition is led by %v: the leaders are not spread", leaders)
	}

	// Two group members bootstrapped from different nodes share the
	// partitions: they met at one coordinator.
	s := &seen{by: map[string][]int{}}
	var members []*groupMember
	for i, seed := range []int32{1, 3} {
		cl := client(seed, kgo.ConsumerGroup("cluster-group"), kgo.ConsumeTopics("replicated"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		members = append(members, pollMember(cl, i, s))
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	waitCount(t, s, n)
	total := uint64(0)
	for p := range uint32(3) {
		po, err := nodes[3].PartitionOffsets(ctx, topic, p, "")
		if err != nil {
			t.Fatal(err)
		}
		total += po.End
	}
	if total != n {
		t.Fatalf("the partitions hold %d records, want %d", total, n)
	}
}

package kafka

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// cluster is nodes on an in-memory bus, each with a listener.
type cluster struct {
	t       testing.TB
	bus     *transport.Network
	nodes   map[int32]*parkway.Node
	servers map[int32]*Server
	served  map[int32]chan error
	brokers map[int32]string
}

// startCluster starts three nodes.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	return startClusterOf(t, 3)
}

// startClusterOf starts size nodes, ids 1..size.
func startClusterOf(t testing.TB, size int) *cluster {
	t.Helper()
	return startClusterWith(t, size, nil)
}

// startClusterWith starts size nodes, ids 1..size, each listener's
// config changed by with (if not nil).
func startClusterWith(t testing.TB, size int, with func(*Config)) *cluster {
	t.Helper()
	bus := transport.NewNetwork(transport.NetworkOptions{})
	t.Cleanup(func() { bus.Close() })
	var peers []transport.NodeID
	for id := range size {
		peers = append(peers, transport.NodeID(id+1))
	}
	c := &cluster{t: t, bus: bus, nodes: map[int32]*parkway.Node{}, servers: map[int32]*Server{}, served: map[int32]chan error{}, brokers: map[int32]string{}}
	listeners := map[int32]net.Listener{}
	for _, id := range peers {
		n, err := parkway.Open(parkway.Config{Shards: 1, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: bus.Endpoint(id)}})
		if err != nil {
			t.Fatalf("Open node %d: %v", id, err)
		}
		t.Cleanup(func() { _ = n.Close() })
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[int32(id)], listeners[int32(id)], c.brokers[int32(id)] = n, l, l.Addr().String()
	}
	for id, n := range c.nodes {
		cfg := Config{BrokerID: id, Brokers: c.brokers, DefaultPartitions: 3}
		if with != nil {
			with(&cfg)
		}
		srv, err := NewServer(n, cfg)
		if err != nil {
			t.Fatalf("NewServer %d: %v", id, err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(listeners[id]) }()
		c.servers[id], c.served[id] = srv, served
		t.Cleanup(func() { c.stopServer(id) }) // before the nodes close (cleanups run last first)
	}
	return c
}

// stopServer closes a node's listener (once).
func (c *cluster) stopServer(id int32) {
	srv := c.servers[id]
	if srv == nil {
		return
	}
	delete(c.servers, id)
	_ = srv.Close()
	if err := <-c.served[id]; !errors.Is(err, ErrServerClosed) {
		c.t.Errorf("Serve %d: %v", id, err)
	}
}

// kill stops a node: its listener, then the node.
func (c *cluster) kill(id int32) {
	c.stopServer(id)
	_ = c.nodes[id].Close()
}

func (c *cluster) client(seeds []int32, opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	var addrs []string
	for _, s := range seeds {
		addrs = append(addrs, c.brokers[s])
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// TestClusterOfBrokers runs a listener on each node of a 3-node cluster.
// A client that knows one of them learns all three brokers and each
// partition's raft leader from Metadata, produces to the leaders, and a
// consumer group meets at the coordinator its id hashes to, whichever
// node each member bootstrapped from.
func TestClusterOfBrokers(t *testing.T) {
	c := startCluster(t)
	nodes := c.nodes
	client := func(seed int32, opts ...kgo.Opt) *kgo.Client { return c.client([]int32{seed}, opts...) }
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
		if lead, err := nodes[1].Cluster().Leader(ctx, topic, uint32(p.Partition)); err == nil && lead != 0 && int32(lead) != p.Leader {
			t.Errorf("partition %d: metadata says leader %d, the node %d", p.Partition, p.Leader, lead)
		}
	}

	// Each listener's series carry its node's label, so the three
	// register on one registry, beside the nodes' own.
	reg := prometheus.NewPedanticRegistry()
	for id, srv := range c.servers {
		if err := reg.Register(srv.Metrics()); err != nil {
			t.Fatalf("registering listener %d's metrics: %v", id, err)
		}
		if err := reg.Register(c.nodes[id].Metrics()); err != nil {
			t.Fatalf("registering node %d's metrics: %v", id, err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
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
		po, err := nodes[3].Admin().PartitionOffsets(ctx, topic, p, "")
		if err != nil {
			t.Fatal(err)
		}
		total += po.End
	}
	if total != n {
		t.Fatalf("the partitions hold %d records, want %d", total, n)
	}
}

// TestClusterLeaderKilledMidProduce: franz-go's idempotent producer
// produces to a replicated partition while its leader's node (and
// listener) is killed. The client moves to the new leader through the
// survivors' Metadata; every acknowledged record is in the log
// afterwards, once: a batch whose outcome the dead leader left unknown is
// retried through another listener, and the partition's replicated
// deduplication window applies it once (before the listener passed the
// batch's identity down, one run in three appended 286 records twice).
func TestClusterLeaderKilledMidProduce(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	adm := kadm.NewClient(c.client([]int32{1}))
	if res, err := adm.CreateTopics(ctx, 1, 3, nil, "survive"); err != nil || res["survive"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["survive"].Err)
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, "survive")
	if err != nil {
		t.Fatal(err)
	}
	var leader transport.NodeID
	for leader == 0 {
		if leader, err = c.nodes[1].Cluster().Leader(ctx, topic, 0); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("no leader elected")
		}
	}
	prod := c.client([]int32{1, 2, 3}, kgo.DefaultProduceTopic("survive"), kgo.RecordDeliveryTimeout(testTimeout))
	var (
		mu    sync.Mutex
		acked []string
		fails []error
	)
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					fails = append(fails, err)
					return
				}
				acked = append(acked, string(r.Value))
			})
		}
	}
	produce(0, 300)
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	produce(300, 600) // in flight while the leader dies
	c.kill(int32(leader))
	produce(600, 900)
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("Flush after the kill: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(fails) > 0 {
		t.Logf("%d records failed (not acknowledged), the first: %v", len(fails), fails[0])
	}

	var survivor int32
	for id := range c.nodes {
		if id != int32(leader) {
			survivor = id
		}
	}
	count := map[string]int{}
	from := uint64(0)
	for {
		b, err := c.nodes[survivor].Poll(ctx, topic, 0, parkway.AtOffset(from), 1000)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if len(b.Messages) == 0 {
			break
		}
		for _, m := range b.Messages {
			count[string(m.Payload)]++
		}
		from = b.Next
	}
	for _, v := range acked {
		if count[v] == 0 {
			t.Fatalf("acknowledged record %s is not in the log", v)
		}
	}
	dups := 0
	for _, n := range count {
		dups += n - 1
	}
	t.Logf("leader %d killed: %d records acknowledged, %d failed, the log holds %d", leader, len(acked), len(fails), from)
	if dups > 0 {
		t.Fatalf("%d records appended twice", dups)
	}
}

// TestClusterNotLeaderNamesTheLeader: a produce that reaches a broker not
// leading its partition is answered NOT_LEADER_OR_FOLLOWER, not appended
// there, and (Produce v10+, KIP-951) names the leader and its address, as
// a Kafka broker does; a franz-go client that only knows that broker then
// produces through the leader.
func TestClusterNotLeaderNamesTheLeader(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	adm := kadm.NewClient(c.client([]int32{1}))
	if res, err := adm.CreateTopics(ctx, 1, 3, nil, "moved"); err != nil || res["moved"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["moved"].Err)
	}
	first := c.client([]int32{1}, kgo.DefaultProduceTopic("moved"))
	if err := first.ProduceSync(ctx, kgo.StringRecord("first")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, "moved")
	if err != nil {
		t.Fatal(err)
	}
	// Every node agrees on the leader: a follower's listener then knows
	// where to send the client.
	var lead, follower int32
	deadline := time.Now().Add(20 * time.Second)
	for lead == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the nodes never agreed on a leader")
		}
		seen := map[int32]int32{}
		for id, n := range c.nodes {
			l, err := n.Cluster().Leader(ctx, topic, 0)
			if err != nil {
				t.Fatal(err)
			}
			seen[id] = int32(l)
		}
		if seen[1] != 0 && seen[1] == seen[2] && seen[2] == seen[3] {
			lead = seen[1]
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	follower = lead%3 + 1

	r := dialRaw(t, c.brokers[follower])
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 12, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "moved"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = idemBatch(-1, -1, -1, 1)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.request(req).(*kmsg.ProduceResponse)
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce at follower %d (leader %d): error code %d, want NOT_LEADER_OR_FOLLOWER", follower, lead, p.ErrorCode)
	}
	if p.CurrentLeader.LeaderID != lead {
		t.Errorf("CurrentLeader %d, want %d", p.CurrentLeader.LeaderID, lead)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != lead ||
		net.JoinHostPort(resp.Brokers[0].Host, fmt.Sprint(resp.Brokers[0].Port)) != c.brokers[lead] {
		t.Errorf("brokers %+v, want node %d at %s", resp.Brokers, lead, c.brokers[lead])
	}
	po, err := c.nodes[lead].Admin().PartitionOffsets(ctx, topic, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if po.End != 1 {
		t.Fatalf("partition end %d after the refused produce, want 1", po.End)
	}

	// A client that knows only the follower learns the leader and
	// produces there.
	cl := c.client([]int32{follower}, kgo.DefaultProduceTopic("moved"))
	for i := range 50 {
		cl.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if po, err = c.nodes[lead].Admin().PartitionOffsets(ctx, topic, 0, ""); err != nil || po.End != 51 {
		t.Fatalf("partition end %d (%v), want 51", po.End, err)
	}

	// A fetch at the follower is sent to the leader the same way, and a
	// consumer that knows only the follower reads everything there.
	freq := fetchRequest("moved", 0, 1<<20)
	freq.MinBytes = 1
	fresp := r.request(freq).(*kmsg.FetchResponse)
	if fp := fresp.Topics[0].Partitions[0]; fp.ErrorCode != kerr.NotLeaderForPartition.Code || fp.CurrentLeader.LeaderID != lead {
		t.Fatalf("fetch at follower %d: error code %d, current leader %d; want NOT_LEADER_OR_FOLLOWER and %d", follower, fp.ErrorCode, fp.CurrentLeader.LeaderID, lead)
	}
	cons := c.client([]int32{follower}, kgo.ConsumeTopics("moved"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consume(t, cons, 51); len(got) != 51 {
		t.Fatalf("consumed %d records through the follower's client, want 51", len(got))
	}
}

// TestClusterMetadataNamesLeaderWithoutReplica: a listener on a node that
// holds no replica of a partition still names the partition's leader in
// Metadata — its node asks a replica — and names the new one within
// seconds of the old leader's death. (Its node's own shards know only
// the groups it is a member of: with four nodes and three replicas the
// listener answered LEADER_NOT_AVAILABLE for every partition placed
// elsewhere, and a client that knew only that broker could not produce.)
func TestClusterMetadataNamesLeaderWithoutReplica(t *testing.T) {
	c := startClusterOf(t, 4)
	ctx := ctxFor(t)
	adm := kadm.NewClient(c.client([]int32{1}))
	if res, err := adm.CreateTopics(ctx, 4, 3, nil, "placed"); err != nil || res["placed"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["placed"].Err)
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, "placed")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := c.nodes[1].Admin().Partitions(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// A partition and a node outside its placement.
	var (
		part     int32 = -1
		outsider int32
		replicas = map[int32]bool{}
	)
	for _, info := range infos {
		held := map[int32]bool{}
		for _, r := range info.Replicas {
			held[int32(r)] = true
		}
		for id := range int32(4) {
			if !held[id+1] {
				part, outsider, replicas = int32(info.Partition), id+1, held
				break
			}
		}
		if part >= 0 {
			break
		}
	}
	if part < 0 {
		t.Fatalf("every node holds every partition: %+v", infos)
	}

	// metadataLeader asks the outsider's listener for the partition's
	// leader until it names one that is not dead, within a bound.
	metadataLeader := func(dead int32) int32 {
		t.Helper()
		r := dialRaw(t, c.brokers[outsider])
		deadline := time.Now().Add(10 * time.Second)
		for {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("placed")
			req.Topics = append(req.Topics, rt)
			resp := r.request(req).(*kmsg.MetadataResponse)
			for _, p := range resp.Topics[0].Partitions {
				if p.Partition == part && p.ErrorCode == 0 && p.Leader > 0 && p.Leader != dead {
					if !replicas[p.Leader] {
						t.Fatalf("node %d's listener names node %d, not a replica (%v), as partition %d's leader", outsider, p.Leader, replicas, part)
					}
					return p.Leader
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's listener named no leader of partition %d (placed on %v) in 10 s: %+v", outsider, part, replicas, resp.Topics[0].Partitions)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	start := time.Now()
	lead := metadataLeader(0)
	t.Logf("first leader after %v", time.Since(start))
	if l, err := c.nodes[lead].Cluster().Leader(ctx, topic, uint32(part)); err != nil || int32(l) != lead {
		t.Fatalf("the outsider's listener names leader %d, the leader's own node says %d (%v)", lead, l, err)
	}

	// A client that knows only the outsider produces to the partition.
	cl := c.client([]int32{outsider}, kgo.DefaultProduceTopic("placed"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i)), Partition: part}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	produce(0, 20)

	// The leader dies: the outsider's listener names the new one.
	c.kill(lead)
	start = time.Now()
	next := metadataLeader(lead)
	t.Logf("next leader after %v", time.Since(start))
	t.Logf("partition %d on %v: leader %d killed, node %d's listener names %d", part, replicas, lead, outsider, next)
	produce(20, 40)
	var alive int32
	for id := range c.nodes {
		if id != lead && replicas[id] {
			alive = id
		}
	}
	po, err := c.nodes[alive].Admin().PartitionOffsets(ctx, topic, uint32(part), "")
	if err != nil || po.End != 40 {
		t.Fatalf("partition end %d (%v), want 40", po.End, err)
	}
}

// TestMetadataListsLiveBrokers: Metadata and DescribeCluster list the
// brokers whose nodes the answering node judges live, as Kafka lists the
// brokers registered alive. A dead broker listed is picked by clients
// for requests that may go to any broker — franz-go sends FindCoordinator
// so, once, and a heartbeat that twice fails to find its coordinator
// makes its member rejoin the group.
func TestMetadataListsLiveBrokers(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	brokers := func(at int32) ([]int32, []int32) {
		t.Helper()
		r := dialRaw(t, c.brokers[at])
		defer func() { _ = r.nc.Close() }()
		var md, dc []int32
		mreq := kmsg.NewPtrMetadataRequest()
		mreq.Version, mreq.Topics = 12, []kmsg.MetadataRequestTopic{}
		for _, b := range r.request(mreq).(*kmsg.MetadataResponse).Brokers {
			md = append(md, b.NodeID)
		}
		dreq := kmsg.NewPtrDescribeClusterRequest()
		dreq.Version, dreq.EndpointType = 1, 1
		for _, b := range r.request(dreq).(*kmsg.DescribeClusterResponse).Brokers {
			dc = append(dc, b.NodeID)
		}
		return md, dc
	}
	if md, dc := brokers(1); !slices.Equal(md, []int32{1, 2, 3}) || !slices.Equal(dc, md) {
		t.Fatalf("before the kill: Metadata lists %v, DescribeCluster %v; want 1, 2 and 3", md, dc)
	}
	c.kill(3)
	for {
		md, dc := brokers(1)
		if slices.Equal(md, []int32{1, 2}) && slices.Equal(dc, md) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the kill: Metadata lists %v, DescribeCluster %v; want 1 and 2", md, dc)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

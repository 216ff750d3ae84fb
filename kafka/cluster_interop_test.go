package kafka

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// waitUntil polls cond until it holds or the test's deadline passes.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestClusterTopicIDFence is behaviour 29 across listeners: a topic is
// deleted and recreated (same name, and the same slab ids) through one
// node's listener, with kadm; another node's listener, which served the
// old incarnation by its topic ID and still holds that handle, answers a
// Fetch and a Produce by the old ID UNKNOWN_TOPIC_ID once its node knows
// the new incarnation, appends nothing to it, and serves the new ID.
func TestClusterTopicIDFence(t *testing.T) {
	c := startClusterWith(t, 3, func(cfg *Config) { cfg.DisableAutoCreate = true })
	ctx := ctxFor(t)
	adm := kadm.NewClient(c.client([]int32{1}))
	const name = "fenced-ids"
	created, err := adm.CreateTopics(ctx, 1, 3, nil, name)
	if err != nil || created[name].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, created[name].Err)
	}
	oldID := [16]byte(created[name].ID)
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	old, err := c.nodes[1].Topic(ctx, stream, name)
	if err != nil {
		t.Fatal(err)
	}
	// served is a partition's answer of a live topic at a listener: its
	// records, or NOT_LEADER_OR_FOLLOWER naming the leader.
	served := func(code int16) bool { return code == 0 || code == kerr.NotLeaderForPartition.Code }

	// Broker 2's listener serves the old ID (and so caches its handle)
	// once its node has applied the creation.
	r2 := dialRaw(t, c.brokers[2])
	waitUntil(t, "broker 2 to serve the topic by its ID", func() bool { return served(fetchByID(r2, oldID)) })

	if res, err := adm.DeleteTopics(ctx, name); err != nil || res[name].Err != nil {
		t.Fatalf("DeleteTopics: %v %v", err, res[name].Err)
	}
	recreated, err := adm.CreateTopics(ctx, 1, 3, nil, name)
	if err != nil || recreated[name].Err != nil {
		t.Fatalf("CreateTopics again: %v %v", err, recreated[name].Err)
	}
	newID := [16]byte(recreated[name].ID)
	if newID == oldID {
		t.Fatal("the recreated topic has the old topic ID")
	}
	// Node 2 knows the new incarnation (a linearizable read); its
	// listener's cache still maps the old ID to the old handle.
	now, err := c.nodes[2].Topic(ctx, stream, name)
	if err != nil {
		t.Fatal(err)
	}
	if topicID(now) != newID {
		t.Fatalf("node 2 reads topic ID %x, want the new one %x", topicID(now), newID)
	}
	if now.ID != old.ID {
		t.Fatalf("the recreated topic took id %d, not the old one's %d: the test needs the ids reused", now.ID, old.ID)
	}

	if code := fetchByID(r2, oldID); code != kerr.UnknownTopicID.Code {
		t.Fatalf("fetch by the old ID at broker 2: code %d, want UNKNOWN_TOPIC_ID (100)", code)
	}
	rec := kmsg.Record{Value: []byte("stale")}
	one := rec.AppendTo(nil)[1:]
	recs := append(binary.AppendVarint(nil, int64(len(one))), one...)
	if code := produceByID(r2, oldID, batch(0, recs, 1, false)); code != kerr.UnknownTopicID.Code {
		t.Fatalf("produce by the old ID at broker 2: code %d, want UNKNOWN_TOPIC_ID (100)", code)
	}
	// Broker 3's listener never saw the old ID: refused there too.
	if code := fetchByID(dialRaw(t, c.brokers[3]), oldID); code != kerr.UnknownTopicID.Code {
		t.Fatalf("fetch by the old ID at broker 3: code %d, want UNKNOWN_TOPIC_ID (100)", code)
	}
	if po, err := c.nodes[1].Admin().PartitionOffsets(ctx, now, 0, ""); err != nil || po.End != 0 {
		t.Fatalf("the new incarnation ends at %d (%v), want 0", po.End, err)
	}
	if code := fetchByID(r2, newID); !served(code) {
		t.Fatalf("fetch by the new ID at broker 2: code %d", code)
	}
}

// TestClusterSCRAMOverTLS: a 3-node cluster whose listeners serve TLS and
// SASL. A franz-go client that knows one of them authenticates with
// SCRAM-SHA-256 over TLS to every broker it learns from Metadata,
// produces to partitions led by different nodes (its produce requests
// are written to more than one broker), and reads every acknowledged
// record back at its offset.
func TestClusterSCRAMOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	creds, err := NewStaticCredentials(map[string]string{"alice": "wonderland"})
	if err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, 3, func(cfg *Config) {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		cfg.SASL = &SASLConfig{Credentials: creds, Mechanisms: []string{MechanismSCRAMSHA256}}
	})
	ctx := ctxFor(t)
	secure := []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: "alice", Pass: "wonderland"}.AsSha256Mechanism()),
	}
	const topic, parts, perPart = "secure-cluster", 6, 10
	adm := kadm.NewClient(c.client([]int32{1}, secure...))
	if res, err := adm.CreateTopics(ctx, parts, 3, nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}
	leaders := map[int32]bool{}
	waitUntil(t, "a leader of every partition, on more than one node", func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatalf("Metadata: %v", err)
		}
		clear(leaders)
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader <= 0 {
				return false
			}
			leaders[p.Leader] = true
		}
		return len(md.Topics[topic].Partitions) == parts && len(leaders) > 1
	})

	writes := newRequestWrites(kmsg.Produce)
	prod := c.client([]int32{1}, append(secure, kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(writes))...)
	acked := map[int32]map[int64]string{}
	for p := range int32(parts) {
		acked[p] = map[int64]string{}
		for i := range perPart {
			v := fmt.Sprintf("p%d-%d", p, i)
			r, err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: p}).First()
			if err != nil {
				t.Fatalf("produce to partition %d: %v", p, err)
			}
			acked[p][r.Offset] = v
		}
	}
	brokers := writes.brokers()
	if len(brokers) < 2 {
		t.Fatalf("produce requests written to brokers %v; partitions are led by %v", brokers, leaders)
	}

	cons := c.client([]int32{3}, append(secure, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	got := consume(t, cons, parts*perPart)
	if len(got) != parts*perPart {
		t.Fatalf("consumed %d records, want %d", len(got), parts*perPart)
	}
	for _, r := range got {
		if want := acked[r.Partition][r.Offset]; want != string(r.Value) {
			t.Fatalf("partition %d offset %d holds %q, acknowledged %q", r.Partition, r.Offset, r.Value, want)
		}
	}
	t.Logf("produced through brokers %v (leaders %v)", brokers, leaders)
}

// requestWrites counts the requests of one API key a client wrote to
// each broker without error.
type requestWrites struct {
	key int16
	mu  sync.Mutex
	to  map[int32]int
}

func newRequestWrites(key kmsg.Key) *requestWrites {
	return &requestWrites{key: int16(key), to: map[int32]int{}}
}

func (w *requestWrites) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != w.key || err != nil {
		return
	}
	w.mu.Lock()
	w.to[meta.NodeID]++
	w.mu.Unlock()
}

func (w *requestWrites) brokers() []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []int32
	for id := range w.to {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// TestClassicCommitFenceOverTheWire: two franz-go members of a classic
// group (cooperative-sticky). After the second joins, the first one's
// OffsetCommit in its old generation is refused (ILLEGAL_GENERATION, or
// REBALANCE_IN_PROGRESS) and the committed offset stays where the
// commit of the current generation left it; a commit in the current
// generation is taken. On one node, and on a 3-node cluster with every
// client bootstrapped at a node that is not the group's coordinator, so
// each commit crosses to the coordinator's listener.
func TestClassicCommitFenceOverTheWire(t *testing.T) {
	const group = "classic-fence"
	t.Run("node", func(t *testing.T) {
		f := serve(t, Config{})
		classicCommitFence(t, group, f.client, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		c := startCluster(t)
		coord := c.agreedCoordinator(group)
		seed := coord%3 + 1 // another node
		commits := newRequestWrites(kmsg.OffsetCommit)
		client := func(_ testing.TB, opts ...kgo.Opt) *kgo.Client {
			return c.client([]int32{seed}, append(opts, kgo.WithHooks(commits))...)
		}
		classicCommitFence(t, group, client, func() {
			// The commits went to the coordinator alone, not to the
			// bootstrap node.
			if got := commits.brokers(); !slices.Equal(got, []int32{coord}) {
				t.Fatalf("OffsetCommit written to brokers %v, want the coordinator %d alone (bootstrapped at %d)", got, coord, seed)
			}
			// The committed offset reads back at every listener's
			// coordinator lookup: a client bootstrapped at each node.
			for id := range c.servers {
				offs, err := kadm.NewClient(c.client([]int32{id})).FetchOffsets(ctxFor(t), group)
				if err != nil {
					t.Fatalf("FetchOffsets through %d: %v", id, err)
				}
				if o, ok := offs.Lookup(classicFenceTopic, 0); !ok || o.Err != nil || o.At != 7 {
					t.Fatalf("FetchOffsets through %d: %+v %v, want 7", id, o, ok)
				}
			}
			t.Logf("coordinator %d, clients bootstrapped at %d", coord, seed)
		})
	})
}

const classicFenceTopic = "classic-fenced"

// classicCommitFence is TestClassicCommitFenceOverTheWire with clients
// client makes; after (if not nil) runs at the end.
func classicCommitFence(t *testing.T, group string, client func(testing.TB, ...kgo.Opt) *kgo.Client, after func()) {
	ctx := ctxFor(t)
	const topic = classicFenceTopic
	adm := kadm.NewClient(client(t))
	if res, err := adm.CreateTopics(ctx, 4, -1, nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}
	member := func() *kgo.Client {
		return client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit())
	}
	// commit sends an OffsetCommit of partition 0 through cl (to the
	// coordinator) as member id in generation gen.
	commit := func(cl *kgo.Client, id string, gen int32, offset int64) int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = group, id, gen
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = 0, offset, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("OffsetCommit: %v", err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	committed := func() int64 {
		t.Helper()
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		o, ok := offs.Lookup(topic, 0)
		if !ok || o.Err != nil {
			t.Fatalf("the committed offset of partition 0: %v %v", ok, o.Err)
		}
		return o.At
	}
	// stable waits for the group to be stable with n members, each
	// client in the group's generation, and returns it.
	stable := func(n int, cls ...*kgo.Client) int32 {
		t.Helper()
		var gen int32
		waitUntil(t, fmt.Sprintf("a stable group of %d", n), func() bool {
			d, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				t.Fatalf("DescribeGroups: %v", err)
			}
			g := d[group]
			if g.Err != nil || g.State != "Stable" || len(g.Members) != n {
				return false
			}
			_, gen = cls[0].GroupMetadata()
			for _, cl := range cls[1:] {
				if _, g := cl.GroupMetadata(); g != gen {
					return false
				}
			}
			return gen > 0
		})
		return gen
	}

	a := member()
	g1 := stable(1, a)
	idA, _ := a.GroupMetadata()
	if code := commit(a, idA, g1, 5); code != 0 {
		t.Fatalf("the commit in generation %d: code %d", g1, code)
	}
	if got := committed(); got != 5 {
		t.Fatalf("committed offset %d, want 5", got)
	}

	b := member()
	g2 := stable(2, a, b)
	if g2 <= g1 {
		t.Fatalf("generation %d after the second member joined, was %d", g2, g1)
	}
	if id, _ := a.GroupMetadata(); id != idA {
		t.Fatalf("the first member's id changed from %s to %s", idA, id)
	}
	code := commit(a, idA, g1, 99)
	if code != kerr.IllegalGeneration.Code && code != kerr.RebalanceInProgress.Code {
		t.Fatalf("the commit in the stale generation %d (now %d): code %d, want ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS", g1, g2, code)
	}
	if got := committed(); got != 5 {
		t.Fatalf("committed offset %d after the stale commit, want 5", got)
	}
	if code := commit(a, idA, g2, 7); code != 0 {
		t.Fatalf("the commit in the current generation %d: code %d", g2, code)
	}
	if got := committed(); got != 7 {
		t.Fatalf("committed offset %d, want 7", got)
	}
	t.Logf("stale commit in generation %d (group at %d): code %d", g1, g2, code)
	if after != nil {
		after()
	}
}

// TestClusterDefaultReplicationFactor: with DefaultReplicationFactor 2
// on a 3-node cluster (the node's own default would be 3), a topic
// franz-go auto-creates by producing, and a CreateTopics asking for
// replication factor -1, get two replicas per partition: in every
// broker's Metadata, in CreateTopics' answer and in parkway's topic
// config.
func TestClusterDefaultReplicationFactor(t *testing.T) {
	const rf = 2
	c := startClusterWith(t, 3, func(cfg *Config) { cfg.DefaultReplicationFactor = rf })
	ctx := ctxFor(t)
	prod := c.client([]int32{1}, kgo.DefaultProduceTopic("auto-rf"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctx, kgo.StringRecord("auto")).FirstErr(); err != nil {
		t.Fatalf("produce to an auto-created topic: %v", err)
	}
	adm := kadm.NewClient(c.client([]int32{2}))
	res, err := adm.CreateTopics(ctx, -1, -1, nil, "default-rf")
	if err != nil || res["default-rf"].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res["default-rf"].Err)
	}
	if got := res["default-rf"].ReplicationFactor; got != rf {
		t.Errorf("CreateTopics answered replication factor %d, want %d", got, rf)
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"auto-rf", "default-rf"} {
		topic, err := c.nodes[1].Topic(ctx, stream, name)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.nodes[1].Admin().TopicInfo(ctx, topic); err != nil || info.Config.Replicas != rf {
			t.Errorf("%s: parkway's config has %d replicas (%v), want %d", name, info.Config.Replicas, err, rf)
		}
		for id, addr := range c.brokers {
			r := dialRaw(t, addr)
			var parts []kmsg.MetadataResponseTopicPartition
			waitUntil(t, fmt.Sprintf("broker %d to know %s", id, name), func() bool {
				req := kmsg.NewPtrMetadataRequest()
				req.Version = 12
				mt := kmsg.NewMetadataRequestTopic()
				mt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, mt)
				resp := r.request(req).(*kmsg.MetadataResponse)
				if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
					return false
				}
				parts = resp.Topics[0].Partitions
				return true
			})
			if len(parts) != 3 { // the cluster helper's DefaultPartitions
				t.Fatalf("broker %d: %s has %d partitions, want 3", id, name, len(parts))
			}
			for _, p := range parts {
				if len(p.Replicas) != rf {
					t.Errorf("broker %d: %s partition %d has replicas %v, want %d of them", id, name, p.Partition, p.Replicas, rf)
				}
			}
		}
	}
}

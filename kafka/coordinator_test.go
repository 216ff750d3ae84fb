package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// agreedCoordinator asks every live listener for group's coordinator
// until all name the same broker, one not in dead, and returns it.
func (c *cluster) agreedCoordinator(group string, dead ...int32) int32 {
	c.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		named := map[int32]int32{}
		for id := range c.servers {
			r := dialRaw(c.t, c.brokers[id])
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.Version, req.CoordinatorKeys = 4, []string{group}
			resp := r.request(req).(*kmsg.FindCoordinatorResponse)
			_ = r.nc.Close()
			co := resp.Coordinators[0]
			switch co.ErrorCode {
			case 0:
				named[id] = co.NodeID
			case kerr.CoordinatorNotAvailable.Code:
				named[id] = -1
			default:
				c.t.Fatalf("FindCoordinator at %d: error code %d", id, co.ErrorCode)
			}
		}
		agreed := int32(-1)
		for _, n := range named {
			if agreed == -1 {
				agreed = n
			} else if n != agreed {
				agreed = -2
			}
		}
		ok := agreed > 0
		for _, d := range dead {
			ok = ok && agreed != d
		}
		if ok {
			return agreed
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the listeners never agreed on a live coordinator of %s (dead %v): %v", group, dead, named)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deliveries are the records a group's members polled, by partition and
// offset, split at the coordinator's death.
type deliveries struct {
	mu     sync.Mutex
	killed bool
	before map[string]int // polls of each record before the kill
	after  map[string]int // and after it
}

func (d *deliveries) record(r *kgo.Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
	if d.killed {
		d.after[k]++
	} else {
		d.before[k]++
	}
}

func (d *deliveries) distinct() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.before)
	for k := range d.after {
		if d.before[k] == 0 {
			n++
		}
	}
	return n
}

// TestClusterCoordinatorMovesWhenItsNodeDies: a consumer group of two
// franz-go members consumes a replicated topic on a 3-node cluster and
// commits what it polled. Every listener names the same coordinator; its
// node is killed. The survivors agree on a new, live coordinator (the
// new leader of the group's coordinator partition), the members rejoin
// there, consume everything produced after the kill, and commit it
// there; no record committed before the kill is polled again. (With the
// coordinator a static hash of the group id over the configured brokers,
// the survivors named the dead node for ever and the group stopped.)
// Also: a listener that holds a group it does not coordinate lets it go,
// and the internal topic is neither listed nor reachable by name.
func TestClusterCoordinatorMovesWhenItsNodeDies(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t)
	all := []int32{1, 2, 3}
	adm := kadm.NewClient(c.client(all))
	const topicName, group, half = "moving", "moving-group", 150
	if res, err := adm.CreateTopics(ctx, 3, 3, nil, topicName); err != nil || res[topicName].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topicName].Err)
	}
	coord := c.agreedCoordinator(group)

	// A listener holding a group it does not coordinate (it did before
	// the partition's leadership moved) lets it go within a janitor tick:
	// ListGroups there stops naming it.
	other := coord%3 + 1
	stale := kmsg.NewPtrJoinGroupRequest()
	stale.Version, stale.Group, stale.MemberID, stale.ProtocolType = 9, group, "", "consumer"
	stale.SessionTimeoutMillis, stale.RebalanceTimeoutMillis = 60_000, 60_000
	stale.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	c.servers[other].groups.join(stale, "stale", "/127.0.0.1", time.Now())
	r := dialRaw(t, c.brokers[other])
	for listed := true; listed; {
		listed = false
		for _, g := range r.request(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse).Groups {
			listed = listed || g.Group == group
		}
		if listed && ctx.Err() != nil {
			t.Fatalf("listener %d still lists group %s, which %d coordinates", other, group, coord)
		}
		if listed {
			time.Sleep(20 * time.Millisecond)
		}
	}

	d := &deliveries{before: map[string]int{}, after: map[string]int{}}
	var stops []func()
	for i := range 2 {
		cl := c.client(all, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topicName),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(3*time.Second),
			kgo.FetchMaxWait(200*time.Millisecond), kgo.ClientID(fmt.Sprint("mover-", i)))
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for mctx.Err() == nil {
				fs := cl.PollFetches(mctx)
				recs := fs.Records()
				for _, r := range recs {
					d.record(r)
				}
				if len(recs) > 0 {
					// A commit refused (the coordinator dead or moving,
					// a rebalance) leaves the records to be polled
					// again: at least once.
					_ = cl.CommitRecords(mctx, recs...)
				}
			}
		}()
		stops = append(stops, func() { cancel(); <-done })
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()

	prod := c.client(all, kgo.DefaultProduceTopic(topicName), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(testTimeout))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.Produce(ctx, kgo.StringRecord(fmt.Sprint(i)), nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	stream, err := c.nodes[1].Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := c.nodes[1].Topic(ctx, stream, topicName)
	if err != nil {
		t.Fatal(err)
	}
	// committed sums the group's committed offsets as node at reads them.
	committed := func(at int32) (map[int32]int64, int64) {
		t.Helper()
		by, sum := map[int32]int64{}, int64(0)
		for p := range uint32(3) {
			off, found, err := c.nodes[at].Admin().ConsumerOffset(ctx, topic, p, group)
			if err != nil {
				t.Logf("ConsumerOffset %d at node %d: %v", p, at, err)
				continue
			}
			if found {
				by[int32(p)], sum = int64(off), sum+int64(off)
			}
		}
		return by, sum
	}
	waitCommitted := func(at int32, want int64) map[int32]int64 {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for {
			by, sum := committed(at)
			if sum == want {
				return by
			}
			if time.Now().After(deadline) {
				t.Fatalf("the group committed %v (sum %d), want a sum of %d", by, sum, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	produce(0, half)
	survivor := coord%3 + 1
	waitCommitted(survivor, half)

	// The coordinator's node dies; what the group committed stays.
	d.mu.Lock()
	d.killed = true
	d.mu.Unlock()
	start := time.Now()
	c.kill(coord)
	before := waitCommitted(survivor, half)
	next := c.agreedCoordinator(group, coord)
	t.Logf("coordinator %d killed; the survivors agree on %d after %v", coord, next, time.Since(start))

	produce(half, 2*half)
	deadline := time.Now().Add(testTimeout)
	for d.distinct() < 2*half {
		if time.Now().After(deadline) {
			t.Fatalf("the group polled %d distinct records, want %d", d.distinct(), 2*half)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The members commit at the new coordinator.
	waitCommitted(survivor, 2*half)
	t.Logf("group resumed at %d and committed everything %v after the kill", next, time.Since(start))

	d.mu.Lock()
	defer d.mu.Unlock()
	again := 0
	for k, n := range d.after {
		var p int32
		var off int64
		if _, err := fmt.Sscanf(k, "%d/%d", &p, &off); err != nil {
			t.Fatal(err)
		}
		if off < before[p] {
			again += n
			t.Errorf("record %s, committed before the kill (partition %d at %d), polled %d times after it", k, p, before[p], n)
		}
	}
	redelivered := 0
	for k, n := range d.after {
		if d.before[k] > 0 {
			redelivered += n
		}
	}
	t.Logf("after the kill %d polls of records committed before it, %d of records polled but not committed before it", again, redelivered-again)

	// The internal topic stays hidden from Kafka clients.
	topics, err := kadm.NewClient(c.client([]int32{survivor})).ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(coordinatorTopic) {
		t.Errorf("Metadata lists the internal topic %s", coordinatorTopic)
	}
	if _, err := c.nodes[survivor].Topic(ctx, stream, coordinatorTopic); err != nil {
		t.Errorf("the coordinators' topic in parkway: %v", err)
	}
	// Naming it is answered as for an unknown topic that cannot be
	// created: no Kafka request reaches it.
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Version, mreq.AllowAutoTopicCreation = 12, true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(coordinatorTopic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp := dialRaw(t, c.brokers[survivor]).request(mreq).(*kmsg.MetadataResponse)
	if got := mresp.Topics[0]; got.ErrorCode != kerr.InvalidTopicException.Code || len(got.Partitions) != 0 {
		t.Errorf("Metadata of %s: error code %d, %d partitions; want INVALID_TOPIC_EXCEPTION and none", coordinatorTopic, got.ErrorCode, len(got.Partitions))
	}
}

// TestCoordinatorTermsAndRelease: a group is held under the term in
// which its coordinator partition's leader was first confirmed; a claim
// in the same term keeps it, a claim in another (this listener led, lost
// and leads again) drops it — its members are unknown and the next join
// starts a new group — and a release (the group is coordinated
// elsewhere now) answers a member waiting for its join NOT_COORDINATOR.
func TestCoordinatorTermsAndRelease(t *testing.T) {
	c := newCoordinator()
	now := time.Unix(1000, 0)
	join := func(member string) (*kmsg.JoinGroupResponse, <-chan *kmsg.JoinGroupResponse) {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Version, r.Group, r.MemberID, r.ProtocolType = 9, "g", member, "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10_000, 5_000
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte(member)}}
		return c.join(r, "client", "/127.0.0.1", now)
	}
	member := func() string {
		t.Helper()
		resp, _ := join("")
		_, wait := join(resp.MemberID)
		if ja := <-wait; ja.ErrorCode != 0 || ja.Generation != 1 {
			t.Fatalf("join: %+v", ja)
		}
		return resp.MemberID
	}
	a := member()
	c.claim("g", 5)
	c.claim("g", 5)
	hb := func(id string) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", id, 1
		return c.heartbeat(r, now)
	}
	if code := hb(a); code != 0 {
		t.Fatalf("a heartbeat in the term the group was claimed in: code %d", code)
	}
	c.claim("g", 7)
	if code := hb(a); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat from the previous term's member: code %d, want UNKNOWN_MEMBER_ID", code)
	}
	if _, ok := c.groups["g"]; ok {
		t.Fatal("the group of an earlier term is still held")
	}

	b := member()
	// A second member's join waits for b to rejoin.
	resp, _ := join("")
	_, wait := join(resp.MemberID)
	c.release("g")
	select {
	case got := <-wait:
		if got.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("the waiting join answered code %d, want NOT_COORDINATOR", got.ErrorCode)
		}
	default:
		t.Fatal("the waiting join is not answered by the release")
	}
	if code := hb(b); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat after the release: code %d, want UNKNOWN_MEMBER_ID", code)
	}
}

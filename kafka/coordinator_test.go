package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	c.servers[other].groups.join(stale, groupPartition(group, coordinatorPartitions), "stale", "/127.0.0.1", time.Now())
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
	// The members are not seeded with the node about to die. franz-go
	// finds a group's coordinator with a FindCoordinator sent once to
	// any broker it knows, seeds included, and takes a refused dial there
	// for final: a heartbeat whose coordinator died looks it up once more
	// on another pick, and if that one is dead too (the dead broker still
	// in the member's last metadata, then its seed) the heartbeat fails
	// and the member rejoins, whatever the listeners answer (seen in the
	// client's log: "unable to dial ... connection refused", then "group
	// manage loop errored"). Metadata stops naming a dead broker
	// (TestMetadataListsLiveBrokers), which the members learn at their
	// next metadata refresh; a seed stays a seed. The session timeout
	// leaves the move room under the race detector on a loaded machine
	// (the survivors agreed on the new coordinator after up to 2.7 s
	// there): franz-go's heartbeat gives up on a coordinator after the
	// session timeout, and a Kafka member keeps its generation across a
	// coordinator move only within it.
	survivors := slices.DeleteFunc(slices.Clone(all), func(id int32) bool { return id == coord })
	// Each member logs at debug level into a buffer printed only when the
	// test fails: why a member rejoined (which request, which error, a
	// session timeout) is in the client's log and nowhere else.
	logs := newFailureLog(t)
	for i := range 2 {
		cl := c.client(survivors, kgo.WithLogger(logs.logger(fmt.Sprint("mover-", i))),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(topicName),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(10*time.Second),
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
	if _, err := c.nodes[1].Topic(ctx, stream, topicName); err != nil {
		t.Fatal(err)
	}
	// committed sums the group's committed offsets as its coordinator
	// answers them to a new client bootstrapped from node at (one that
	// kept the dead coordinator would keep asking it).
	committed := func(at int32) (map[int32]int64, int64) {
		t.Helper()
		by, sum := map[int32]int64{}, int64(0)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers[at]))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		res, err := kadm.NewClient(cl).FetchOffsets(fctx, group)
		if err != nil {
			return by, 0 // the coordinator dead or moving: asked again
		}
		res.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topicName && o.Err == nil && o.At >= 0 {
				by[o.Partition], sum = o.At, sum+o.At
			}
		})
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

	// The group's generation and members at its coordinator (-1: not
	// held there, or not settled: stable with both members and every
	// partition assigned). A stable generation may still owe a
	// rebalance: under cooperative-sticky the first one after a member
	// joins only takes partitions away (a member gives up what moves),
	// and the member that gave them up rejoins at once so the next one
	// hands them over. That rejoin is no effect of a coordinator move,
	// so the kill waits for it.
	generation := func(at int32) (int32, string) {
		gs := c.servers[at].groups
		gs.mu.Lock()
		defer gs.mu.Unlock()
		g := gs.groups[group]
		if g == nil || g.state != groupStable || len(g.members) != 2 {
			return -1, ""
		}
		assigned := map[int32]bool{}
		for _, m := range g.members {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.assignment); err != nil {
				return -1, ""
			}
			for _, at := range a.Topics {
				for _, p := range at.Partitions {
					if at.Topic == topicName {
						assigned[p] = true
					}
				}
			}
		}
		if len(assigned) != 3 {
			return -1, ""
		}
		return g.generation, fmt.Sprint(slices.Sorted(maps.Keys(g.members)))
	}
	gen, members := generation(coord)
	for deadline := time.Now().Add(testTimeout); gen < 1; gen, members = generation(coord) {
		if time.Now().After(deadline) {
			t.Fatalf("the group never settled with both members at its coordinator %d", coord)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// One more record for each partition, polled and committed in the
	// settled generation: each member's session is under way — it
	// fetched its offsets and consumes — before the kill. A session
	// starting meets the dead coordinator with an OffsetFetch, which
	// franz-go fails (and rejoins) when its one FindCoordinator picks the
	// dead broker, still named by the member's metadata: the client's
	// doing, not the listeners'.
	const settled = half + 3
	produce(half, settled)
	waitCommitted(survivor, settled)
	if now, ids := generation(coord); now != gen || ids != members {
		t.Fatalf("the group moved from generation %d (%s) to %d (%s) after it settled", gen, members, now, ids)
	}

	// The coordinator's node dies; what the group committed stays.
	d.mu.Lock()
	d.killed = true
	d.mu.Unlock()
	start := time.Now()
	c.kill(coord)
	before := waitCommitted(survivor, settled)
	next := c.agreedCoordinator(group, coord)
	t.Logf("coordinator %d killed; the survivors agree on %d after %v", coord, next, time.Since(start))

	produce(settled, 2*half)
	deadline := time.Now().Add(testTimeout)
	for d.distinct() < 2*half {
		if time.Now().After(deadline) {
			t.Fatalf("the group polled %d distinct records, want %d", d.distinct(), 2*half)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The members commit at the new coordinator, which loaded the group
	// from the group log: they kept their member ids, and their
	// generation (no member rejoined: a join would have started another).
	// One rejoin is the client's own: franz-go's heartbeat looks the
	// coordinator up again with one FindCoordinator to any broker its
	// metadata names, and a member whose fetches never touched the dead
	// broker has not refreshed its metadata and may pick it; the refused
	// dial ends its session and it rejoins, with its member id. The
	// client log says so ("group manage loop errored ... unable to
	// dial"), and then only the generation may have moved on; a rejoin
	// any listener's answer caused fails. (TestCoordinatorLoadsTheGroupLog
	// pins, with raw requests, that the generation itself is served on.)
	waitCommitted(survivor, 2*half)
	if got, now := generation(next); got != gen || now != members {
		if now == members && got > gen && logs.sessionEndedOnRefusedDial() {
			t.Logf("a member's client ended its session on a refused dial to the dead broker and rejoined: generation %d -> %d, members %s kept", gen, got, members)
		} else {
			t.Errorf("the group is at generation %d with members %s at the new coordinator %d, was %d with %s at %d: its members rejoined", got, now, next, gen, members, coord)
		}
	}
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

// TestCoordinatorLoadsTheGroupLog: a group's state travels through the
// group log. The leader's SyncGroup yields the group record (and the
// members are answered only once it is written: synced); a coordinator
// that installs that record and a commit — another node after a move, or
// this one after a restart — serves the members on in their generation
// (a heartbeat is accepted, no rejoin) and answers the committed offset.
// A commit answered after its partition was loaded again in another term
// is not applied over the load (the load replayed it), and an unload
// answers a member waiting for its join NOT_COORDINATOR and forgets the
// members.
func TestCoordinatorLoadsTheGroupLog(t *testing.T) {
	const part = 3
	c := newCoordinator(DefaultGroupHeartbeatInterval, DefaultGroupSessionTimeout)
	c.install(part, 5, nil, time.Unix(1000, 0))
	now := time.Unix(1000, 0)
	join := func(c *coordinator, member string) (*kmsg.JoinGroupResponse, <-chan *kmsg.JoinGroupResponse) {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Version, r.Group, r.MemberID, r.ProtocolType = 9, "g", member, "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10_000, 5_000
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte("meta-" + member)}}
		return c.join(r, part, "client", "/127.0.0.1", now)
	}
	resp, _ := join(c, "")
	a := resp.MemberID
	_, wait := join(c, a)
	ja := <-wait
	if ja.ErrorCode != 0 || ja.Generation != 1 || ja.LeaderID != a {
		t.Fatalf("join: %+v", ja)
	}
	sr := kmsg.NewPtrSyncGroupRequest()
	sr.Group, sr.MemberID, sr.Generation = "g", a, 1
	sr.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: a, MemberAssignment: []byte("a's share")}}
	_, answer, persist := c.sync(sr, now)
	if persist == nil || answer == nil {
		t.Fatal("the leader's sync asks for no group record to be written")
	}
	select {
	case got := <-answer:
		t.Fatalf("the leader was answered %+v before its group record was written", got)
	default:
	}
	c.synced("g", persist.group.generation, 0)
	if got := <-answer; got.code != 0 || string(got.assignment) != "a's share" {
		t.Fatalf("sync answer %+v", got)
	}

	// The records as the log holds them.
	encode := func(r *logRecord) *logRecord {
		t.Helper()
		b, err := encodeLogRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decodeLogRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	commit := &logRecord{kind: logCommit, commits: []logOffset{{tp: topicPart{"t", 0}, revision: 9, offset: 42}}}
	recs := []loadedRecord{{group: "g", at: 1, rec: encode(persist)}, {group: "g", at: 2, rec: encode(commit)}}

	moved := newCoordinator(DefaultGroupHeartbeatInterval, DefaultGroupSessionTimeout)
	moved.install(part, 7, recs, now.Add(time.Second))
	hb := func(c *coordinator, id string, gen int32) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", id, gen
		return c.heartbeat(r, now.Add(2*time.Second))
	}
	if code := hb(moved, a, 1); code != 0 {
		t.Fatalf("a heartbeat of generation 1 at the coordinator that loaded the log: code %d", code)
	}
	if code := moved.commitCheck("g", a, 1); code != 0 {
		t.Fatalf("a commit of generation 1 there: code %d", code)
	}
	if off, ok := moved.committedOffset("g", topicPart{"t", 0}, 9); !ok || off != 42 {
		t.Fatalf("committed offset %d %v, want 42", off, ok)
	}
	if _, ok := moved.committedOffset("g", topicPart{"t", 0}, 10); ok {
		t.Fatal("an offset committed for one incarnation of a topic answers for another")
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "g", a, 1
	if got, _, _ := moved.sync(sync, now); got.code != 0 || string(got.assignment) != "a's share" {
		t.Fatalf("the loaded group's assignment: %+v", got)
	}

	// A commit answered in term 5 after the partition was loaded in 7.
	moved.applyRecord("g", part, 5, 3, &logRecord{kind: logCommit, commits: []logOffset{{tp: topicPart{"t", 0}, revision: 9, offset: 1}}})
	if off, _ := moved.committedOffset("g", topicPart{"t", 0}, 9); off != 42 {
		t.Fatalf("a commit of an older term moved the offset to %d", off)
	}

	// A second member waits for a to rejoin; the unload answers it.
	resp, _ = join(moved, "")
	_, wait = join(moved, resp.MemberID)
	moved.unload(part)
	select {
	case got := <-wait:
		if got.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("the waiting join answered code %d, want NOT_COORDINATOR", got.ErrorCode)
		}
	default:
		t.Fatal("the waiting join is not answered by the unload")
	}
	if code := hb(moved, a, 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat after the unload: code %d, want UNKNOWN_MEMBER_ID", code)
	}
	if _, ok := moved.committedOffset("g", topicPart{"t", 0}, 9); ok {
		t.Fatal("the unloaded partition's offsets are still answered")
	}
}

// failureLog collects the debug logs of franz-go clients and hands them
// to t.Log only if the test failed: a passing run stays quiet, a failing
// one shows what each client did and was answered.
type failureLog struct {
	mu    sync.Mutex
	start time.Time
	b     strings.Builder
}

func newFailureLog(t *testing.T) *failureLog {
	l := &failureLog{start: time.Now()}
	// Registered before the clients' Close, so it runs after them and
	// holds their last words.
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Log("client logs:\n" + l.b.String())
		}
	})
	return l
}

func (l *failureLog) logger(name string) kgo.Logger { return &failureLogger{l: l, name: name} }

// sessionEndedOnRefusedDial reports whether a client's group session
// ended because it could not dial a broker (the dead one), not because of
// an answer it was given.
func (l *failureLog) sessionEndedOnRefusedDial() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, "group manage loop errored") && strings.Contains(line, "unable to dial") && strings.Contains(line, "connection refused") {
			return true
		}
	}
	return false
}

type failureLogger struct {
	l    *failureLog
	name string
}

func (f *failureLogger) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (f *failureLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	fmt.Fprintf(&f.l.b, "%9.3fs %s %s %s", time.Since(f.l.start).Seconds(), f.name, level, msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(&f.l.b, " %v=%v", keyvals[i], keyvals[i+1])
	}
	f.l.b.WriteByte('\n')
}

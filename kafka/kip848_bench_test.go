package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// The cost of ConsumerGroupHeartbeat through the listener (a raw
// connection sending kmsg requests, on an in-memory node), and the group
// log bytes its changes write:
//
//   - Steady: a member of a stable group of 10 members subscribed to 4
//     topics of 8 partitions heartbeats, changing nothing (a keepalive,
//     as clients send between rebalances);
//   - JoinWave/N (10, 100 and 1,000 members): N members join a new group
//     of the same subscription one after another, then heartbeat with
//     what they own until every member holds its target (a rebalance).
//     cpu-ns/hb is the process's CPU (listener, node and client) per
//     heartbeat. log-B is the payload bytes of the group's records the
//     log holds after the wave (a compaction during a long wave rewrites
//     the group and truncates what came before), written-B what the
//     coordinator wrote to its topic during the wave as the node counts
//     produced bytes (keys and framing, load markers and compaction
//     snapshots included).
//
// Compare ns/hb, allocs/op and log-B/hb:
//
//	go test -run XXX -bench KIP848Heartbeat -benchtime 2000x ./kafka      (Steady)
//	go test -run XXX -bench 'KIP848Heartbeat$/JoinWave/100$' -benchtime 5x ./kafka
func BenchmarkKIP848Heartbeat(b *testing.B) {
	const topics, parts = 4, 8
	f := serve(b, Config{})
	ctx := ctxFor(b)
	s, err := f.node.Stream(ctx, "kafka")
	if err != nil {
		s, err = f.node.Admin().CreateStream(ctx, "kafka")
	}
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for i := range topics {
		name := fmt.Sprintf("hb%d", i)
		if _, err := f.node.Admin().CreateTopic(ctx, s, name, parts); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	heartbeatBenchmarks(b, ctx, dialRaw(b, f.addr), f.srv, names, true)
}

// BenchmarkClusterKIP848Heartbeat: BenchmarkKIP848Heartbeat at the
// coordinator of a 3-node cluster on the in-memory bus, where a metadata
// read is a read index through the metadata group's leader.
//
//	go test -run XXX -bench ClusterKIP848Heartbeat/Steady -benchtime 500x ./kafka
func BenchmarkClusterKIP848Heartbeat(b *testing.B) {
	const topics, parts = 4, 8
	c := startCluster(b)
	ctx := ctxFor(b)
	r := dialRaw(b, c.brokers[1])
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 60_000
	var names []string
	for i := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("hb%d", i), parts, 3
		ct.Topics = append(ct.Topics, rt)
		names = append(names, rt.Topic)
	}
	for _, t := range r.request(ct).(*kmsg.CreateTopicsResponse).Topics {
		if t.ErrorCode != 0 {
			b.Fatalf("CreateTopics %s: code %d", t.Topic, t.ErrorCode)
		}
	}
	// The steady group's heartbeats go to its coordinator (the join waves'
	// groups, coordinated anywhere, are not run here).
	var coord int32 = -1
	for deadline := time.Now().Add(time.Minute); coord < 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no coordinator for group steady")
		}
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version, fc.CoordinatorKeys = 4, []string{"steady"}
		if resp := r.request(fc).(*kmsg.FindCoordinatorResponse); len(resp.Coordinators) == 1 && resp.Coordinators[0].ErrorCode == 0 {
			coord = resp.Coordinators[0].NodeID
		}
	}
	heartbeatBenchmarks(b, ctx, dialRaw(b, c.brokers[coord]), c.servers[coord], names, false)
}

// heartbeatBenchmarks runs the Steady and (with waves) JoinWave
// benchmarks against srv through r, the groups subscribing to names.
func heartbeatBenchmarks(b *testing.B, ctx context.Context, r *raw, srv *Server, names []string, joinWaves bool) {
	b.Run("Steady", func(b *testing.B) {
		w := newWave(b, r, "steady", names)
		w.join(10)
		w.settle()
		before := groupLogBytes(b, ctx, srv, "steady")
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			m := w.members[i%len(w.members)]
			if resp := w.keepalive(m); resp.MemberEpoch != m.epoch {
				b.Fatalf("a steady heartbeat moved %s from epoch %d to %d", m.id, m.epoch, resp.MemberEpoch)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/hb")
		b.ReportMetric(float64(groupLogBytes(b, ctx, srv, "steady")-before)/float64(b.N), "log-B/hb")
	})
	if !joinWaves {
		return
	}
	waves := 0 // each wave's group is new (the framework runs a benchmark more than once)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("JoinWave/%d", n), func(b *testing.B) {
			hbs, logged := 0, 0
			written := coordWrittenBytes(b, srv)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			for range b.N {
				waves++
				group := fmt.Sprintf("wave-%d-%d", n, waves)
				w := newWave(b, r, group, names)
				w.join(n)
				w.settle()
				hbs += w.sent
				b.StopTimer()
				logged += groupLogBytes(b, ctx, srv, group)
				b.StartTimer()
			}
			b.StopTimer()
			cpu = processCPU(b) - cpu // includes the read-backs of the log, which the timer leaves out
			b.ReportMetric(float64(hbs)/float64(b.N), "hb/op")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(hbs), "cpu-ns/hb")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(hbs), "ns/hb")
			b.ReportMetric(float64(logged)/float64(hbs), "log-B/hb")
			b.ReportMetric(float64(logged)/float64(b.N), "log-B/op")
			b.ReportMetric((coordWrittenBytes(b, srv)-written)/float64(b.N), "written-B/op")
		})
	}
}

// wave drives the members of one consumer group over a raw connection.
type wave struct {
	b       testing.TB
	r       *raw
	group   string
	names   []string
	members []*waveMember
	sent    int
}

type waveMember struct {
	id    string
	epoch int32
	owned []kmsg.ConsumerGroupHeartbeatRequestTopic
}

func newWave(b testing.TB, r *raw, group string, names []string) *wave {
	return &wave{b: b, r: r, group: group, names: names}
}

func (w *wave) send(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	w.b.Helper()
	w.sent++
	resp := w.r.request(req).(*kmsg.ConsumerGroupHeartbeatResponse)
	for tries := 0; tries < 100 && (resp.ErrorCode == kerr.CoordinatorLoadInProgress.Code || resp.ErrorCode == kerr.CoordinatorNotAvailable.Code); tries++ {
		time.Sleep(20 * time.Millisecond) // the coordinator is loading (a cluster's first heartbeat)
		resp = w.r.request(req).(*kmsg.ConsumerGroupHeartbeatResponse)
	}
	if resp.ErrorCode != 0 {
		w.b.Fatalf("ConsumerGroupHeartbeat of %s: code %d", req.MemberID, resp.ErrorCode)
	}
	return resp
}

// apply takes an answer's epoch and, when it carries one, assignment
// (the member owns what it is assigned at once).
func (w *wave) apply(m *waveMember, resp *kmsg.ConsumerGroupHeartbeatResponse) bool {
	changed := resp.MemberEpoch != m.epoch
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		var owned []kmsg.ConsumerGroupHeartbeatRequestTopic
		for _, t := range resp.Assignment.Topics {
			owned = append(owned, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: t.TopicID, Partitions: t.Partitions})
		}
		if fmt.Sprint(owned) != fmt.Sprint(m.owned) {
			changed = true
		}
		m.owned = owned
	}
	return changed
}

func (w *wave) join(n int) {
	for i := range n {
		m := &waveMember{id: fmt.Sprintf("m%03d", i)}
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, w.group, m.id, 0
		req.RebalanceTimeoutMillis, req.SubscribedTopicNames = 30_000, w.names
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		w.apply(m, w.send(req))
		w.members = append(w.members, m)
	}
}

// full is a heartbeat reporting what m owns.
func (w *wave) full(m *waveMember) *kmsg.ConsumerGroupHeartbeatResponse {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, w.group, m.id, m.epoch
	req.Topics = m.owned
	if req.Topics == nil {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	return w.send(req)
}

// keepalive is a heartbeat that reports nothing new.
func (w *wave) keepalive(m *waveMember) *kmsg.ConsumerGroupHeartbeatResponse {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, w.group, m.id, m.epoch
	return w.send(req)
}

// settle heartbeats every member with what it owns until a round
// changes nothing.
func (w *wave) settle() {
	for round := 0; ; round++ {
		if round > 50 {
			w.b.Fatalf("group %s did not settle in 50 rounds", w.group)
		}
		changed := false
		for _, m := range w.members {
			if w.apply(m, w.full(m)) {
				changed = true
			}
		}
		if !changed {
			return
		}
	}
}

// groupLogBytes sums the payloads of group's records in its coordinator
// partition's log.
func groupLogBytes(t testing.TB, ctx context.Context, srv *Server, group string) int {
	total := 0
	for _, m := range groupLogMessages(t, ctx, srv, group) {
		total += len(m.Payload)
	}
	return total
}

// coordWrittenBytes is what srv's node counts as produced to the group
// coordinators' topic (parkway_produced_bytes_total).
func coordWrittenBytes(t testing.TB, srv *Server) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(srv.node.Metrics()); err != nil {
		t.Fatalf("registering the node's metrics: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "parkway_produced_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == coordinatorTopic {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// groupLogMessages are group's records in its coordinator partition's
// log.
func groupLogMessages(t testing.TB, ctx context.Context, srv *Server, group string) []parkway.Message {
	t.Helper()
	ct, n, err := srv.coordTopic(ctx)
	if err != nil {
		t.Fatalf("coordTopic: %v", err)
	}
	var out []parkway.Message
	for from := parkway.AtFirst(); ; {
		b, err := srv.node.Poll(ctx, ct, groupPartition(group, n), from, 512)
		if err != nil {
			t.Fatalf("Poll the group log: %v", err)
		}
		if len(b.Messages) == 0 {
			return out
		}
		for _, m := range b.Messages {
			if string(m.Key) == group {
				out = append(out, m)
			}
		}
		from = parkway.AtOffset(b.Next)
	}
}

// BenchmarkKIP848ConsumerTopics: what resolving a group's 4 subscribed
// topics costs each heartbeat (the topic cache, then a metadata read per
// topic), on an in-memory node.
//
//	go test -run XXX -bench KIP848ConsumerTopics ./kafka
func BenchmarkKIP848ConsumerTopics(b *testing.B) {
	f := serve(b, Config{})
	ctx := ctxFor(b)
	s, err := f.node.Admin().CreateStream(ctx, "kafka")
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"hb0", "hb1", "hb2", "hb3"}
	for _, name := range names {
		if _, err := f.node.Admin().CreateTopic(ctx, s, name, 8); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if meta, err := f.srv.consumerTopics(ctx, names); err != nil || len(meta) != len(names) {
			b.Fatalf("%d topics resolved (%v)", len(meta), err)
		}
	}
}

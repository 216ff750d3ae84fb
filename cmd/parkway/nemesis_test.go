//go:build unix

package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The nemesis test is a black-box fault test of real processes: three
// (or five) `parkway serve` members over mutual TLS on loopback, each with
// a Kafka listener; franz-go idempotent producers (acks=all) produce keyed
// unique values and a consumer group of two franz-go consumers reads and
// commits them, while a seeded nemesis kills (-9, then restarts on the
// same directory), pauses (SIGSTOP … SIGCONT) and composes the two (pause
// one member, kill another; pause a minority, kill one more, restart it
// so that a new majority forms while the minority stays paused, then
// resume the minority), and partitions the network: every member reaches
// each other member through a fault proxy of that link (faultProxy), so
// the nemesis isolates a member, cuts one link one way, and isolates one
// member while killing another. At the end every fault is healed, every
// partition is read back from offset 0 and the group's committed offsets
// are read, and the history is checked (checkHistory).
//
// PARKWAY_NEMESIS_DURATION (default 40s) is how long the workload and the
// nemesis run; PARKWAY_NEMESIS_SEED (default 1) seeds the nemesis'
// schedule; PARKWAY_NEMESIS_NODES (3 or 5, default 3) is the cluster
// size. The processes' timing is the machine's, so a seed fixes the
// schedule of faults, not the interleaving.

const nemesisPartitions = 4

// member is one cluster member's fixed addresses and arguments; its
// process comes and goes.
type member struct {
	id     int
	args   []string
	env    []string
	proc   *server
	paused bool
}

type nemesis struct {
	t       *testing.T
	members []*member
	links   map[[2]int]*faultProxy // {from, to}: what from dials to reach to
	log     []string               // the faults injected, in order
}

// cut blocks the link from → to (one way).
func (n *nemesis) cut(from, to int) { n.links[[2]int{from, to}].block() }

// isolate cuts every link to and from member id.
func (n *nemesis) isolate(id int) {
	for k, l := range n.links {
		if k[0] == id || k[1] == id {
			l.block()
		}
	}
}

// heal restores every link.
func (n *nemesis) heal() {
	for _, l := range n.links {
		l.unblock()
	}
}

func (n *nemesis) note(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	n.log = append(n.log, line)
	n.t.Log("nemesis: " + line)
}

func (n *nemesis) start(m *member) { m.proc = startServe(n.t, m.env, m.args...) }

func (n *nemesis) kill(m *member) {
	if err := m.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		n.t.Fatalf("kill %d: %v", m.id, err)
	}
	<-m.proc.done
	m.proc.cmd.Wait()
	m.paused = false
}

func (n *nemesis) pause(m *member) {
	if err := m.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		n.t.Fatalf("stop %d: %v", m.id, err)
	}
	m.paused = true
}

func (n *nemesis) resume(m *member) {
	if err := m.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		n.t.Fatalf("cont %d: %v", m.id, err)
	}
	m.paused = false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run injects faults from the seeded schedule until ctx ends; every
// fault is healed before the next begins.
func (n *nemesis) run(ctx context.Context, rng *rand.Rand) (f faults) {
	between := func() time.Duration { return time.Duration(1000+rng.Intn(2000)) * time.Millisecond }
	for ctx.Err() == nil {
		sleep(ctx, between())
		a := n.members[rng.Intn(len(n.members))]
		b := n.members[(a.id+rng.Intn(len(n.members)-1))%len(n.members)] // another member
		down := time.Duration(500+rng.Intn(3000)) * time.Millisecond
		switch rng.Intn(7) {
		case 0:
			n.note("kill -9 member %d, restart after %v", a.id, down)
			n.kill(a)
			sleep(context.Background(), down)
			n.start(a)
			f.kills++
		case 1:
			n.note("SIGSTOP member %d for %v", a.id, down)
			n.pause(a)
			sleep(context.Background(), down)
			n.resume(a)
			f.pauses++
		case 2:
			n.note("SIGSTOP member %d, kill -9 member %d, heal after %v", a.id, b.id, down)
			n.pause(a)
			n.kill(b)
			sleep(context.Background(), down)
			n.start(b)
			n.resume(a)
			f.pauseKills++
		case 3:
			n.note("isolate member %d for %v", a.id, down)
			n.isolate(a.id)
			sleep(context.Background(), down)
			n.heal()
			f.partitions++
		case 4:
			n.note("cut the link %d -> %d (one way) for %v", a.id, b.id, down)
			n.cut(a.id, b.id)
			sleep(context.Background(), down)
			n.heal()
			f.oneWay++
		case 5:
			n.note("isolate member %d, kill -9 member %d, heal after %v", a.id, b.id, down)
			n.isolate(a.id)
			n.kill(b)
			sleep(context.Background(), down)
			n.start(b)
			n.heal()
			f.partKills++
		case 6:
			// Pause a minority, kill one more (no majority runs), restart
			// it: the restarted member and those never paused are a new
			// majority, which works for a while before the minority,
			// with its stale view, resumes.
			perm := rng.Perm(len(n.members))
			minority := perm[:(len(n.members)-1)/2]
			victim := n.members[perm[len(minority)]]
			var ids []int
			for _, i := range minority {
				ids = append(ids, n.members[i].id)
			}
			majority := time.Duration(1000+rng.Intn(3000)) * time.Millisecond
			n.note("SIGSTOP members %v, kill -9 member %d, restart it after %v, resume the paused %v later", ids, victim.id, down, majority)
			for _, i := range minority {
				n.pause(n.members[i])
			}
			n.kill(victim)
			sleep(context.Background(), down)
			n.start(victim)
			sleep(context.Background(), majority)
			for _, i := range minority {
				n.resume(n.members[i])
			}
			f.newMajority++
		}
	}
	return
}

// faults counts the faults injected, by kind.
type faults struct {
	kills, pauses, pauseKills, partitions, oneWay, partKills, newMajority int
}

func (f faults) String() string {
	return fmt.Sprintf("%d kill -9, %d pause, %d pause+kill, %d isolation, %d one-way cut, %d isolation+kill, %d pause minority+kill+new majority",
		f.kills, f.pauses, f.pauseKills, f.partitions, f.oneWay, f.partKills, f.newMajority)
}

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	line := string(p)
	if !strings.Contains(line, "producer ID") && !strings.Contains(line, "sequence") &&
		!strings.Contains(line, "epoch") && !strings.Contains(line, "[ERROR]") {
		return len(p), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// tail returns the last n lines.
func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines[max(0, len(b.lines)-n):], "\n")
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func TestNemesis(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults on real processes; skipped with -short")
	}
	duration := envDuration(t, "PARKWAY_NEMESIS_DURATION", 40*time.Second)
	seed := int64(1)
	if v := os.Getenv("PARKWAY_NEMESIS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("PARKWAY_NEMESIS_SEED=%q: %v", v, err)
		}
	}
	nodes := 3
	if v := os.Getenv("PARKWAY_NEMESIS_NODES"); v != "" {
		var err error
		if nodes, err = strconv.Atoi(v); err != nil || (nodes != 3 && nodes != 5) {
			t.Fatalf("PARKWAY_NEMESIS_NODES=%q: 3 or 5", v)
		}
	}
	t.Logf("seed %d, duration %v, %d nodes", seed, duration, nodes)

	pki := t.TempDir()
	ids := make([]int, nodes)
	for i := range ids {
		ids[i] = i + 1
	}
	writePKI(t, pki, "nemesis", ids)
	addrs := freeAddrs(t, 2*nodes)
	peerAddrs, kafkaAddrs := addrs[:nodes], addrs[nodes:]
	var brokerList []string
	for i, a := range kafkaAddrs {
		brokerList = append(brokerList, fmt.Sprintf("%d=%s", i+1, a))
	}
	brokers := strings.Join(brokerList, ",")
	n := &nemesis{t: t, links: map[[2]int]*faultProxy{}}
	for i := range nodes {
		id := i + 1
		// A member reaches each other member through the proxy of that
		// link.
		peers := []string{fmt.Sprintf("%d=%s", id, peerAddrs[i])}
		for j := range nodes {
			if j != i {
				l := newFaultProxy(t, peerAddrs[j])
				n.links[[2]int{id, j + 1}] = l
				peers = append(peers, fmt.Sprintf("%d=%s", j+1, l.addr()))
			}
		}
		m := &member{id: id,
			env: []string{"PARKWAY_PEERS=" + strings.Join(peers, ","), "PARKWAY_CLUSTER_ID=nemesis",
				"PARKWAY_TLS_CA=" + filepath.Join(pki, "ca.pem"),
				"PARKWAY_TLS_CERT=" + filepath.Join(pki, fmt.Sprintf("n%d.pem", id)),
				"PARKWAY_TLS_KEY=" + filepath.Join(pki, fmt.Sprintf("n%d.key", id)),
				"PARKWAY_KAFKA_BROKERS=" + brokers},
			args: []string{"--data-dir", t.TempDir(), "--node-id", fmt.Sprint(id), "--listen", peerAddrs[i],
				"--shards", "1", "--kafka", kafkaAddrs[i]}}
		n.members = append(n.members, m)
		n.start(m)
	}
	for _, m := range n.members {
		m.proc.waitReady()
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration+3*time.Minute)
	defer cancel()
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kafkaAddrs...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	const topic, group = "nemesis", "nemesis-group"
	adm := kadm.NewClient(client())
	// Three replicas of each partition: with five members some listeners
	// hold no replica of a partition and name its leader through their
	// node, which asks a replica (before it did, their Metadata answered
	// LEADER_NOT_AVAILABLE for minutes after a heal).
	if res, err := adm.CreateTopics(ctx, nemesisPartitions, int16(min(nodes, 3)), nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}

	// The workload: producers of keyed unique values, and a consumer
	// group reading and committing them, until the nemesis' time is up.
	h := &history{}
	workCtx, stopWork := context.WithTimeout(ctx, duration)
	defer stopWork()
	const producers = 3
	var wg sync.WaitGroup
	// The producers' notes on producer ids, epochs and sequences
	// (franz-go logs those at info), and their errors, go with a
	// failure's report.
	clientLog := &lockedBuffer{}
	for w := range producers {
		prod := client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RecordDeliveryTimeout(15*time.Second), kgo.MaxBufferedRecords(64),
			kgo.WithLogger(kgo.BasicLogger(clientLog, kgo.LogLevelInfo, func() string { return fmt.Sprintf("producer %d: ", w) })))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; workCtx.Err() == nil; i++ {
				v := fmt.Sprintf("p%d-%d", w, i)
				invoked := h.now()
				// ctx, not workCtx: a record in flight when the
				// workload ends still gets its outcome.
				prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint("k", i%97)), Value: []byte(v)}, func(r *kgo.Record, err error) {
					h.mu.Lock()
					h.produces = append(h.produces, produceOp{value: v, partition: r.Partition, offset: r.Offset, err: err,
						invoked: invoked, done: h.stamp()})
					h.mu.Unlock()
				})
			}
			if err := prod.Flush(ctx); err != nil {
				t.Errorf("producer %d: Flush: %v", w, err)
			}
		}()
	}
	const consumers = 2
	for c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consume(workCtx, t, h, c, client, topic, group)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		observeCommitted(workCtx, h, adm, group, topic)
	}()
	injected := n.run(workCtx, rand.New(rand.NewSource(seed)))
	wg.Wait()
	for _, m := range n.members {
		m.proc.waitReady()
	}

	// Read every partition back from offset 0 up to its end (asked
	// again while a group that just healed elects its leader).
	var ends kadm.ListedOffsets
	for {
		var err error
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil && ends.Error() == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("end offsets: %v %v", err, ends.Error())
		}
		sleep(ctx, 100*time.Millisecond)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		want[o.Partition] = o.Offset
		offsets[o.Partition] = kgo.NewOffset().At(0)
	})
	if len(want) != nemesisPartitions {
		t.Fatalf("end offsets of %d partitions, want %d", len(want), nemesisPartitions)
	}
	cons := client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	logAt := map[int32]map[int64]string{}
	last := map[int32]int64{}
	for p := range want {
		logAt[p] = map[int64]string{}
		last[p] = -1
	}
	var readAnomalies []string
	done := func() bool {
		for p, end := range want {
			if last[p]+1 < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading back: %v (read up to %v, ends %v)", ctx.Err(), last, want)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last[r.Partition] {
				readAnomalies = append(readAnomalies, fmt.Sprintf("partition %d: offset %d read after %d", r.Partition, r.Offset, last[r.Partition]))
			}
			last[r.Partition] = r.Offset
			logAt[r.Partition][r.Offset] = string(r.Value)
		})
	}
	final := committedOffsets(ctx, t, adm, group, topic)

	// Check the history against the log.
	h.mu.Lock()
	defer h.mu.Unlock()
	anomalies := append(readAnomalies, checkHistory(h, logAt, want, final)...)
	total, acked, failed, unknownPresent := 0, 0, 0, 0
	inLog := map[string]bool{}
	for _, m := range logAt {
		total += len(m)
		for _, v := range m {
			inLog[v] = true
		}
	}
	for _, op := range h.produces {
		if op.err == nil {
			acked++
			continue
		}
		failed++
		if inLog[op.value] {
			unknownPresent++
		}
	}
	t.Logf("seed %d, %v, %d nodes: %d produces (%d acknowledged, %d failed of which %d are in the log), %d records in %d partitions; "+
		"group: %d records delivered, %d commits acknowledged, %d reads of its committed offsets, final %v; faults: %v; %d anomalies",
		seed, duration, nodes, len(h.produces), acked, failed, unknownPresent, total, len(want),
		len(h.deliveries), len(h.commits), len(h.observed), final, injected, len(anomalies))
	if len(anomalies) > 0 {
		shown := anomalies
		if len(shown) > 50 {
			shown = shown[:50]
		}
		t.Fatalf("%d anomalies (first %d):\n%s\nfaults:\n%s\nthe producers' warnings:\n%s", len(anomalies), len(shown),
			strings.Join(shown, "\n"), strings.Join(n.log, "\n"), clientLog.tail(200))
	}
	for k, l := range n.links {
		if l.forwarded.Load() == 0 {
			t.Errorf("the link %d -> %d forwarded no connection: the members do not talk through the proxies", k[0], k[1])
		}
	}
	if acked == 0 {
		t.Fatal("no produce was acknowledged")
	}
	if len(h.deliveries) == 0 || len(h.commits) == 0 {
		t.Fatalf("the group delivered %d records and committed %d times", len(h.deliveries), len(h.commits))
	}
}

// consume is group member c until ctx ends: it polls, hands each record to
// the history (its application) with the stamp at which it was assigned
// the record's partition, commits what it polled and acknowledges its
// commits in the history, and lets a rebalance happen only between polls
// (so what it was handed is committed, or its commit failed, before it
// gives a partition up). The balancer is eager: every rebalance revokes
// every partition, so each new assignment must start from the commits
// made before it.
func consume(ctx context.Context, t *testing.T, h *history, c int, client func(...kgo.Opt) *kgo.Client, topic, group string) {
	var mu sync.Mutex
	assigned := map[int32]int64{}
	cl := client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s := h.now()
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[topic] {
				assigned[p] = s
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[topic] {
				delete(assigned, p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[topic] {
				delete(assigned, p)
			}
		}))
	defer cl.CloseAllowingRebalance() // BlockRebalanceOnPoll: Close alone can leave kgo's leave goroutine waiting for a rebalance the poll loop blocks
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pollCtx, 500)
		cancel()
		recs := fs.Records()
		mu.Lock()
		h.mu.Lock()
		for _, r := range recs {
			h.deliveries = append(h.deliveries, deliveryOp{member: c, partition: r.Partition, offset: r.Offset,
				value: string(r.Value), assigned: assigned[r.Partition]})
		}
		h.mu.Unlock()
		mu.Unlock()
		if len(recs) > 0 {
			next := map[int32]int64{}
			for _, r := range recs {
				next[r.Partition] = max(next[r.Partition], r.Offset+1)
			}
			commitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := cl.CommitRecords(commitCtx, recs...)
			cancel()
			if err == nil {
				h.mu.Lock()
				s := h.stamp()
				for p, o := range next {
					h.commits = append(h.commits, commitOp{member: c, partition: p, next: o, done: s})
				}
				h.mu.Unlock()
			}
		}
		cl.AllowRebalance()
	}
}

// observeCommitted reads the group's committed offsets every 200 ms until
// ctx ends, recording each read that succeeded with the stamp taken
// before it was sent.
func observeCommitted(ctx context.Context, h *history, adm *kadm.Client, group, topic string) {
	for ctx.Err() == nil {
		sleep(ctx, 200*time.Millisecond)
		s := h.now()
		readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := adm.FetchOffsets(readCtx, group)
		cancel()
		if err != nil || res.Error() != nil {
			continue
		}
		offs := map[int32]int64{}
		for p, r := range res[topic] {
			offs[p] = r.At
		}
		h.mu.Lock()
		h.observed = append(h.observed, observation{invoked: s, offsets: offs})
		h.mu.Unlock()
	}
}

// committedOffsets reads the group's committed offsets once the faults
// are healed (-1 for a partition with none).
func committedOffsets(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	for {
		res, err := adm.FetchOffsets(ctx, group)
		if err == nil && res.Error() == nil {
			out := map[int32]int64{}
			for p := range nemesisPartitions {
				out[int32(p)] = -1
			}
			for p, r := range res[topic] {
				out[p] = r.At
			}
			return out
		}
		if ctx.Err() != nil {
			t.Fatalf("the group's committed offsets: %v %v", err, ctx.Err())
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

//go:build unix

package main

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"sort"
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
// `parkway serve` members over mutual TLS on loopback, each with a Kafka
// listener; franz-go idempotent producers (acks=all) record a history of
// keyed unique values while a seeded nemesis kills (-9, then restarts on
// the same directory), pauses (SIGSTOP … SIGCONT) and composes the two
// (pause one member, kill another), and partitions the network: every
// member reaches each other member through a fault proxy of that link
// (faultProxy), so the nemesis isolates a member, cuts one link one way,
// and isolates one member while killing another. At the end every fault is healed,
// every partition is read back from offset 0, and the history is checked.
//
// PARKWAY_NEMESIS_DURATION (default 40s) is how long the workload and the
// nemesis run; PARKWAY_NEMESIS_SEED (default 1) seeds the nemesis'
// schedule. The processes' timing is the machine's, so a seed fixes the
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
		switch rng.Intn(6) {
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
		}
	}
	return
}

// faults counts the faults injected, by kind.
type faults struct {
	kills, pauses, pauseKills, partitions, oneWay, partKills int
}

func (f faults) String() string {
	return fmt.Sprintf("%d kill -9, %d pause, %d pause+kill, %d isolation, %d one-way cut, %d isolation+kill",
		f.kills, f.pauses, f.pauseKills, f.partitions, f.oneWay, f.partKills)
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

// op is one produce in the history.
type op struct {
	value     string
	partition int32
	offset    int64
	err       error
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

func freeAddrs(t *testing.T, n int) []string {
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
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
	t.Logf("seed %d, duration %v", seed, duration)

	pki := t.TempDir()
	writePKI(t, pki, "nemesis", []int{1, 2, 3})
	addrs := freeAddrs(t, 6)
	peerAddrs, kafkaAddrs := addrs[:3], addrs[3:]
	brokers := fmt.Sprintf("1=%s,2=%s,3=%s", kafkaAddrs[0], kafkaAddrs[1], kafkaAddrs[2])
	n := &nemesis{t: t, links: map[[2]int]*faultProxy{}}
	for i := range 3 {
		id := i + 1
		// A member reaches each other member through the proxy of that
		// link.
		peers := []string{fmt.Sprintf("%d=%s", id, peerAddrs[i])}
		for j := range 3 {
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
	const topic = "nemesis"
	adm := kadm.NewClient(client())
	if res, err := adm.CreateTopics(ctx, nemesisPartitions, 3, nil, topic); err != nil || res[topic].Err != nil {
		t.Fatalf("CreateTopics: %v %v", err, res[topic].Err)
	}

	// The workload: producers of keyed unique values until the
	// nemesis' time is up.
	var (
		mu      sync.Mutex
		history []op
	)
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
				// ctx, not workCtx: a record in flight when the
				// workload ends still gets its outcome.
				prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint("k", i%97)), Value: []byte(v)}, func(r *kgo.Record, err error) {
					mu.Lock()
					history = append(history, op{value: v, partition: r.Partition, offset: r.Offset, err: err})
					mu.Unlock()
				})
			}
			if err := prod.Flush(ctx); err != nil {
				t.Errorf("producer %d: Flush: %v", w, err)
			}
		}()
	}
	injected := n.run(workCtx, rand.New(rand.NewSource(seed)))
	wg.Wait()
	for _, m := range n.members {
		m.proc.waitReady()
	}

	// Read every partition back from offset 0 up to its end.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %d: %v", o.Partition, o.Err)
		}
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

	// Check the history against the log.
	mu.Lock()
	defer mu.Unlock()
	var anomalies []string
	anomalies = append(anomalies, readAnomalies...)
	where := map[string][]string{} // value → partition/offset of each copy
	total := 0
	for p, m := range logAt {
		for o, v := range m {
			where[v] = append(where[v], fmt.Sprintf("%d/%d", p, o))
			total++
		}
	}
	acked, failed, unknownPresent := 0, 0, 0
	ackedAt := map[string]string{}
	for _, h := range history {
		if h.err != nil {
			failed++
			if len(where[h.value]) > 0 {
				unknownPresent++
			}
			continue
		}
		acked++
		at := fmt.Sprintf("%d/%d", h.partition, h.offset)
		if prev, dup := ackedAt[at]; dup {
			anomalies = append(anomalies, fmt.Sprintf("offset %s acknowledged for both %s and %s", at, prev, h.value))
		}
		ackedAt[at] = h.value
		if len(where[h.value]) == 0 {
			anomalies = append(anomalies, fmt.Sprintf("acknowledged %s at %s is lost", h.value, at))
		} else if got := logAt[h.partition][h.offset]; got != h.value {
			anomalies = append(anomalies, fmt.Sprintf("acknowledged %s at %s, the log holds %q there", h.value, at, got))
		}
	}
	for v, at := range where {
		if len(at) > 1 {
			anomalies = append(anomalies, fmt.Sprintf("%s appears %d times: %v", v, len(at), at))
		}
	}
	sort.Strings(anomalies)
	t.Logf("seed %d, %v: %d produces (%d acknowledged, %d failed of which %d are in the log), %d records in %d partitions; "+
		"faults: %v; %d anomalies",
		seed, duration, len(history), acked, failed, unknownPresent, total, len(want), injected, len(anomalies))
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
}

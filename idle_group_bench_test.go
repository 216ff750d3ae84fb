//go:build unix

package parkway_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
)

// idleGroupProfile names a file prefix for a CPU profile of each
// sub-benchmark's measured window only (not of the joins before it):
// -idlegroup.profile PREFIX writes PREFIX-BenchmarkIdleGroup-nodes=1-members=1000.pprof.
var idleGroupProfile = flag.String("idlegroup.profile", "", "write a CPU profile of BenchmarkIdleGroup's measured window to PREFIX-<sub>.pprof")

// BenchmarkIdleGroup measures what one consumer group of members costs
// while nothing is produced: members joined through one node or spread
// over three in-memory nodes, one group over a topic of 1,000
// partitions. Once every member is in the group and no partition moves,
// and 6.7 s more, every iteration is 100 ms of wall time; cpu-ms/s is
// the process's CPU time (getrusage, user+system) per second of wall
// time over all of them — 10 is 1% of one core. members=0 is the idle
// node (or cluster) with the topic and an empty group, so the members'
// own cost is the difference. The figure is reported, not asserted: it
// depends on the machine.
//
//	go test -run '^$' -bench IdleGroup -benchtime 10s .
//
// members=1000 is what the documented Member API needs while idle: the
// members joined (and, while the group settled, heartbeated to release
// the partitions moving away), then the application calls nothing — their
// nodes keep their sessions alive (MemberConfig.MaxPollInterval bounds
// it; the window is well within it).
//
// heartbeating=1000 is the shape a Member needed before its node kept
// it: each member heartbeating on its own timer at a third of the default
// session timeout (every 3.3 s, staggered), as a host would have run it.
// timers=1000 is that shape's client side alone: its goroutines and
// timers, no node.
//
// consumers=1000 is the same group of 1,000 Consumers, each with its
// application ranging over Messages (what a service runs): each member
// also holds a waiting poll of its partition.
func BenchmarkIdleGroup(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d/members=0", nodes), func(b *testing.B) { benchIdleGroup(b, nodes, 0, idleMembers) })
		b.Run(fmt.Sprintf("nodes=%d/members=1000", nodes), func(b *testing.B) { benchIdleGroup(b, nodes, 1000, idleMembers) })
		b.Run(fmt.Sprintf("nodes=%d/heartbeating=1000", nodes), func(b *testing.B) { benchIdleGroup(b, nodes, 1000, idleHeartbeating) })
		b.Run(fmt.Sprintf("nodes=%d/consumers=1000", nodes), func(b *testing.B) { benchIdleGroup(b, nodes, 1000, idleConsumers) })
	}
	b.Run("timers=1000", benchIdleTimers)
}

// idleShape is how a benchmark's members live.
type idleShape int

const (
	idleMembers      idleShape = iota // Members the application leaves alone
	idleHeartbeating                  // Members heartbeated each on its own timer
	idleConsumers                     // Consumers ranging over Messages
)

// benchIdleTimers is the floor of members=1000's own client side: the
// same 1,000 goroutines waking on the same staggered timers, calling
// nothing, with no node in the process.
func benchIdleTimers(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	every := parkway.DefaultSessionTimeout / 3
	var mu sync.Mutex
	beats := 0
	for range 1000 {
		wait := time.Duration(rand.Int64N(int64(every)))
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait = every
				mu.Lock()
				beats++
				mu.Unlock()
			}
		})
	}
	time.Sleep(2 * every)
	cpu0 := processCPU(b)
	start := time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond) // the measured idle time, not synchronisation
	}
	wall := time.Since(start)
	cpu := processCPU(b) - cpu0
	mu.Lock()
	woke := beats
	mu.Unlock()
	b.ReportMetric(float64(cpu)/1e6/wall.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(woke), "wakes")
}

func benchIdleGroup(b *testing.B, nodes, members int, shape idleShape) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var ns []*parkway.Node
	if nodes == 1 {
		n, err := parkway.Open(parkway.Config{Shards: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Close() })
		ns = append(ns, n)
	} else {
		net := transport.NewNetwork(transport.NetworkOptions{})
		b.Cleanup(func() { _ = net.Close() })
		var peers []transport.NodeID
		for i := range nodes {
			peers = append(peers, transport.NodeID(i+1))
		}
		for _, id := range peers {
			n, err := parkway.Open(parkway.Config{Shards: 2, Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = n.Close() })
			ns = append(ns, n)
		}
	}
	s, err := ns[0].Admin().CreateStream(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	t, err := ns[0].Admin().CreateTopic(ctx, s, "t", 1000)
	if err != nil {
		b.Fatal(err)
	}
	if err := ns[0].Admin().CreateGroup(ctx, t, "g"); err != nil {
		b.Fatal(err)
	}
	// Members join (a few at a time). Heartbeating ones heartbeat from
	// their join on: a heartbeat acknowledges the generation, which
	// releases the partitions moving away from the member. The others
	// are heartbeated while the group settles only.
	every := parkway.DefaultSessionTimeout / 3
	errs := make(chan error, 2*members)
	beat := func(m *parkway.Member, wait time.Duration) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = every
			if _, err := m.Heartbeat(ctx); err != nil {
				if ctx.Err() == nil {
					errs <- fmt.Errorf("member %d: %w", m.ID(), err)
				}
				return
			}
		}
	}
	joins := make(chan int)
	var joining sync.WaitGroup
	var joined struct {
		sync.Mutex
		ms []*parkway.Member
	}
	consume := func(i int) {
		c, err := ns[i%len(ns)].NewConsumer(ctx, t, parkway.ConsumerConfig{Group: "g", Name: fmt.Sprintf("c%d", i)})
		if err != nil {
			errs <- err
			return
		}
		wg.Go(func() {
			defer func() { _ = c.Close() }()
			for _, err := range c.Messages(ctx) {
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("consumer %d: %w", i, err)
					}
					return
				}
			}
		})
	}
	for range 16 {
		joining.Go(func() {
			for i := range joins {
				if shape == idleConsumers {
					consume(i)
					continue
				}
				m, err := ns[i%len(ns)].JoinGroup(ctx, t, "g", parkway.MemberConfig{Name: fmt.Sprintf("m%d", i)})
				if err != nil {
					errs <- err
					continue
				}
				if shape == idleHeartbeating {
					wg.Go(func() { beat(m, time.Duration(rand.Int64N(int64(every)))) })
					continue
				}
				joined.Lock()
				joined.ms = append(joined.ms, m)
				joined.Unlock()
			}
		})
	}
	for i := range members {
		joins <- i
	}
	close(joins)
	joining.Wait()
	// Settled: every member in the group, no partition moving.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		g, err := ns[0].Admin().Group(ctx, t, "g")
		if err != nil {
			b.Fatal(err)
		}
		moving := 0
		for _, p := range g.Partitions {
			if p.Moving != 0 {
				moving++
			}
		}
		if len(g.Members) == members && moving == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not settled after 2 minutes: %d members, %d partitions moving", len(g.Members), moving)
		}
		if moving > 0 {
			// Members left alone release what moves away from them
			// with a heartbeat.
			var beats sync.WaitGroup
			for _, m := range joined.ms {
				beats.Go(func() { _, _ = m.Heartbeat(ctx) })
			}
			beats.Wait()
		}
	}

	// Settle: the partitions' raft groups quiesce, every heartbeating
	// member's first staggered heartbeat is sent.
	time.Sleep(2 * every)

	if *idleGroupProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s.pprof", *idleGroupProfile, strings.ReplaceAll(b.Name(), "/", "-")))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPU(b)
	start := time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond) // the measured idle time, not synchronisation
	}
	wall := time.Since(start)
	cpu := processCPU(b) - cpu0
	if *idleGroupProfile != "" {
		pprof.StopCPUProfile()
	}

	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	g, err := ns[len(ns)-1].Admin().Group(ctx, t, "g")
	if err != nil {
		b.Fatal(err)
	}
	if len(g.Members) != members {
		b.Fatalf("%d members in the group after the run, want %d", len(g.Members), members)
	}
	b.ReportMetric(float64(cpu)/1e6/wall.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(len(g.Members)), "members")
}

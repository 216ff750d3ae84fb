package host

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/transport"
)

// stampBus records when its node sent each heartbeat.
type stampBus struct {
	transport.Bus
	mu    sync.Mutex
	beats []time.Time
}

func (b *stampBus) Send(m transport.Message) error {
	if m.Kind == KindLiveness {
		b.mu.Lock()
		b.beats = append(b.beats, time.Now())
		b.mu.Unlock()
	}
	return b.Bus.Send(m)
}

func (b *stampBus) take() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.beats
	b.beats = nil
	return t
}

// An idle node wakes for two timers of one period, its heartbeat round
// and its quiesced metadata driver; both fire at the multiples of the
// liveness interval on the clock, whatever instant each engine started
// at, so one wake of the process serves both, and every node's (in one
// process, all six). Without the grid the beater fired an interval after
// its start and the driver a round after its own: two wakes per node per
// round, at phases of their own (bench/RESULTS.md: an idle cluster's
// context switches and what each costs at a large resident set).
func TestIdleWakesShareTheHeartbeatGrid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := transport.NewNetwork(transport.NetworkOptions{})
		defer net.Close()
		peers := []transport.NodeID{1, 2, 3}
		var engines []*Engine
		var buses []*stampBus
		defer func() {
			for _, e := range engines {
				_ = e.Close()
			}
		}()
		time.Sleep(37 * time.Millisecond) // off the grid
		for _, id := range peers {
			bus := &stampBus{Bus: net.Endpoint(id)}
			e, err := New(Config{Shards: 1, Cluster: &Cluster{ID: id, Peers: peers, Bus: bus}})
			if err != nil {
				t.Fatal(err)
			}
			engines, buses = append(engines, e), append(buses, bus)
			if err := e.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(11 * time.Millisecond) // each node at its own phase
			if id == 1 {
				// Started 37 ms into a round, fired once (at 40 ms): the
				// three ticks before the start pace the round but count
				// toward no peer's silence.
				synctest.Wait()
				if now, own := e.cl.live.now.Load(), e.cl.live.own.Load(); now != 4 || own != 1 {
					t.Fatalf("after the first tick of a start 37 ms into a round: %d ticks paced and %d counted for silence, want 4 and 1", now, own)
				}
			}
		}
		live := engines[0].cl.live
		interval := time.Duration(live.every) * engines[0].cl.cfg.TickInterval
		// The metadata group elects its leader and quiesces.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, b := range buses {
			b.take()
		}
		rounds := 20
		time.Sleep(time.Duration(rounds) * interval)
		synctest.Wait()
		for i, b := range buses {
			beats := b.take()
			if len(beats) < 2*(rounds-1) {
				t.Fatalf("node %d sent %d heartbeats in %d rounds, want about %d", i+1, len(beats), rounds, 2*rounds)
			}
			for _, at := range beats {
				if off := at.Sub(at.Truncate(interval)); off != 0 {
					t.Fatalf("node %d sent a heartbeat %v past a multiple of the %v interval", i+1, off, interval)
				}
			}
		}
		// The quiesced drivers count their ticks only at the same
		// instants: nothing between two multiples, a round at each.
		for range 3 {
			now := time.Now()
			time.Sleep(now.Truncate(interval).Add(interval).Sub(now) - time.Millisecond)
			synctest.Wait()
			before := make([]int64, len(engines))
			for i, e := range engines {
				before[i] = e.cl.live.now.Load()
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			for i, e := range engines {
				if got := e.cl.live.now.Load() - before[i]; got != e.cl.live.every {
					t.Fatalf("node %d's driver counted %d ticks at a multiple of the interval, want its round of %d", i+1, got, e.cl.live.every)
				}
			}
			time.Sleep(interval / 2)
			synctest.Wait()
			for i, e := range engines {
				if got := e.cl.live.now.Load() - before[i]; got != e.cl.live.every {
					t.Fatalf("node %d's quiesced driver woke between two multiples of the interval (%d ticks counted)", i+1, got)
				}
			}
		}
	})
}

// Command embed wires one parkway node by hand from the public packages,
// the way a host application embeds the shard, the router with its hash
// fallback and a reconciler per shard in its own process, with its own
// partition store:
//
//	go run ./examples/embed
//
// It builds a metadata store, a router over an empty shards table, two
// shards and a reconciler per shard over a custom partition store (a
// memory store that counts what it builds), then creates a topic and at
// once produces one message to each of its partitions. No partition
// exists yet and the shards table has no row, so the router falls back to
// the hash assignment and every request parks at the shard that will own
// its partition. The reconcilers, driven by reconciler.Run, then build the
// partitions; each shard serves its parked requests as its partition
// lands. The program checks every step, polls the messages back, shuts
// everything down and checks that no goroutine outlives it.
//
// It prints what happened and a final "embed: OK" line, or FAIL and why
// with a non-zero exit status. It imports nothing from parkway's internal
// packages: a host can do all of this.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/goleak"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

const (
	shards = 2
	// partitions is enough for the hash assignment to put partitions of
	// the topic on both shards (checked below), so both shards park.
	partitions = 8
)

func main() {
	// Goroutines running before the node exists (none of the node's) are
	// not the program's to stop.
	baseline := goleak.IgnoreCurrent()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed: FAIL:", err)
		os.Exit(1)
	}
	// Every goroutine the node started must be gone once it is closed.
	if err := goleak.Find(baseline); err != nil {
		fmt.Fprintln(os.Stderr, "embed: FAIL: goroutines outlived the node:", err)
		os.Exit(1)
	}
	fmt.Printf("embed: OK: %d partitions on %d shards parked, built by a custom store and served; no goroutine leaked\n",
		partitions, shards)
}

// countingStore is the host's own partition store: it keeps partitions in
// memory through partition.MemStore and counts what it builds and removes.
// Reconcilers of different shards call it concurrently.
type countingStore struct {
	inner   *partition.MemStore
	builds  atomic.Int64
	removes atomic.Int64
}

var _ partition.Store = (*countingStore)(nil)

func (s *countingStore) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	p, err := s.inner.Build(ns, epoch)
	if err == nil {
		s.builds.Add(1)
	}
	return p, err
}

func (s *countingStore) Remove(ns metadata.Namespace) error {
	s.removes.Add(1)
	return s.inner.Remove(ns)
}

func (s *countingStore) List() ([]partition.Stored, error) { return s.inner.List() }

// node is what a host holds after wiring: the parts, and what stops them.
type node struct {
	meta   *metadata.Store
	store  *countingStore
	table  *router.Table
	router *router.Router[shard.Frame]
	shards []*shard.Shard
	recs   []reconciler.Reconciler
	wakes  []<-chan struct{}
	unsub  []func()

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// wire builds the node. Nothing runs yet.
func wire() (*node, error) {
	n := &node{store: &countingStore{inner: partition.NewMemStore()}, table: &router.Table{}}
	var err error
	// The metadata store records each partition's owner with the same hash
	// the router falls back to, so both agree before any row exists.
	if n.meta, err = metadata.NewStore(metadata.Config{Shards: shards, Assign: router.Assign}); err != nil {
		return nil, err
	}
	if n.router, err = router.New[shard.Frame](n.table, shards); err != nil {
		return nil, err
	}
	m := metrics.New() // the host would register it on its Prometheus registry
	for i := range shards {
		s, err := shard.New(shard.Config{ID: i, Metrics: m}, n.meta, n.router)
		if err != nil {
			n.close()
			return nil, err
		}
		n.router.Register(i, s)
		n.shards = append(n.shards, s)
	}
	for _, s := range n.shards {
		rec, err := reconciler.New(reconciler.Config{Shard: s, Meta: n.meta, Store: n.store, Metrics: m}, n.table)
		if err != nil {
			n.close()
			return nil, err
		}
		wake, unsub := n.meta.Subscribe()
		n.recs = append(n.recs, rec)
		n.wakes = append(n.wakes, wake)
		n.unsub = append(n.unsub, unsub)
	}
	return n, nil
}

// startShards starts the shards' pumps.
func (n *node) startShards() {
	for _, s := range n.shards {
		s.Start()
	}
}

// startReconcilers runs one reconciler.Run loop per shard: a pass at
// start, on every metadata wake and every period. A nil clock is the wall
// clock, a zero period reconciler.DefaultPeriod, a nil logger silent.
func (n *node) startReconcilers() {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	for i, rec := range n.recs {
		n.wg.Go(func() { reconciler.Run(ctx, rec, n.wakes[i], nil, 0, nil) })
	}
}

// close stops the reconciler loops, then the shards (which answer
// anything still queued or parked), then the metadata subscriptions. It
// is idempotent.
func (n *node) close() error {
	n.closeOnce.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
		n.wg.Wait()
		for _, s := range n.shards {
			n.closeErr = errors.Join(n.closeErr, s.Close())
		}
		for _, unsub := range n.unsub {
			unsub()
		}
	})
	return n.closeErr
}

func run() error {
	n, err := wire()
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	defer n.close()
	n.startShards()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := n.meta.Apply(metadata.CreateStream{Name: "embed"})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	stream := res.Stream
	if res, err = n.meta.Apply(metadata.CreateTopic{Stream: stream, Name: "events", Partitions: partitions}); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	topic := res.Topic
	fmt.Printf("created stream %d and topic %d with %d partitions at revision %d\n", stream, topic, partitions, res.Revision)

	// Produce to every partition at once. The shards table is empty, so
	// the router falls back to the hash assignment; the owner shard does
	// not hold the partition yet, so it parks the request.
	replies := make([]chan shard.Response, partitions)
	nss := make([]metadata.Namespace, partitions)
	onShard := make(map[int]bool)
	for p := range partitions {
		ns, err := metadata.NewNamespace(stream, topic, uint32(p))
		if err != nil {
			return err
		}
		nss[p] = ns
		if row, ok := n.table.Get(ns); ok {
			return fmt.Errorf("%v: the shards table has a row %+v before the partition was built", ns, row)
		}
		info, _ := n.meta.Partition(ns)
		if owner := n.router.Owner(ns); owner != router.Assign(ns, shards) || owner != info.Owner {
			return fmt.Errorf("%v: router sends to shard %d, hash assigns %d, metadata records %d",
				ns, owner, router.Assign(ns, shards), info.Owner)
		}
		replies[p] = make(chan shard.Response, 1)
		req := &shard.Request{Op: shard.OpProduce, NS: ns, Messages: []partition.Message{{
			Timestamp: time.Now().UnixMicro(), Payload: fmt.Appendf(nil, "hello %d", p)}}}
		owner, err := n.router.Send(ns, shard.Frame{Req: req, Reply: replies[p]})
		if err != nil {
			return fmt.Errorf("send to %v: %w", ns, err)
		}
		onShard[owner] = true
	}
	if len(onShard) != shards {
		return fmt.Errorf("the %d partitions landed on %d shard(s), want all %d", partitions, len(onShard), shards)
	}

	// Flush is a barrier through each inbox: once it returns, every
	// request sent before it was handled. The reconcilers have not run
	// yet (a host would start them with the shards; they wait here only
	// so that the park is certain, not a race this program may lose), so
	// handled means parked.
	parked := 0
	for _, s := range n.shards {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("flush shard %d: %w", s.ID(), err)
		}
		fmt.Printf("shard %d: %d request(s) parked, waiting for their partitions\n", s.ID(), s.Parked())
		parked += s.Parked()
	}
	if parked != partitions {
		return fmt.Errorf("%d requests parked, want %d", parked, partitions)
	}
	if b := n.store.builds.Load(); b != 0 {
		return fmt.Errorf("the store built %d partitions before any reconciler ran", b)
	}

	// The reconcilers build the partitions through the custom store; each
	// shard serves its parked requests the moment a partition lands.
	n.startReconcilers()
	for p, reply := range replies {
		select {
		case r := <-reply:
			if r.Err != nil {
				return fmt.Errorf("produce to %v: %w", nss[p], r.Err)
			}
			if r.Offset != 0 {
				return fmt.Errorf("produce to %v: acked at offset %d, want 0", nss[p], r.Offset)
			}
		case <-ctx.Done():
			return fmt.Errorf("produce to %v: no answer: %w", nss[p], ctx.Err())
		}
		rev, _ := n.meta.CreatedRevision(nss[p])
		row, ok := n.table.Get(nss[p])
		if !ok || row.Epoch != rev || row.Owner != router.Assign(nss[p], shards) {
			return fmt.Errorf("%v: shards table row %+v (present %v), want owner %d at epoch %d",
				nss[p], row, ok, router.Assign(nss[p], shards), rev)
		}
		fmt.Printf("partition %v: parked request served after materialisation at epoch %d on shard %d, acked at offset 0\n",
			nss[p], row.Epoch, row.Owner)
	}
	// A shard sends the answers while it materialises the partition and
	// updates its parked count right after; a flush through its inbox
	// waits for that.
	for _, s := range n.shards {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("flush shard %d: %w", s.ID(), err)
		}
		if s.Parked() != 0 {
			return fmt.Errorf("shard %d still parks %d request(s)", s.ID(), s.Parked())
		}
	}
	if b, r := n.store.builds.Load(), n.store.removes.Load(); b != partitions || r != 0 {
		return fmt.Errorf("the custom store built %d and removed %d partitions, want %d and 0", b, r, partitions)
	}
	fmt.Printf("custom store: %d partitions built\n", n.store.builds.Load())

	// Read everything back through the router, now from the table's rows.
	for p, ns := range nss {
		reply := make(chan shard.Response, 1)
		req := &shard.Request{Op: shard.OpPoll, NS: ns, Offset: 0, Count: 10}
		if _, err := n.router.Send(ns, shard.Frame{Req: req, Reply: reply}); err != nil {
			return fmt.Errorf("poll %v: %w", ns, err)
		}
		var r shard.Response
		select {
		case r = <-reply:
		case <-ctx.Done():
			return fmt.Errorf("poll %v: no answer: %w", ns, ctx.Err())
		}
		want := fmt.Sprintf("hello %d", p)
		if r.Err != nil || len(r.Messages) != 1 || string(r.Messages[0].Payload) != want {
			return fmt.Errorf("poll %v: got %d message(s), err %v; want exactly %q", ns, len(r.Messages), r.Err, want)
		}
	}
	fmt.Printf("polled %d messages back\n", partitions)

	if err := n.close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

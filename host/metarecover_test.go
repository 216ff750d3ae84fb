package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// failOnce fails the next write to the metadata raft log with EIO once
// armed, then lets everything through again.
type failOnce struct{ armed, fired atomic.Bool }

func (f *failOnce) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.OpWriteAt && strings.Contains(op.Path, "metadata-raft") && f.armed.CompareAndSwap(true, false) {
		f.fired.Store(true)
		return syscall.EIO
	}
	return nil
}

// manualCluster is three manual cluster engines on their own disks over
// a manually delivered network, driven by the test.
type manualCluster struct {
	t       *testing.T
	clk     *clock.Manual
	net     *transport.Network
	peers   []transport.NodeID
	disks   []*vfs.MemFS
	inj     []*failOnce
	engines []*host.Engine
	// applied[i] lists the metadata indexes node i applied, in order.
	applied [][]uint64
	// back is how far the engines' wall clock is set back from clk.
	back atomic.Int64
}

// setBackClock is a manual clock whose wall time is set back by back
// (its timers run on the manual clock, as a Go timer runs across a wall
// clock step).
type setBackClock struct {
	*clock.Manual
	back *atomic.Int64
}

func (s setBackClock) Now() time.Time { return s.Manual.Now().Add(-time.Duration(s.back.Load())) }

const recoverBackoff = time.Second

func newManualCluster(t *testing.T) *manualCluster {
	c := &manualCluster{t: t, clk: clock.NewManual(t0), peers: []transport.NodeID{1, 2, 3}}
	c.net = transport.NewNetwork(transport.NetworkOptions{Clock: c.clk, ManualDelivery: true})
	t.Cleanup(func() { c.net.Close() })
	for i := range c.peers {
		c.disks = append(c.disks, vfs.NewMem())
		c.inj = append(c.inj, &failOnce{})
		c.applied = append(c.applied, nil)
		c.engines = append(c.engines, nil)
		c.open(i)
	}
	return c
}

// open (re)opens node i's engine on its disk.
func (c *manualCluster) open(i int) {
	e, err := host.New(host.Config{Shards: 1, Manual: true, Clock: setBackClock{c.clk, &c.back}, DataDir: "/data",
		FS: errorfs.New(c.disks[i], c.inj[i]), BuildBackoffMin: recoverBackoff, BuildBackoffMax: 4 * recoverBackoff,
		Cluster: &host.Cluster{ID: c.peers[i], Peers: c.peers, Bus: c.net.Endpoint(c.peers[i])},
		Events: host.Events{MetadataApplied: func(index uint64, _ metadata.Command, _ metadata.Result, _ error, _ bool) {
			c.applied[i] = append(c.applied[i], index)
		}}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = e.Close() })
	c.engines[i] = e
}

// pump delivers messages and handles the metadata members until nothing
// moves. Errors of a member that is down (retriable) are expected; any
// other is not.
func (c *manualCluster) pump() {
	c.t.Helper()
	for range 500 {
		moved := false
		for i, e := range c.engines {
			if err := e.HandleMetadata(); err != nil && !errors.Is(err, shard.ErrRetry) {
				c.t.Fatalf("node %d: %v", i+1, err)
			}
			ep := c.net.Endpoint(c.peers[i])
			for len(ep.Recv()) > 0 {
				if err := e.Deliver(<-ep.Recv()); err != nil {
					c.t.Fatalf("node %d: deliver: %v", i+1, err)
				}
				moved = true
			}
		}
		if !moved {
			return
		}
	}
	c.t.Fatal("the cluster did not settle")
}

// tick advances the clock by d in tick steps, ticking every member.
func (c *manualCluster) tick(d time.Duration) {
	c.t.Helper()
	for step := time.Duration(0); step < d; step += shard.DefaultTickInterval {
		c.clk.Advance(shard.DefaultTickInterval)
		for i, e := range c.engines {
			if err := e.TickMetadata(); err != nil && !errors.Is(err, shard.ErrRetry) {
				c.t.Fatalf("node %d: tick: %v", i+1, err)
			}
		}
		c.pump()
	}
}

// commit proposes cmd through node i under key, as a client does: it
// proposes again under the same key while the proposal is refused as
// retriable or goes unanswered, and returns the first answer.
func (c *manualCluster) commit(i int, key host.MetadataKey, cmd metadata.Command) metadata.Result {
	c.t.Helper()
	for range 50 {
		ch, err := c.engines[i].ProposeMetadata(key, cmd)
		if err != nil {
			if !errors.Is(err, shard.ErrRetry) {
				c.t.Fatalf("node %d: propose %+v: %v", i+1, cmd, err)
			}
			c.tick(100 * time.Millisecond)
			continue
		}
		for range 30 {
			c.pump()
			select {
			case r := <-ch:
				if r.Err != nil {
					c.t.Fatalf("node %d: %+v: %v", i+1, cmd, r.Err)
				}
				return r.Result
			default:
			}
			c.tick(10 * time.Millisecond)
		}
	}
	c.t.Fatalf("node %d never committed %+v", i+1, cmd)
	return metadata.Result{}
}

func streamNames(e *host.Engine) string {
	var names []string
	for _, s := range e.Meta().Streams() {
		names = append(names, s.Name)
	}
	return fmt.Sprint(names)
}

// A metadata member whose raft log refuses a write (the leader's, on an
// entry it already sent) goes down, and its calls fail as retriable
// rather than ErrMetadataFailed; after the build backoff the metadata
// tick reopens it from its raft log, and it serves again: it proposes
// and commits, every node holds every acknowledged command exactly once,
// the reopened member applies no index twice, and a restart of the node
// from its disk comes back with the same metadata.
func TestMetadataMemberReopensAfterRaftLogWriteFails(t *testing.T) {
	c := newManualCluster(t)
	c.pump()
	if lead := c.engines[0].MetadataStatus().Leader; lead != 1 {
		t.Fatalf("leader = %d, want node 1", lead)
	}
	e1 := c.engines[0]
	c.commit(0, e1.NewMetadataKey(), metadata.CreateStream{Name: "a"})

	// The leader's next raft log write fails.
	c.inj[0].armed.Store(true)
	keyB := e1.NewMetadataKey()
	ch, err := e1.ProposeMetadata(keyB, metadata.CreateStream{Name: "b"})
	if err == nil {
		c.pump()
	}
	if !c.inj[0].fired.Load() {
		t.Fatal("the metadata raft log write did not fail")
	}
	if err := e1.HandleMetadata(); !errors.Is(err, shard.ErrRetry) || errors.Is(err, host.ErrMetadataFailed) {
		t.Fatalf("member after a failed write: %v, want a retriable error", err)
	}
	if _, err := e1.ProposeMetadata(e1.NewMetadataKey(), metadata.CreateStream{Name: "x"}); !errors.Is(err, shard.ErrRetry) {
		t.Fatalf("proposal to the member while down: %v, want a retriable error", err)
	}
	if ch != nil {
		select {
		case r := <-ch:
			t.Fatalf("the proposal whose write failed was answered: %+v", r)
		default:
		}
	}

	// Within the backoff the member stays down; past it, a tick reopens it.
	c.tick(recoverBackoff / 2)
	if err := e1.HandleMetadata(); !errors.Is(err, shard.ErrRetry) {
		t.Fatalf("member reopened before its backoff: %v", err)
	}
	c.tick(recoverBackoff)
	if err := e1.HandleMetadata(); err != nil {
		t.Fatalf("member not reopened after its backoff: %v", err)
	}

	// The client proposes "b" again under its key: committed once. The
	// reopened member proposes and commits a new command.
	c.commit(0, keyB, metadata.CreateStream{Name: "b"})
	c.commit(0, e1.NewMetadataKey(), metadata.CreateStream{Name: "c"})
	c.tick(time.Second)
	for i, e := range c.engines {
		if got := streamNames(e); got != "[a b c]" {
			t.Errorf("node %d holds streams %s, want [a b c]", i+1, got)
		}
		for j := 1; j < len(c.applied[i]); j++ {
			if c.applied[i][j] <= c.applied[i][j-1] {
				t.Errorf("node %d applied index %d after %d", i+1, c.applied[i][j], c.applied[i][j-1])
			}
		}
	}

	// What the reopened member acknowledged is on its disk.
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	c.applied[0] = nil
	c.open(0)
	if got := streamNames(c.engines[0]); got != "[a b c]" {
		t.Fatalf("node 1 restarted from its disk holds streams %s, want [a b c]", got)
	}
}

// A member down after a failed write is reopened after its backoff even
// if the wall clock is set back meanwhile: by an hour here (the
// simulator's clock faults set a node's back by 10 s), which would keep
// the member down for an hour if the backoff waited for the time it
// first named (backoff.Backoff.Due starts the wait again instead).
func TestMetadataMemberReopensAfterItsClockIsSetBack(t *testing.T) {
	c := newManualCluster(t)
	c.pump()
	e1 := c.engines[0]
	c.commit(0, e1.NewMetadataKey(), metadata.CreateStream{Name: "a"})
	c.inj[0].armed.Store(true)
	if _, err := e1.ProposeMetadata(e1.NewMetadataKey(), metadata.CreateStream{Name: "b"}); err == nil {
		c.pump()
	}
	if !c.inj[0].fired.Load() {
		t.Fatal("the metadata raft log write did not fail")
	}
	c.back.Store(int64(time.Hour))
	c.tick(2 * recoverBackoff)
	if err := e1.HandleMetadata(); err != nil {
		t.Fatalf("member not reopened after its backoff, its clock set back: %v", err)
	}
}

// The same on started engines: the metadata member of the leader whose
// raft log write fails goes down and reopens by itself, driven by its
// own goroutine's tick; a command proposed through it meanwhile is
// retried by ApplyMetadata and committed once, and every node ends up
// with the same metadata.
func TestStartedMetadataMemberReopensAfterRaftLogWriteFails(t *testing.T) {
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	inj := &failOnce{}
	var engines []*host.Engine
	reopened := make(chan uint64, 1)
	for _, id := range peers {
		fsys := vfs.FS(vfs.NewMem())
		var ev host.Events
		if id == 1 {
			fsys = errorfs.New(fsys, inj)
			ev.MetadataReopened = func(index uint64) { reopened <- index }
		}
		e, err := host.New(host.Config{Shards: 1, DataDir: "/data", FS: fsys, Events: ev,
			BuildBackoffMin: 5 * time.Millisecond, BuildBackoffMax: 20 * time.Millisecond,
			Cluster: &host.Cluster{ID: id, Peers: peers, Bus: net.Endpoint(id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e1 := engines[0]
	if _, err := e1.ApplyMetadata(ctx, metadata.CreateStream{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	inj.armed.Store(true)
	if _, err := e1.ApplyMetadata(ctx, metadata.CreateStream{Name: "b"}); err != nil {
		t.Fatalf("command through the member whose write failed: %v", err)
	}
	if !inj.fired.Load() {
		t.Fatal("the metadata raft log write did not fail")
	}
	select {
	case <-reopened:
	case <-ctx.Done():
		t.Fatal("the member was not reopened")
	}
	if _, err := e1.ApplyMetadata(ctx, metadata.CreateStream{Name: "c"}); err != nil {
		t.Fatal(err)
	}
	for i, e := range engines {
		if err := e.ReadBarrier(ctx); err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		if got := streamNames(e); got != "[a b c]" {
			t.Errorf("node %d holds streams %s, want [a b c]", i+1, got)
		}
	}
}

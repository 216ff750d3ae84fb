package shard

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// groupParts and groupRounds shape the multi-partition workload: every
// round sends one produce to each of groupParts partitions of one shard
// under FsyncAlways, so each commit group covers them all and syncs them
// concurrently.
const (
	groupParts  = 4
	groupRounds = 3
)

// ack is one acknowledged produce.
type ack struct {
	ns      metadata.Namespace
	offset  uint64
	payload string
}

// groupWorkload builds groupParts partitions on fsys, inserts them into a
// shard under FsyncAlways and runs the rounds through the pump's own unit
// of work (handleFrame: the group stays open while frames wait and closes
// when the inbox drains). It returns the acknowledged produces and the
// namespaces with their epochs. A build that fails leaves its partition
// out; a failed group answers its produces with the error.
func groupWorkload(t *testing.T, fsys vfs.FS) (acks []ack, parts map[metadata.Namespace]uint64) {
	t.Helper()
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	parts = map[metadata.Namespace]uint64{}
	store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		return nil, parts // the disk failed before anything was built
	}
	var nss []metadata.Namespace
	for i := range groupParts {
		ns, epoch := h.topic(fmt.Sprint("t", i))
		parts[ns] = epoch
		p, err := store.Build(ns, epoch)
		if err != nil {
			continue
		}
		if err := h.step(s, opInsertOwned(p, always)); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	for r := range groupRounds {
		var calls []call
		for _, ns := range nss {
			c := produce(ns, fmt.Sprintf("%v/%d", ns, r))
			if err := s.TrySend(c.f); err != nil {
				t.Fatal(err)
			}
			calls = append(calls, c)
		}
		for len(s.inbox) > 0 {
			s.handleFrame(s.taken(<-s.inbox))
		}
		for i, c := range calls {
			resp := c.answered(t)
			if resp.Err == nil {
				acks = append(acks, ack{ns: nss[i], offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return acks, parts
}

// checkAcked reopens every partition on fsys and checks that each
// acknowledged produce is there, at its offset.
func checkAcked(t *testing.T, fsys vfs.FS, acks []ack, parts map[metadata.Namespace]uint64, what string) {
	t.Helper()
	if len(acks) == 0 {
		return
	}
	store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	opened := map[metadata.Namespace]partition.Partition{}
	defer func() {
		for _, p := range opened {
			_ = p.Close()
		}
	}()
	for _, a := range acks {
		p, ok := opened[a.ns]
		if !ok {
			if p, err = store.Build(a.ns, parts[a.ns]); err != nil {
				t.Fatalf("%s: rebuilding %v: %v", what, a.ns, err)
			}
			opened[a.ns] = p
		}
		ms, err := p.Read(a.offset, 1)
		if err != nil || len(ms) != 1 || string(ms[0].Payload) != a.payload {
			t.Fatalf("%s: acknowledged %q at %v offset %d lost: read %d messages, %v", what, a.payload, a.ns, a.offset, len(ms), err)
		}
	}
}

// A commit group covering several partitions syncs them concurrently;
// nothing it acknowledges may be lost, and nothing may be acknowledged
// before its own fsync returned. Every mutating filesystem operation of
// the workload is failed in turn, two ways: that operation alone (the
// disk fails once; the group goes on without it), and that one and every
// later one (the machine stops there). After each, a power loss (only
// fsynced data and directory entries survive) and a process crash must
// both keep every acknowledged produce.
func TestCrashAtEveryWritePointOfAMultiPartitionGroup(t *testing.T) {
	count := errorfs.OnIndex(-1, nil)
	acks, _ := groupWorkload(t, errorfs.New(vfs.NewMem(), count))
	if len(acks) != groupParts*groupRounds {
		t.Fatalf("clean run acknowledged %d produces, want %d", len(acks), groupParts*groupRounds)
	}
	n := count.Count()
	t.Logf("%d write points in a clean run", n)
	// The concurrent syncs of a group share a directory sync when they
	// overlap in time, so the count varies by a few from run to run: op i
	// is failed for i = 0, 1, 2, ... until a run never reaches it.
	for i := 0; ; i++ {
		reached := true
		for _, mode := range []string{"once", "from then on"} {
			mem := vfs.NewMem()
			inj := errorfs.OnIndex(int64(i), syscall.EIO)
			if mode == "from then on" {
				inj = errorfs.FromIndex(int64(i), syscall.EIO)
			}
			acks, parts := groupWorkload(t, errorfs.New(mem, inj))
			if !inj.Fired() {
				reached = false
				break
			}
			what := fmt.Sprintf("op %d failing %s, %d acknowledged", i, mode, len(acks))
			checkAcked(t, mem.Crash(), acks, parts, "power loss: "+what)
			checkAcked(t, mem, acks, parts, "process crash: "+what)
		}
		if !reached {
			if int64(i) < n/2 {
				t.Fatalf("op %d never happened; a clean run has %d", i, n)
			}
			return
		}
	}
}

// The partitions of a commit group are synced at the same time: the group
// waits for the slowest fsync, not for the sum of them.
func TestGroupSyncsItsPartitionsConcurrently(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	release, entered := make(chan struct{}), make(chan struct{}, groupParts)
	var parts []*blockingSync
	for i := range groupParts {
		ns, epoch := h.topic(fmt.Sprint("t", i))
		p := &blockingSync{Partition: h.build(ns, epoch), release: release, entered: entered}
		if err := h.step(s, opInsertOwned(p, always)); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	var calls []call
	for _, p := range parts {
		c := produce(p.Namespace(), "x")
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(s.inbox) > 0 {
			s.handleFrame(s.taken(<-s.inbox))
		}
	}()
	released := false
	defer func() {
		if !released {
			close(release) // let a stuck pump go, so the test ends
			<-done
		}
	}()
	// Every partition's Sync must be in flight at once before any may
	// return: with syncs one after another the second never starts. (The
	// deadline only bounds a failing run; a passing one never waits on it.)
	deadline := time.After(10 * time.Second)
	for range groupParts {
		select {
		case <-entered:
		case <-deadline:
			t.Fatal("the group's syncs did not all start while the first was in flight: synced one after another")
		}
	}
	for _, c := range calls {
		c.pending(t) // nothing is acknowledged before its fsync returns
	}
	released = true
	close(release)
	<-done
	for _, c := range calls {
		if r := c.answered(t); r.Err != nil {
			t.Fatalf("produce answered %v", r.Err)
		}
	}
}

// blockingSync is a partition whose Sync announces itself on entered and
// blocks until release is closed.
type blockingSync struct {
	partition.Partition
	release chan struct{}
	entered chan<- struct{}
}

func (b *blockingSync) Sync() error {
	b.entered <- struct{}{}
	<-b.release
	return b.Partition.Sync()
}

// The interval timer syncs the dirty interval partitions it still owns,
// each once, together: one removed while dirty is not synced after its
// partition was closed, one synced meanwhile is not synced again, and one
// never appended to is not synced at all.
func TestIntervalSyncCoversTheDirtyPartitionsStillOwned(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	interval := Durability{Fsync: metadata.FsyncInterval, Interval: time.Second}
	var ps []*syncCounter
	for i := range 4 {
		ns, epoch := h.topic(fmt.Sprint("t", i))
		p := &syncCounter{Partition: h.build(ns, epoch)}
		if err := h.step(s, opInsertOwned(p, interval)); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps[:3] { // ps[3] stays clean
		w := produce(p.Namespace(), "w")
		s.handle(w.f)
		if r := w.answered(t); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// ps[1] is torn down while dirty; ps[2] is synced by a durability
	// change (to the same policy) before the deadline.
	var epoch uint64
	if err := h.step(s, opTombstone(ps[1].Namespace(), &epoch)); err != nil {
		t.Fatal(err)
	}
	if err := h.step(s, opSetDurability(ps[2].Namespace(), interval)); err != nil {
		t.Fatal(err)
	}
	if ps[2].syncs != 1 {
		t.Fatalf("durability change synced %d times, want 1", ps[2].syncs)
	}
	clk.Advance(time.Second)
	<-s.commit.syncC()
	s.commit.syncDue()
	if got := [4]int{ps[0].syncs, ps[1].syncs, ps[2].syncs, ps[3].syncs}; got != [4]int{1, 0, 1, 0} {
		t.Fatalf("syncs per partition %v, want [1 0 1 0]", got)
	}
	if s.commit.syncC() != nil || len(s.commit.intervalDirty) != 0 {
		t.Fatalf("after the sync: timer armed %v, %d partitions still listed dirty", s.commit.syncC() != nil, len(s.commit.intervalDirty))
	}
}

package shard

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// heldSyncFS holds the fdatasync of consumer offset files run off the
// goroutine that owns the shard until release is closed, and records
// one run on that goroutine (the pump's: the test's here) instead of
// blocking it. Each held fdatasync sends on held first; once release is
// closed, none is held.
type heldSyncFS struct {
	vfs.FS
	pump    uint64        // the goroutine that steps the shard
	held    chan struct{} // one send per held fdatasync
	release chan struct{}
	mu      sync.Mutex
	onPump  int
}

type heldSyncFile struct {
	vfs.File
	fs *heldSyncFS
}

func (h *heldSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "/offsets/consumers/") || strings.Contains(name, "/.") {
		return f, err
	}
	return &heldSyncFile{File: f, fs: h}, nil
}

func (f *heldSyncFile) Datasync() error {
	h := f.fs
	if goid() == h.pump {
		h.mu.Lock()
		h.onPump++
		h.mu.Unlock()
	} else {
		// Held until release is closed; once it is, not held at all.
		select {
		case h.held <- struct{}{}:
			<-h.release
		case <-h.release:
		}
	}
	return vfs.Datasync(f.File)
}

// goid is the calling goroutine's id.
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	var id uint64
	fmt.Sscan(string(b[:bytes.IndexByte(b, ' ')]), &id)
	return id
}

// TestOffsetStoreDoesNotHoldThePump: a consumer offset store is
// answered once its fdatasync returned, but the shard serves on while
// the fdatasync runs: with a store's fdatasync held, every produce and
// poll that comes after it is answered at once (a consumer committing
// after each batch is handed its next batch without waiting for the
// commit), the stores wait, and they are answered, in order, with their
// offsets durable, once the fdatasync returns. On the pump, the produces
// waited for the disk behind each store.
func TestOffsetStoreDoesNotHoldThePump(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	mem := vfs.NewMem()
	fsys := &heldSyncFS{FS: mem, pump: goid(), held: make(chan struct{}), release: make(chan struct{})}
	store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	p, err := store.Build(ns, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.step(s, opInsertOwned(p, noSync)); err != nil {
		t.Fatal(err)
	}
	handle := func(c call) call {
		t.Helper()
		if err := s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		s.handleFrame(s.taken(<-s.inbox)) // as the pump
		return c
	}
	storeAt := func(off uint64) call {
		return handle(request(ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: off}))
	}
	if r := handle(produce(ns, "m0")).answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The first store creates the file (no fdatasync to hold).
	if r := storeAt(1).answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}

	first := storeAt(1)
	if fsys.onPump > 0 {
		t.Fatalf("the store's fdatasync ran on the pump")
	}
	<-fsys.held // the writer is in the first store's fdatasync
	second := storeAt(1)
	const batches = 5
	for i := range batches {
		if r := handle(produce(ns, fmt.Sprint("m", i+1))).answered(t); r.Err != nil {
			t.Fatal(r.Err)
		}
		r := handle(poll(ns, Request{Offset: uint64(i + 1)})).answered(t)
		wantBatch(t, r, fmt.Sprint("m", i+1), uint64(i+2))
	}
	first.pending(t)
	second.pending(t)

	// The last store, staged while the first is still held, comes after
	// it.
	third := storeAt(batches + 1)
	close(fsys.release)
	takeBack(s, first, second, third)
	for i, c := range []call{first, second, third} {
		if r := <-c.reply; r.Err != nil {
			t.Fatalf("store %d: %v", i+1, r.Err)
		}
	}
	if fsys.onPump > 0 {
		t.Fatalf("%d stores' fdatasyncs ran on the pump", fsys.onPump)
	}
	// A power loss now keeps the last store (the messages synced too:
	// an offset past the log's end is clamped to it).
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	q, err := mustStore(t, mem.Crash()).Build(ns, epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if off, ok, err := q.ConsumerOffset("c"); err != nil || !ok || off != batches+1 {
		t.Fatalf("after a power loss: offset %d, %v, %v; want %d", off, ok, err, batches+1)
	}
}

func mustStore(t *testing.T, fsys vfs.FS) *partition.FileStore {
	t.Helper()
	s, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// takeBack runs the pump's unit of work for the stores the offset writer
// ran, as the pump does when it is signalled, until every call is
// answered.
func takeBack(s *Shard, calls ...call) {
	for {
		all := true
		for _, c := range calls {
			if len(c.reply) == 0 {
				all = false
			}
		}
		if all {
			return
		}
		<-s.offsets.writtenC()
		s.offsetsWrittenFired()
	}
}

// offsetHarness is a shard owning one file partition of topic t, whose
// consumer offset files' fdatasyncs off the pump are held (heldSyncFS),
// with consumer c's file created at offset 1 and two messages in the log.
type offsetHarness struct {
	h      *harness
	s      *Shard
	ns     metadata.Namespace
	epoch  uint64
	mem    *vfs.MemFS
	fsys   *heldSyncFS
	store  *partition.FileStore
	p      partition.Partition
	handle func(c call) call
	once   sync.Once
}

func newOffsetHarness(t *testing.T) *offsetHarness {
	t.Helper()
	h := newHarness(t, 1, nil)
	o := &offsetHarness{h: h, s: h.shards[0], mem: vfs.NewMem()}
	o.ns, o.epoch = h.topic("t")
	o.fsys = &heldSyncFS{FS: o.mem, pump: goid(), held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(o.unhold) // before the harness closes the shard: a failed test leaves none held
	o.store = mustStore(t, o.fsys)
	o.handle = func(c call) call {
		t.Helper()
		if err := o.s.TrySend(c.f); err != nil {
			t.Fatal(err)
		}
		o.s.handleFrame(o.s.taken(<-o.s.inbox)) // as the pump
		return c
	}
	o.insert(t)
	for _, m := range []string{"m0", "m1"} {
		if r := o.handle(produce(o.ns, m)).answered(t); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// The messages durable, so that a power loss keeps the offsets over
	// them (an offset past the log's end is clamped to it).
	if err := o.p.Sync(); err != nil {
		t.Fatal(err)
	}
	if r := o.storeAt(1).answered(t); r.Err != nil { // creates the file
		t.Fatal(r.Err)
	}
	return o
}

// unhold releases the held fdatasyncs, once.
func (o *offsetHarness) unhold() {
	o.once.Do(func() { close(o.fsys.release) })
}

// insert builds the partition of o.epoch and hands it to the shard.
func (o *offsetHarness) insert(t *testing.T) {
	t.Helper()
	p, err := o.store.Build(o.ns, o.epoch)
	if err != nil {
		t.Fatal(err)
	}
	o.p = p
	if err := o.h.step(o.s, opInsertOwned(p, noSync)); err != nil {
		t.Fatal(err)
	}
}

func (o *offsetHarness) storeAt(off uint64) call {
	return o.handle(request(o.ns, &Request{Op: OpStoreOffset, Consumer: "c", Offset: off}))
}

// read returns consumer c's offset as every read of it sees it: OpGetOffset,
// OpOffsets and the partition's ConsumerOffsets (what a replica copies),
// failing the test if they differ.
func (o *offsetHarness) read(t *testing.T) uint64 {
	t.Helper()
	g := o.handle(request(o.ns, &Request{Op: OpGetOffset, Consumer: "c"})).answered(t)
	if g.Err != nil || !g.Found {
		t.Fatalf("OpGetOffset: %+v", g)
	}
	r := o.handle(request(o.ns, &Request{Op: OpOffsets, Consumer: "c"})).answered(t)
	if r.Err != nil || !r.Found || r.Offset != g.Offset {
		t.Fatalf("OpOffsets: %+v, OpGetOffset: %d", r, g.Offset)
	}
	if c := o.p.ConsumerOffsets()["c"]; c != g.Offset {
		t.Fatalf("ConsumerOffsets: %d, OpGetOffset: %d", c, g.Offset)
	}
	return g.Offset
}

// afterPowerLoss returns consumer c's offset in the partition of epoch
// reopened from o's durable state now.
func (o *offsetHarness) afterPowerLoss(t *testing.T, epoch uint64) (uint64, bool) {
	t.Helper()
	q, err := mustStore(t, o.mem.Crash()).Build(o.ns, epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	off, ok, err := q.ConsumerOffset("c")
	if err != nil {
		t.Fatal(err)
	}
	return off, ok
}

// TestOffsetStoreReadOnlyDurable: a consumer offset store's offset is
// read (ConsumerOffset, the Consumer's resume point, the offsets a replica
// copies) only once it is durable: while its fdatasync is held, and after
// it returned until the pump has taken the write back, reads see the
// previous offset, which is also what a power loss then keeps; once taken
// back, the store is answered and reads see the new one.
func TestOffsetStoreReadOnlyDurable(t *testing.T) {
	o := newOffsetHarness(t)
	st := o.storeAt(2)
	<-o.fsys.held // the writer is in the store's fdatasync
	st.pending(t)
	if got := o.read(t); got != 1 {
		t.Fatalf("a store not yet durable is read: offset %d, want 1", got)
	}
	if off, ok := o.afterPowerLoss(t, o.epoch); !ok || off != 1 {
		t.Fatalf("after a power loss with the store's fdatasync held: offset %d, %v; want 1", off, ok)
	}
	o.unhold()
	<-o.s.offsets.writtenC() // written, not yet taken back by the pump
	st.pending(t)
	if got := o.read(t); got != 1 {
		t.Fatalf("before the pump took the write back: offset %d, want 1", got)
	}
	o.s.offsetsWrittenFired()
	if r := st.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := o.read(t); got != 2 {
		t.Fatalf("after the store: offset %d, want 2", got)
	}
	if off, ok := o.afterPowerLoss(t, o.epoch); !ok || off != 2 {
		t.Fatalf("after a power loss: offset %d, %v; want 2", off, ok)
	}
}

// TestOffsetStoreQueuedBehindDelete: stores queued in the offset writer
// when their consumer's offset is deleted (and, in the second run, stored
// again: a new file) write the file they were staged for, the removed
// one: neither the new file nor the offset read is touched by them, before
// or after a power loss — the deleted offset is not brought back, the new
// one not replaced. One store is in its held fdatasync (its slot written
// before the delete), the other queued behind it (written after).
func TestOffsetStoreQueuedBehindDelete(t *testing.T) {
	for _, again := range []bool{false, true} {
		t.Run(fmt.Sprint("stored again ", again), func(t *testing.T) {
			o := newOffsetHarness(t)
			held := o.storeAt(2)
			<-o.fsys.held
			queued := o.storeAt(2)
			if r := o.handle(request(o.ns, &Request{Op: OpDeleteOffset, Consumer: "c"})).answered(t); r.Err != nil || !r.Found {
				t.Fatalf("delete: %+v", r)
			}
			if again {
				// The consumer's first store again: a new file,
				// created at once.
				if r := o.storeAt(1).answered(t); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			o.unhold()
			takeBack(o.s, held, queued)
			for _, c := range []call{held, queued} {
				if r := c.answered(t); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			g := o.handle(request(o.ns, &Request{Op: OpGetOffset, Consumer: "c"})).answered(t)
			if g.Err != nil || g.Found != again || (again && g.Offset != 1) {
				t.Fatalf("the stores staged before the delete are read: %+v", g)
			}
			if off, ok := o.afterPowerLoss(t, o.epoch); ok != again || (again && off != 1) {
				t.Fatalf("after a power loss: offset %d, %v", off, ok)
			}
			if !again {
				return
			}
			// The next store writes the new file, at its next slot.
			st := o.storeAt(2)
			takeBack(o.s, st)
			if r := st.answered(t); r.Err != nil {
				t.Fatal(r.Err)
			}
			if off, ok := o.afterPowerLoss(t, o.epoch); !ok || off != 2 {
				t.Fatalf("after the new file's store and a power loss: offset %d, %v; want 2", off, ok)
			}
		})
	}
}

// TestOffsetStoreQueuedBehindRemoval: stores queued in the offset writer
// when their partition is removed and a new incarnation built in its place
// (its consumer storing an offset) write the removed incarnation's file:
// the new incarnation's offset is untouched by them, before or after a
// power loss.
func TestOffsetStoreQueuedBehindRemoval(t *testing.T) {
	o := newOffsetHarness(t)
	held := o.storeAt(2)
	<-o.fsys.held
	queued := o.storeAt(2)
	var owned uint64
	if err := o.h.step(o.s, opTombstone(o.ns, &owned)); err != nil { // closes the partition
		t.Fatal(err)
	}
	if err := o.h.step(o.s, opRemoveOwned(o.ns)); err != nil {
		t.Fatal(err)
	}
	if err := o.store.Remove(o.ns); err != nil {
		t.Fatal(err)
	}
	o.epoch++
	o.insert(t)
	// The new incarnation's consumer: a file at the same path.
	// Two messages, so that an offset of 2 written into its file would
	// not be clamped away.
	if _, err := o.p.Append([]partition.Message{{Payload: []byte("n0")}, {Payload: []byte("n1")}}); err != nil {
		t.Fatal(err)
	}
	if err := o.p.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := o.p.StoreConsumerOffset("c", 1); err != nil {
		t.Fatal(err)
	}
	o.unhold()
	takeBack(o.s, held, queued)
	for _, c := range []call{held, queued} {
		if r := c.answered(t); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if off, ok, err := o.p.ConsumerOffset("c"); err != nil || !ok || off != 1 {
		t.Fatalf("the new incarnation's offset: %d, %v, %v; want 1", off, ok, err)
	}
	if off, ok := o.afterPowerLoss(t, o.epoch); !ok || off != 1 {
		t.Fatalf("after a power loss the new incarnation has offset %d, %v; want 1", off, ok)
	}
}

// TestOffsetStoreQueuedAtClose: Close runs and answers the stores still
// queued in the offset writer before it closes the partitions, and their
// offsets are durable.
func TestOffsetStoreQueuedAtClose(t *testing.T) {
	o := newOffsetHarness(t)
	first := o.storeAt(1)
	<-o.fsys.held
	second := o.storeAt(2) // queued behind the held one
	o.unhold()
	if err := o.s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range []call{first, second} {
		if r := c.answered(t); r.Err != nil {
			t.Fatalf("store %d: %v", i+1, r.Err)
		}
	}
	if off, ok := o.afterPowerLoss(t, o.epoch); !ok || off != 2 {
		t.Fatalf("after Close and a power loss: offset %d, %v; want 2", off, ok)
	}
}

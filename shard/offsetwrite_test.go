package shard

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// heldSyncFS holds the fdatasync of consumer offset files run off the
// goroutine that owns the shard until release is closed, and records
// one run on that goroutine (the pump's: the test's here) instead of
// blocking it.
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
		h.held <- struct{}{}
		<-h.release
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
	<-fsys.held
	<-fsys.held
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

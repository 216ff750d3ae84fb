package parkway_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// overlapFS holds the metadata log's fsync while armed, and records
// whether the node's journal was fsynced while it was held; with fail
// set, the fsync held fails with it once released, without syncing.
type overlapFS struct {
	vfs.FS
	fail    error
	mu      sync.Mutex
	armed   bool
	holding bool
	held    chan struct{} // closed once the metadata log's fsync is held
	journal chan struct{} // closed once the journal is fsynced while it is held
	release chan struct{}
	jonce   sync.Once
}

func newOverlapFS() *overlapFS {
	return &overlapFS{FS: vfs.Default, held: make(chan struct{}), journal: make(chan struct{}), release: make(chan struct{})}
}

// hold arms the gate for the next fsync of the metadata log and returns
// what lets it go; a test that ends first (a failure) lets it go too, so
// its node can close.
func (o *overlapFS) hold(t *testing.T) (release func()) {
	o.mu.Lock()
	o.armed = true
	o.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(o.release) }) }
	t.Cleanup(release)
	return release
}

// waitHeld waits until the metadata log's fsync is held at the gate.
func (o *overlapFS) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-o.held:
	case <-time.After(20 * time.Second):
		t.Fatal("the metadata log was not fsynced")
	}
}

func (o *overlapFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := o.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &overlapFile{File: f, o: o}, nil
}

type overlapFile struct {
	vfs.File
	o *overlapFS
}

// before holds the metadata log's fsync, before it runs, while armed,
// and returns the error it fails with then (overlapFS.fail).
func (f *overlapFile) before() error {
	o := f.o
	if !strings.Contains(f.Name(), string(os.PathSeparator)+"wal-") || !strings.Contains(f.Name(), "metadata") {
		return nil
	}
	o.mu.Lock()
	hold := o.armed
	o.armed = false
	o.holding = hold
	o.mu.Unlock()
	if hold {
		close(o.held)
		<-o.release
		o.mu.Lock()
		o.holding = false
		o.mu.Unlock()
		return o.fail
	}
	return nil
}

// after notes a journal fsync made while the metadata log's is held.
func (f *overlapFile) after() {
	o := f.o
	if !strings.Contains(f.Name(), string(os.PathSeparator)+"journal"+string(os.PathSeparator)) {
		return
	}
	o.mu.Lock()
	holding := o.holding
	o.mu.Unlock()
	if holding {
		o.jonce.Do(func() { close(o.journal) })
	}
}

func (f *overlapFile) Sync() error {
	if err := f.before(); err != nil {
		return err
	}
	err := f.File.Sync()
	f.after()
	return err
}

func (f *overlapFile) Datasync() error {
	if err := f.before(); err != nil {
		return err
	}
	err := vfs.Datasync(f.File)
	f.after()
	return err
}

func (f *overlapFile) WriteBack() error { return vfs.WriteBack(f.File) }

// warmAtOnce opens a one-node data directory on fsys with
// PrebuildPartitions and pays what a node pays once (a stream, a first
// topic created and produced to at once), closed at the test's end.
func warmAtOnce(t *testing.T, fsys vfs.FS, opt parkway.TopicOption) (*parkway.Node, parkway.Stream) {
	t.Helper()
	ctx := context.Background()
	n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: t.TempDir(), FS: fsys, PrebuildPartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	warm, _, err := n.CreateTopicAndProduce(ctx, s, "warm", 1, 0, []parkway.Message{{Payload: []byte("warm")}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	// A read waits for the warm message's fsync, which under FsyncAlways
	// follows its acknowledgement: none is left to land in a test's
	// window.
	readAll(t, n, warm, 0)
	return n, s
}

// DESIGN behaviour 32, the barrier's own case: a topic created and
// produced to at once (CreateTopicAndProduce, PrebuildPartitions) costs
// one fsync on the way to the produce's acknowledgement, not two in
// series. A first message too large to ride in the command's record
// (bigFirst; a small one does, TestCreateTopicAndProduceAcknowledgedOn
// TheMetadataFsync) is written to the node's journal and fsynced while
// the metadata log's fsync of the command is still under way. The metadata log's fsync is held (before it runs) until the
// journal's fsync has happened; a node that writes the message only
// after the commit never fsyncs the journal while it is held, and the
// test fails at its deadline. Neither half is answered while the
// command is not durable.
func TestBehaviour32CreateAndProduceAtOnceOverlapTheirFsyncs(t *testing.T) {
	for _, policy := range []parkway.FsyncPolicy{parkway.FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			fsys := newOverlapFS()
			opt := parkway.WithFsync(policy, time.Hour)
			n, s := warmAtOnce(t, fsys, opt)
			release := fsys.hold(t)
			type result struct {
				t   parkway.Topic
				ack parkway.Ack
				err error
			}
			done := make(chan result, 1)
			go func() {
				tp, ack, err := n.CreateTopicAndProduce(ctx, s, "new", 1, 0, []parkway.Message{{Payload: []byte(bigFirst)}}, opt)
				done <- result{tp, ack, err}
			}()
			fsys.waitHeld(t)
			select {
			case <-fsys.journal:
			case r := <-done:
				t.Fatalf("returned (%v) while the metadata log's fsync was held", r.err)
			case <-time.After(20 * time.Second):
				t.Fatal("the journal was not fsynced while the metadata log's fsync was held: the two fsyncs are in series")
			}
			select {
			case r := <-done:
				t.Fatalf("returned (%v) while the metadata log's fsync was held", r.err)
			default:
			}
			release()
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.ack.FirstOffset != 0 || r.ack.Count != 1 {
				t.Fatalf("ack %+v, want offset 0, count 1", r.ack)
			}
			if got := payloads(readAll(t, n, r.t, 0)); len(got) != 1 || got[0] != bigFirst+"@0" {
				t.Fatalf("partition holds %.40q, want [m…@0]", got)
			}
		})
	}
}

// The counted cost through the vfs seam of a create and its produce
// issued at once (DESIGN behaviour 32), up to the message's fsync in its
// partition: under FsyncAlways two fsyncs — the metadata log's, whose
// record carries the message and which is all the acknowledgement waits
// for (TestCreateTopicAndProduceAcknowledgedOnTheMetadataFsync), and the
// journal's after it — and no directory entry.
func TestBehaviour32CreateAndProduceAtOnceCost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys := &countingFS{FS: vfs.Default}
	opt := parkway.WithFsync(parkway.FsyncAlways, time.Hour)
	n, s := warmAtOnce(t, fsys, opt)
	fsys.reset()
	fsys.on.Store(true)
	tp, _, err := n.CreateTopicAndProduce(ctx, s, "new", 1, 0, []parkway.Message{{Payload: []byte("first")}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, n, tp, 0) // waits for the journal's fsync of the message
	fsys.on.Store(false)
	syncs, creates := fsys.counts()
	t.Logf("%d fsyncs, %d entries created", len(syncs), len(creates))
	if len(syncs) > 2 || len(creates) > 0 {
		t.Errorf("create + produce at once cost %d fsyncs (limit 2) and %d directory entries (limit 0):\n%s",
			len(syncs), len(creates), describeOps(syncs, creates))
	}
}

// createProduceAtOnce is the crash workload of the barrier's own case: a
// stream, then a topic created and produced to at once.
func createProduceAtOnce(ctx context.Context, n *parkway.Node, payload string) (acked bool) {
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		return false
	}
	_, _, err = n.CreateTopicAndProduce(ctx, s, "t", 1, 0, []parkway.Message{{Payload: []byte(payload)}}, parkway.WithFsync(parkway.FsyncAlways, 0))
	return err == nil
}

// bigFirst is a first message too large to ride in the metadata log's
// record (metadata.MaxCarriedBytes): the create and the produce then
// overlap their fsyncs, the command's in the metadata log and the
// message's in the journal, instead of sharing one.
var bigFirst = "m" + strings.Repeat(".", 70<<10)

// Crash at every write point of a create and produce issued at once
// (PrebuildPartitions: the produce's record is written while the command
// is made durable): the i-th mutating filesystem operation fails (EIO,
// or a torn write), the machine loses power, and the node is reopened.
// An acknowledged produce is in its topic; a topic that exists holds the
// message or nothing; a topic that does not exist is created again (with
// the same ids and, the command never having committed, the same
// revision) and is empty — a record of an incarnation that never
// committed is never served — and stays empty across a second power loss.
func TestCrashAtEveryWritePointCreateAndProduceAtOnce(t *testing.T) {
	for _, tc := range []struct{ name, payload string }{
		{"carried", "m"},      // the message rides in the command's record
		{"overlap", bigFirst}, // too large: the journal's fsync overlaps
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := errorfs.OnIndex(-1, nil)
			synctest.Test(t, func(t *testing.T) {
				n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), count), Shards: 2, PrebuildPartitions: true})
				if !createProduceAtOnce(ctxFor(t), n, tc.payload) {
					t.Fatal("clean run failed")
				}
			})
			points := count.Count()
			if points < 5 {
				t.Fatalf("only %d write points: the workload is not exercising storage", points)
			}
			t.Logf("%d write points", points)
			for i := range points {
				for _, fault := range []error{syscall.EIO, &errorfs.TornWrite{N: 5}} {
					synctest.Test(t, func(t *testing.T) {
						checkCreateProduceCrashAt(t, i, fault, tc.payload)
					})
				}
			}
		})
	}
}

func checkCreateProduceCrashAt(t *testing.T, i int64, fault error, payload string) {
	mem := vfs.NewMem()
	cfg := parkway.Config{DataDir: "/data", FS: errorfs.New(mem, errorfs.OnIndex(i, fault)), Shards: 2, PrebuildPartitions: true,
		BuildBackoffMin: time.Millisecond, BuildBackoffMax: 10 * time.Millisecond, RequestTimeout: time.Second, ReconcileInterval: 250 * time.Millisecond}
	n, err := parkway.Open(cfg)
	acked := false
	if err == nil {
		acked = createProduceAtOnce(ctxFor(t), n, payload)
	}
	crashed := mem.Crash()
	if n != nil {
		synctest.Wait()
		_ = n.Close()
	}
	ctx := ctxFor(t)
	n2, err := parkway.Open(parkway.Config{DataDir: "/data", FS: crashed, Shards: 2})
	if err != nil {
		t.Fatalf("op %d (%v): reopen after crash: %v", i, fault, err)
	}
	s, err := n2.Stream(ctx, "s")
	if err != nil {
		if acked {
			t.Fatalf("op %d (%v): the stream of an acknowledged produce is gone: %v", i, fault, err)
		}
		synctest.Wait()
		_ = n2.Close()
		return
	}
	tp, err := n2.Topic(ctx, s, "t")
	switch {
	case err == nil:
		got := payloads(readAll(t, n2, tp, 0))
		want := payload + "@0"
		if acked && (len(got) != 1 || got[0] != want) || len(got) > 1 || len(got) == 1 && got[0] != want {
			t.Fatalf("op %d (%v): the topic holds %.40q (acknowledged: %v), want [m…@0] or, unacknowledged, nothing", i, fault, got, acked)
		}
		synctest.Wait()
		_ = n2.Close()
		return
	case acked:
		t.Fatalf("op %d (%v): the topic of an acknowledged produce is gone: %v", i, fault, err)
	}
	// The command never committed: the same topic again is empty, and
	// stays so across a second power loss.
	tp, err = n2.Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatalf("op %d (%v): creating the topic again: %v", i, fault, err)
	}
	if got := payloads(readAll(t, n2, tp, 0)); len(got) != 0 {
		t.Fatalf("op %d (%v): the topic created again holds %q: a record of an incarnation that never committed", i, fault, got)
	}
	again := crashed.Crash()
	synctest.Wait()
	_ = n2.Close()
	n3, err := parkway.Open(parkway.Config{DataDir: "/data", FS: again, Shards: 2})
	if err != nil {
		t.Fatalf("op %d (%v): reopen after the second crash: %v", i, fault, err)
	}
	defer func() {
		synctest.Wait()
		_ = n3.Close()
	}()
	if tp, err := n3.Topic(ctx, s, "t"); err == nil {
		if got := payloads(readAll(t, n3, tp, 0)); len(got) != 0 {
			t.Fatalf("op %d (%v): after a second crash the topic created again holds %q: a record of an incarnation that never committed", i, fault, got)
		}
	}
}

// The metadata log's fsync of a topic created and produced to at once
// (PrebuildPartitions) fails after the produce was sent to the
// provisional partition: the command is in the log, unsynced (the
// operating system keeps the write), with the message in its record
// (carried) or, for a first message too large for it (overlap), after
// the message's record was fsynced in the journal. Neither half may be
// reported as failed: the error matches ErrOutcomeUnknown and its cause,
// and the node, reopened on the same directory, reads the command back
// and serves the topic with the message.
func TestCreateTopicAndProduceMetadataSyncFailsOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct{ name, payload string }{{"carried", "first"}, {"overlap", bigFirst}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			fsys := newOverlapFS()
			fsys.fail = syscall.EIO
			opt := parkway.WithFsync(parkway.FsyncAlways, time.Hour)
			n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir, FS: fsys, PrebuildPartitions: true})
			if err != nil {
				t.Fatal(err)
			}
			s, err := n.Admin().CreateStream(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			release := fsys.hold(t)
			done := make(chan error, 1)
			go func() {
				_, _, err := n.CreateTopicAndProduce(ctx, s, "t", 1, 0, []parkway.Message{{Payload: []byte(tc.payload)}}, opt)
				done <- err
			}()
			fsys.waitHeld(t)
			if tc.payload == bigFirst {
				select {
				case <-fsys.journal:
				case <-time.After(20 * time.Second):
					t.Fatal("the journal was not fsynced while the metadata log's fsync was held")
				}
			}
			release()
			err = <-done
			if !errors.Is(err, parkway.ErrOutcomeUnknown) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("CreateTopicAndProduce with the metadata log's fsync failing: %v; want ErrOutcomeUnknown wrapping the cause", err)
			}
			_ = n.Close()

			n2, err := parkway.Open(parkway.Config{Shards: 2, DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer n2.Close()
			tp, err := n2.Topic(ctx, s, "t")
			if err != nil {
				t.Fatalf("reopened: %v; want the logged command committed", err)
			}
			if got := payloads(readAll(t, n2, tp, 0)); len(got) != 1 || got[0] != tc.payload+"@0" {
				t.Fatalf("reopened, the topic holds %.40q, want [%.10s…@0]", got, tc.payload)
			}
		})
	}
}

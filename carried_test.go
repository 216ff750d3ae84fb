package parkway_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
)

// journalGateFS holds every fsync of a file of the node's journal while
// its gate is shut, and counts the fsyncs of the metadata log: a test can
// then see what an acknowledgement waited for without timing anything.
type journalGateFS struct {
	vfs.FS
	shut     atomic.Bool
	mu       sync.Mutex
	open     chan struct{} // closed when the gate opens
	held     atomic.Int32  // journal fsyncs waiting at the gate
	metaSync atomic.Int32  // fsyncs of metadata log files
}

func newJournalGateFS(fs vfs.FS) *journalGateFS {
	return &journalGateFS{FS: fs, open: make(chan struct{})}
}

func (g *journalGateFS) shutGate() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
	g.shut.Store(true)
}

func (g *journalGateFS) openGate() {
	g.shut.Store(false)
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *journalGateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{File: f, g: g}, nil
}

type gateFile struct {
	vfs.File
	g *journalGateFS
}

func (f *gateFile) wait() {
	name := f.Name()
	if strings.Contains(name, "/metadata/wal-") {
		f.g.metaSync.Add(1)
	}
	if !strings.Contains(name, "/journal/") || !f.g.shut.Load() {
		return
	}
	f.g.mu.Lock()
	open := f.g.open
	f.g.mu.Unlock()
	f.g.held.Add(1)
	<-open
	f.g.held.Add(-1)
}

func (f *gateFile) Sync() error     { f.wait(); return f.File.Sync() }
func (f *gateFile) Datasync() error { f.wait(); return vfs.Datasync(f.File) }

// WriteBack is a write without a flush (the journal's sync mark): not held.
func (f *gateFile) WriteBack() error { return vfs.WriteBack(f.File) }

var _ vfs.WriteBacker = (*gateFile)(nil)

// DESIGN behaviour 32 under FsyncAlways: a topic created and produced to
// at once is acknowledged after one fsync, the metadata log's, whose
// record carries the first messages; the node's journal is fsynced after
// the acknowledgement (a few milliseconds after, unless a commit group of
// the shard takes it sooner). Here every journal fsync is held at a gate: the
// acknowledgement comes while the gate is shut, after exactly one fsync
// of the metadata log, and a reader sees the message once the journal's
// fsync is let through.
func TestCreateTopicAndProduceAcknowledgedOnTheMetadataFsync(t *testing.T) {
	for _, prebuild := range []bool{false, true} {
		name := "built after the commit"
		if prebuild {
			name = "prebuilt"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fsys := newJournalGateFS(vfs.Default)
				n := open(t, parkway.Config{Shards: 2, DataDir: t.TempDir(), FS: fsys, PrebuildPartitions: prebuild})
				s := mustStream(t, n, "s")
				always := parkway.WithFsync(parkway.FsyncAlways, 0)
				warm := mustTopic(t, n, s, "warm", 1, always)
				mustProduce(t, n, warm, parkway.PartitionID(0), "warm") // the journal's first file

				fsys.shutGate()
				fsys.metaSync.Store(0)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				tp, ack, err := n.CreateTopicAndProduce(ctx, s, "new", 1, 0, []parkway.Message{{Payload: []byte("first")}}, always)
				if err != nil {
					fsys.openGate()
					t.Fatalf("CreateTopicAndProduce with the journal's fsync held: %v (it waited for the journal)", err)
				}
				if ack.FirstOffset != 0 || ack.Count != 1 {
					t.Errorf("ack %+v, want offset 0, one message", ack)
				}
				if got := fsys.metaSync.Load(); got != 1 {
					t.Errorf("the acknowledgement took %d fsyncs of the metadata log, want 1", got)
				}
				fsys.openGate()
				if got := strings.Join(payloads(readAll(t, n, tp, 0)), " "); got != "first@0" {
					t.Errorf("read %q, want \"first@0\"", got)
				}
				mustProduce(t, n, tp, parkway.PartitionID(0), "second")
				if got := strings.Join(payloads(readAll(t, n, tp, 0)), " "); got != "first@0 second@1" {
					t.Errorf("read %q, want \"first@0 second@1\"", got)
				}
			})
		})
	}
}

// A power loss after the acknowledgement and before the journal's fsync:
// the first messages live only in the metadata log's record, and the
// restart gives them back to their partition before anything else is
// appended to it, at the offsets they were acknowledged at. A topic
// deleted before the crash stays deleted with nothing handed back.
func TestCreateTopicAndProduceSurvivesPowerLossBeforeTheJournalFsync(t *testing.T) {
	synctest.Test(t, testPowerLossBeforeTheJournalFsync)
}

func testPowerLossBeforeTheJournalFsync(t *testing.T) {
	mem := vfs.NewMem()
	fsys := newJournalGateFS(mem)
	n := open(t, parkway.Config{Shards: 2, DataDir: "/data", FS: fsys})
	s := mustStream(t, n, "s")
	always := parkway.WithFsync(parkway.FsyncAlways, 0)
	warm := mustTopic(t, n, s, "warm", 1, always)
	mustProduce(t, n, warm, parkway.PartitionID(0), "warm")

	ctx := ctxFor(t)
	createProduce := func(name string) parkway.Topic {
		t.Helper()
		tp, ack, err := n.CreateTopicAndProduce(ctx, s, name, 1, 0, []parkway.Message{{Payload: []byte(name + "1")}, {Payload: []byte(name + "2")}}, always)
		if err != nil || ack.FirstOffset != 0 || ack.Count != 2 {
			fsys.openGate()
			t.Fatalf("CreateTopicAndProduce %s: %+v, %v", name, ack, err)
		}
		return tp
	}
	// With the journal's fsyncs let through: b's messages reach its
	// partition durably, dead's too before its topic is deleted (the
	// metadata log still holds both records of messages).
	b := createProduce("b")
	dead := createProduce("dead")
	if err := n.Admin().DeleteTopic(ctx, dead); err != nil {
		t.Fatal(err)
	}
	// a's partition is fsynced only after its acknowledgement (a few
	// milliseconds after, or with its shard's next commit group): the
	// gate holds that fsync (and its shard's pump with it) until the
	// crash.
	synctest.Wait() // the delete's teardown done
	fsys.shutGate()
	a := createProduce("a")
	topics := []parkway.Topic{a, b}
	crashed := mem.Crash() // only what was fsynced survives: no journal write after the gate shut
	fsys.openGate()
	_ = n.Close()

	n2 := open(t, parkway.Config{Shards: 2, DataDir: "/data", FS: crashed})
	for i, tp := range topics[:2] {
		mustProduce(t, n2, tp, parkway.PartitionID(0), "later")
		want := []string{"a1@0 a2@1 later@2", "b1@0 b2@1 later@2"}[i]
		if got := strings.Join(payloads(readAll(t, n2, tp, 0)), " "); got != want {
			t.Errorf("%s after the power loss: %q, want %q", tp.Name, got, want)
		}
	}
	if _, err := n2.Topic(ctx, s, "dead"); err == nil {
		t.Error("the deleted topic is back")
	}
	if got := strings.Join(payloads(readAll(t, n2, warm, 0)), " "); got != "warm@0" {
		t.Errorf("warm after the power loss: %q", got)
	}
}

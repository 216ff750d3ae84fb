package parkway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// metaLogGate holds the metadata log's writes (kind) while armed, and
// reports when a partition's incarnation file is about to be created or
// a record about to be written to (or fsynced in) the node's journal.
type metaLogGate struct {
	kind    errorfs.OpKind
	mu      sync.Mutex
	armed   bool
	release chan error    // the held operation returns what is sent
	built   chan struct{} // an incarnation file is being created, or a journal written
	synced  chan struct{} // the journal is being fsynced
	once    sync.Once
	sonce   sync.Once
}

func newMetaLogGate(kind errorfs.OpKind) *metaLogGate {
	return &metaLogGate{kind: kind, release: make(chan error, 1), built: make(chan struct{}), synced: make(chan struct{})}
}

// open lets a held operation (and the one armed next) go on, so a test
// that fails while one is held can still close its node.
func (g *metaLogGate) open() {
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
	select {
	case g.release <- syscall.EIO:
	default:
	}
}

func (g *metaLogGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *metaLogGate) MaybeError(op errorfs.Op) error {
	journal := strings.Contains(op.Path, string(filepath.Separator)+"journal"+string(filepath.Separator)) && strings.HasSuffix(op.Path, ".journal")
	if op.Kind == errorfs.OpOpen && op.Flag&os.O_CREATE != 0 && filepath.Base(op.Path) == "incarnation" ||
		journal && (op.Kind == errorfs.OpWriteAt || op.Kind == errorfs.OpSync) {
		// A partition's files are created (a cluster's prebuild), or a
		// record is written to the node's journal: on one node the
		// partition is built deferred, with nothing on disk, and takes
		// its first record into the journal (CreateTopicAndProduce).
		g.once.Do(func() { close(g.built) })
	}
	if journal && op.Kind == errorfs.OpSync {
		g.sonce.Do(func() { close(g.synced) })
	}
	if op.Kind != g.kind || !strings.Contains(op.Path, string(filepath.Separator)+"wal-") {
		return nil
	}
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if !armed {
		return nil
	}
	return <-g.release
}

// With PrebuildPartitions, the barrier's own case on one node: the
// partition of a new topic is built while the metadata log syncs the
// command that creates it, not after the commit, and takes the produce
// issued with the create (CreateTopicAndProduce). The log's sync is held
// until the produce's record is being written to the node's journal;
// without the prebuild nothing builds the partition before the commit, so
// nothing would be written and the test fails at its deadline. After the
// sync the produce is acknowledged. Under FsyncAlways the first message
// is one too large to ride in the command's record (bigFirst): a small
// one is written to the journal only after the commit, whose record holds
// it already (TestCreateTopicAndProduceAcknowledgedOnTheMetadataFsync).
func TestCreateTopicBuildsWhileTheMetadataLogSyncs(t *testing.T) {
	for _, policy := range []parkway.FsyncPolicy{parkway.FsyncInterval, parkway.FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			gate := newMetaLogGate(errorfs.OpSync)
			n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: t.TempDir(), FS: errorfs.New(vfs.Default, gate), PrebuildPartitions: true})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = n.Close() }()
			defer gate.open()
			s, err := n.Admin().CreateStream(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			gate.arm()
			type created struct {
				t   parkway.Topic
				err error
			}
			done := make(chan created, 1)
			first := "first"
			if policy == parkway.FsyncAlways {
				first = bigFirst
			}
			go func() {
				tp, _, err := n.CreateTopicAndProduce(ctx, s, "t", 1, 0, []parkway.Message{{Payload: []byte(first)}}, parkway.WithFsync(policy, time.Second))
				done <- created{tp, err}
			}()
			select {
			case <-gate.built:
			case c := <-done:
				t.Fatalf("CreateTopic returned (%v) while its log sync was held", c.err)
			case <-time.After(20 * time.Second):
				t.Fatal("the partition was not built while the metadata log synced")
			}
			gate.release <- nil
			c := <-done
			if c.err != nil {
				t.Fatal(c.err)
			}
			if got := payloads(readAll(t, n, c.t, 0)); len(got) != 1 || got[0] != first+"@0" {
				t.Fatalf("partition holds %.40q, want [%.10s…@0]", got, first)
			}
		})
	}
}

// A partition built for a command that a crash keeps from committing,
// with the record of a produce issued with the create, is an orphan: the
// node's start removes it. The metadata log's sync is held while the
// produce's record is fsynced in the node's journal; the data directory
// is copied then (what a crash would leave: the journal's record, the
// command written but not synced — a crash may keep either, and the
// write fails here), and a node opened on the copy has no such topic and
// no partition directory; a topic created again there, with the same
// ids and revision, is empty: the record of the incarnation that never
// committed is never served. The message is one too large to ride in the
// command's record (bigFirst), which a small one would, leaving nothing
// in the journal.
func TestPrebuiltOrphanIsRemovedAtStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	gate := newMetaLogGate(errorfs.OpSync)
	n, err := parkway.Open(parkway.Config{Shards: 1, DataDir: dir, FS: errorfs.New(vfs.Default, gate), PrebuildPartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Close() }()
	defer gate.open()
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	// The metadata log as it was before the command: the crash image
	// is cut back to it (the command's write did not survive).
	wals, err := filepath.Glob(filepath.Join(dir, "metadata", "wal-*"))
	if err != nil || len(wals) != 1 {
		t.Fatalf("metadata logs %q: %v", wals, err)
	}
	before, err := os.Stat(wals[0])
	if err != nil {
		t.Fatal(err)
	}
	gate.arm()
	done := make(chan error, 1)
	go func() {
		_, _, err := n.CreateTopicAndProduce(ctx, s, "t", 1, 0, []parkway.Message{{Payload: []byte("orphan" + bigFirst)}}, parkway.WithFsync(parkway.FsyncAlways, 0))
		done <- err
	}()
	select {
	case <-gate.synced:
	case <-time.After(20 * time.Second):
		t.Fatal("the produce's record was not written while the metadata log synced")
	}
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	journals, _ := filepath.Glob(filepath.Join(crashed, "journal", "*.journal"))
	inJournal := false
	for _, j := range journals {
		b, err := os.ReadFile(j)
		inJournal = inJournal || err == nil && strings.Contains(string(b), "orphan")
	}
	if !inJournal {
		t.Fatal("the crash image's journal does not hold the produce's record")
	}
	walCopy := filepath.Join(crashed, "metadata", filepath.Base(wals[0]))
	if err := os.Truncate(walCopy, before.Size()); err != nil {
		t.Fatal(err)
	}
	partDir := filepath.Join("streams", "0", "topics", "0", "partitions", "0")
	gate.release <- syscall.EIO
	if err := <-done; err == nil {
		t.Fatal("CreateTopicAndProduce succeeded with its log sync failing")
	}

	n2, err := parkway.Open(parkway.Config{Shards: 1, DataDir: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n2.Close() }()
	if _, err := n2.Topic(ctx, s, "t"); err == nil {
		t.Fatal("the topic exists after the crash, its command never logged")
	}
	if _, err := os.Stat(filepath.Join(crashed, partDir)); !os.IsNotExist(err) {
		t.Fatalf("the orphan partition directory is still there after the start: %v", err)
	}
	again, err := n2.Admin().CreateTopic(ctx, s, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := payloads(readAll(t, n2, again, 0)); len(got) != 0 {
		t.Fatalf("the topic created again holds %q: a record of an incarnation that never committed", got)
	}
}

// droppingBus drops every message its node sends while armed, as a
// partition of the network would: raft re-sends once it is disarmed.
type droppingBus struct {
	transport.Bus
	mu    sync.Mutex
	armed bool
}

func (b *droppingBus) set(armed bool) {
	b.mu.Lock()
	b.armed = armed
	b.mu.Unlock()
}

func (b *droppingBus) Send(m transport.Message) error {
	b.mu.Lock()
	armed := b.armed
	b.mu.Unlock()
	if armed {
		return nil
	}
	return b.Bus.Send(m)
}

// In a cluster, the node a CreateTopic goes through builds its replica of
// the new partition while the command is being replicated: with every
// message from that node dropped the command cannot commit, and the
// partition's files are written all the same. Without the announcement
// nothing builds before the commit and the test fails at its deadline.
func TestClusterCreateTopicBuildsWhileTheCommandReplicates(t *testing.T) {
	ctx := context.Background()
	net := transport.NewNetwork(transport.NetworkOptions{})
	defer net.Close()
	peers := []transport.NodeID{1, 2, 3}
	gate := newMetaLogGate(errorfs.OpKind(-1)) // only its incarnation signal
	bus := &droppingBus{Bus: net.Endpoint(1)}
	var nodes []*parkway.Node
	for _, id := range peers {
		cfg := parkway.Config{Shards: 1, DataDir: t.TempDir(), PrebuildPartitions: true,
			Cluster: &parkway.ClusterConfig{ID: id, Peers: peers, Bus: net.Endpoint(id)}}
		if id == 1 {
			cfg.Cluster.Bus, cfg.FS = bus, errorfs.New(vfs.Default, gate)
		}
		n, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = n.Close() }()
		nodes = append(nodes, n)
	}
	n := nodes[0]
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	bus.set(true)
	defer bus.set(false)
	done := make(chan error, 1)
	var topic parkway.Topic
	go func() {
		var err error
		topic, err = n.Admin().CreateTopic(ctx, s, "t", 1)
		done <- err
	}()
	select {
	case <-gate.built:
	case err := <-done:
		t.Fatalf("CreateTopic returned (%v) while its node was cut off", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the partition was not built while its command was being replicated")
	}
	bus.set(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
		t.Fatalf("first produce: %v", err)
	}
}

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
// reports when a partition's incarnation file is about to be created.
type metaLogGate struct {
	kind    errorfs.OpKind
	mu      sync.Mutex
	armed   bool
	release chan error    // the held operation returns what is sent
	built   chan struct{} // an incarnation file is being created
	once    sync.Once
}

func newMetaLogGate(kind errorfs.OpKind) *metaLogGate {
	return &metaLogGate{kind: kind, release: make(chan error, 1), built: make(chan struct{})}
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
	if op.Kind == errorfs.OpOpen && op.Flag&os.O_CREATE != 0 && filepath.Base(op.Path) == "incarnation" {
		g.once.Do(func() { close(g.built) })
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

// With PrebuildPartitions, the barrier's own case on one node: the partition of a new topic is
// built while the metadata log syncs the command that creates it, not
// after the commit. The log's sync is held until the partition's
// incarnation file is being written; without the prebuild nothing builds
// the partition before the commit, so nothing would be written and the
// test fails at its deadline. After the sync the first produce is served.
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
			go func() {
				tp, err := n.Admin().CreateTopic(ctx, s, "t", 1, parkway.WithFsync(policy, time.Second))
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
			if _, err := n.Produce(ctx, c.t, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
				t.Fatalf("first produce: %v", err)
			}
		})
	}
}

// A partition built for a command that a crash keeps from committing is
// an orphan on disk: the node's start removes it. The metadata log's
// write is held while the partition is built; the data directory is
// copied then (what a crash would leave: the partition's directory and
// files, no log record), and a node opened on the copy has no such topic
// and no partition directory.
func TestPrebuiltOrphanIsRemovedAtStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	gate := newMetaLogGate(errorfs.OpWriteAt)
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
	gate.arm()
	done := make(chan error, 1)
	go func() {
		_, err := n.Admin().CreateTopic(ctx, s, "t", 1)
		done <- err
	}()
	select {
	case <-gate.built:
	case <-time.After(20 * time.Second):
		t.Fatal("the partition was not built while the metadata log was written")
	}
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	partDir := filepath.Join("streams", "0", "topics", "0", "partitions", "0")
	if _, err := os.Stat(filepath.Join(crashed, partDir)); err != nil {
		t.Fatalf("the crash image has no prebuilt partition: %v", err)
	}
	gate.release <- syscall.EIO
	if err := <-done; err == nil {
		t.Fatal("CreateTopic succeeded with its log write failing")
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

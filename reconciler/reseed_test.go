package reconciler_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// errBuilt is the build of a replica whose directory holds no raft log
// (reseedStore): the build got past the damage.
var errBuilt = errors.New("built")

// reseedStore is a FileStore whose builds of a replicated partition read
// its raft log as the shard does, and find it damaged: refused if the
// record of a refusal is in the directory (shard.RaftRefusedName),
// damaged if a raft log is, errBuilt otherwise. SetAside and the rest
// are the FileStore's.
type reseedStore struct {
	*partition.FileStore
}

func (s reseedStore) Build(ns metadata.Namespace, epoch uint64) (partition.Partition, error) {
	fsys, dir := s.Location(ns)
	if _, err := fsys.Stat(filepath.Join(dir, shard.RaftRefusedName)); err == nil {
		return nil, fmt.Errorf("%w: %w", shard.ErrRaftLogRefused,
			&partition.CorruptError{Path: filepath.Join(dir, shard.RaftRefusedName), Err: errors.New("refused")})
	}
	if _, err := fsys.Stat(filepath.Join(dir, shard.RaftLogName)); err == nil {
		return nil, &partition.CorruptError{Path: filepath.Join(dir, shard.RaftLogName), Err: replica.ErrCorruptLog}
	}
	return nil, errBuilt
}

// reseedRun is node 1 of a cluster of three, with one partition whose
// replica's raft log is damaged on a disk whose refusal operations can
// be made to fail.
type reseedRun struct {
	t       *testing.T
	meta    *metadata.Store
	info    metadata.PartitionInfo
	store   reseedStore
	fail    *errorfs.Switch
	shard   *shard.Shard
	table   *router.Table
	clk     *clock.Manual
	reseeds []uint64 // the replicas reported
}

func newReseedRun(t *testing.T) *reseedRun {
	t.Helper()
	meta, err := metadata.NewStore(metadata.Config{Shards: 1, Assign: router.Assign, Nodes: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Apply(metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	res, err := meta.Apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: metadata.TopicConfig{Replicas: 3}})
	if err != nil {
		t.Fatal(err)
	}
	x := &reseedRun{t: t, meta: meta, info: res.Created[0], table: &router.Table{}, clk: clock.NewManual(time.Unix(0, 0))}
	// The refusal's operations: its directory's creation and syncs, the
	// renames into it.
	x.fail = errorfs.NewSwitchFunc(syscall.EIO, func(op errorfs.Op) bool {
		switch op.Kind {
		case errorfs.OpMkdirAll, errorfs.OpSyncDir, errorfs.OpRename:
			return true
		}
		return false
	})
	fsys := errorfs.New(vfs.NewMem(), x.fail)
	fstore, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	x.store = reseedStore{fstore}
	rt, err := router.New[shard.Frame](x.table, 1)
	if err != nil {
		t.Fatal(err)
	}
	x.shard, err = shard.New(shard.Config{ID: 0, Metrics: metrics.New()}, meta, rt)
	if err != nil {
		t.Fatal(err)
	}
	rt.Register(0, x.shard)
	x.shard.Start()
	t.Cleanup(func() { _ = x.shard.Close() })

	// The replica's raft log, tagged with its incarnation and raft id.
	id := x.replica()
	_, dir := x.store.Location(x.info.NS)
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := replica.OpenDisk(fsys, filepath.Join(dir, shard.RaftLogName), true)
	if err != nil {
		t.Fatal(err)
	}
	tag := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, x.info.CreatedRevision), id)
	if err := d.SetTag(tag); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return x
}

// replica is node 1's raft id of the partition, as the metadata names it.
func (x *reseedRun) replica() uint64 {
	x.t.Helper()
	info, _ := x.meta.Partition(x.info.NS)
	id, ok := info.ReplicaOf(1)
	if !ok {
		x.t.Fatalf("node 1 holds no replica of %v", x.info.NS)
	}
	return id
}

// reconciler is node 1's reconciler of the shard, as a start makes it.
func (x *reseedRun) reconciler() *reconciler.Partitions {
	x.t.Helper()
	rec, err := reconciler.New(reconciler.Config{
		Shard: x.shard, Meta: x.meta, Store: x.store, Node: 1, Clock: x.clk,
		BackoffMin: time.Second, BackoffMax: time.Second,
		Reseed: func(ns metadata.Namespace, epoch, replica uint64) {
			if ns == x.info.NS && epoch == x.info.CreatedRevision {
				x.reseeds = append(x.reseeds, replica)
			}
		},
	}, x.table)
	if err != nil {
		x.t.Fatal(err)
	}
	return rec
}

// pass runs a reconcile pass of rec past every backoff.
func (x *reseedRun) pass(rec *reconciler.Partitions) {
	x.t.Helper()
	x.clk.Advance(2 * time.Second)
	if _, err := rec.Reconcile(context.Background()); err != nil {
		x.t.Fatal(err)
	}
}

// refused reports whether the record of a refusal is in the partition's
// directory.
func (x *reseedRun) refused() bool {
	fsys, dir := x.store.Location(x.info.NS)
	_, err := fsys.Stat(filepath.Join(dir, shard.RaftRefusedName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		x.t.Fatal(err)
	}
	return err == nil
}

// A replica's raft log is damaged, and recording its refusal on disk
// (shard.RefuseRaftLog) fails: the re-seed is not reported then — the
// record is what keeps a restart from building the replica from the log
// once the re-seed commits — but at the next build, once the record is
// made. After a restart, the re-seed that committed meanwhile is known
// from the refused log's tag (an older replica's than the metadata
// names): the copy is set aside and the new replica built, with no
// second report.
func TestReseedReportedOnceTheRefusalIsRecorded(t *testing.T) {
	x := newReseedRun(t)
	old := x.replica()
	rec := x.reconciler()
	x.fail.Set(true)
	for range 3 {
		x.pass(rec)
		if len(x.reseeds) != 0 || x.refused() {
			t.Fatalf("the refusal failed, yet re-seeds %#x were reported (recorded: %v)", x.reseeds, x.refused())
		}
	}
	x.fail.Set(false)
	x.pass(rec)
	if len(x.reseeds) != 1 || x.reseeds[0] != old || !x.refused() {
		t.Fatalf("with the refusal recorded (%v): re-seeds %#x reported, want %#x once", x.refused(), x.reseeds, old)
	}

	// The re-seed commits; the node restarts (a new reconciler, which
	// remembers no report).
	if _, err := x.meta.Apply(metadata.ReseedReplica{NS: x.info.NS, CreatedRevision: x.info.CreatedRevision, Replica: old}); err != nil {
		t.Fatal(err)
	}
	if id := x.replica(); raftid.Gen(id) != 1 {
		t.Fatalf("after the re-seed node 1's replica is %#x, want generation 1", id)
	}
	rec = x.reconciler()
	x.pass(rec)
	x.pass(rec)
	if len(x.reseeds) != 1 {
		t.Fatalf("after the restart the committed re-seed was reported again: %#x", x.reseeds)
	}
	if x.refused() {
		t.Fatal("the refused copy of the older replica was not set aside")
	}
	fsys, dir := x.store.Location(x.info.NS)
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	aside := false
	for _, n := range names {
		if strings.HasPrefix(n, "damaged-") {
			_, err := fsys.Stat(filepath.Join(dir, n, shard.RaftRefusedName, shard.RaftLogName))
			aside = aside || err == nil
		}
	}
	if !aside {
		t.Fatalf("the partition's directory holds %q: want the refused log set aside in damaged-N", names)
	}
}

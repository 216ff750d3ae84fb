package host

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
)

// refusedReplicaDir writes, in ns's directory of store, a replica built
// deferred (no file of the partition's own) whose raft log, tagged with
// incarnation inc, was refused as damaged (shard.RefuseRaftLog).
func refusedReplicaDir(t *testing.T, store *partition.FileStore, ns metadata.Namespace, inc uint64) string {
	t.Helper()
	fsys, dir := store.Location(ns)
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, shard.RaftLogName)
	d, err := replica.OpenDisk(fsys, log, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetTag(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, inc), 1)); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := shard.RefuseRaftLog(fsys, dir, &partition.CorruptError{Path: log, Err: replica.ErrCorruptLog}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The orphan sweep at start and the directories of replicas whose raft
// log was refused (shard.RefuseRaftLog). Such a directory has no
// incarnation file of its own, and the store lists it with the refusal
// as damage; but the refused log's tag names its incarnation. One of an
// earlier incarnation than the committed one is an orphan, removed once;
// one of the committed incarnation is left to its build (which has the
// replica re-seeded) without a word. Neither is "a damaged incarnation
// record", logged at every start and kept for good.
func TestOrphanSweepTellsRefusedReplicasByTheirTag(t *testing.T) {
	meta, err := metadata.NewStore(metadata.Config{Shards: 1, Assign: router.Assign, Nodes: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Apply(metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	res, err := meta.Apply(metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 2, Config: metadata.TopicConfig{Replicas: 3}})
	if err != nil {
		t.Fatal(err)
	}
	current, earlier := res.Created[0], res.Created[1]
	store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: vfs.NewMem(), OwnerIncarnation: raftLogIncarnation})
	if err != nil {
		t.Fatal(err)
	}
	curDir := refusedReplicaDir(t, store, current.NS, current.CreatedRevision)
	oldDir := refusedReplicaDir(t, store, earlier.NS, earlier.CreatedRevision-1)

	for start := range 2 {
		var buf bytes.Buffer
		e := &Engine{cfg: Config{Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug})}, meta: meta, store: store, fstore: store}
		if err := e.removeOrphans(); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if n := strings.Count(out, "damaged incarnation record"); n != 0 {
			t.Fatalf("start %d logged %d damaged incarnation records:\n%s", start, n, out)
		}
		if n, want := strings.Count(out, "removed orphan partition"), 1-start; n != want {
			t.Fatalf("start %d removed %d orphans, want %d:\n%s", start, n, want, out)
		}
		fsys, _ := store.Location(current.NS)
		if _, err := fsys.Stat(filepath.Join(curDir, shard.RaftRefusedName)); err != nil {
			t.Fatalf("start %d: the committed incarnation's refused replica: %v; want it kept for its build", start, err)
		}
		if _, err := fsys.Stat(oldDir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("start %d: the earlier incarnation's refused replica: %v; want it removed", start, err)
		}
	}
}

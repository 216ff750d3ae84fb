package parkway_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
)

// countingFS counts, while on, what a create + produce costs the disk
// through the vfs seam: fsyncs of files (Sync and Datasync) and of
// directories (SyncDir), and the directory entries created (a file opened
// with O_CREATE that did not exist, each directory MkdirAll made, each
// rename's new name). What it counts is recorded by path, so a failure
// says which operations they were.
type countingFS struct {
	vfs.FS
	on atomic.Bool

	mu      sync.Mutex
	syncs   []string // "file <path>" or "dir <path>"
	creates []string
}

func (c *countingFS) record(list *[]string, what string) {
	if !c.on.Load() {
		return
	}
	c.mu.Lock()
	*list = append(*list, what)
	c.mu.Unlock()
}

// counts returns what was counted since the last reset.
func (c *countingFS) counts() (syncs, creates []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.syncs), slices.Clone(c.creates)
}

func (c *countingFS) reset() {
	c.mu.Lock()
	c.syncs, c.creates = nil, nil
	c.mu.Unlock()
}

func (c *countingFS) exists(name string) bool {
	_, err := c.FS.Stat(name)
	return err == nil
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	created := flag&os.O_CREATE != 0 && !c.exists(name)
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if created {
		c.record(&c.creates, "file "+name)
	}
	return &countingFile{File: f, c: c}, nil
}

func (c *countingFS) MkdirAll(dir string, perm os.FileMode) error {
	var missing []string
	for d := filepath.Clean(dir); !c.exists(d); d = filepath.Dir(d) {
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := c.FS.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range missing {
		c.record(&c.creates, "dir "+d)
	}
	return nil
}

func (c *countingFS) Rename(oldname, newname string) error {
	if err := c.FS.Rename(oldname, newname); err != nil {
		return err
	}
	c.record(&c.creates, "rename "+newname)
	return nil
}

func (c *countingFS) SyncDir(dir string) error {
	c.record(&c.syncs, "dir "+dir)
	return c.FS.SyncDir(dir)
}

type countingFile struct {
	vfs.File
	c *countingFS
}

func (f *countingFile) Sync() error {
	f.c.record(&f.c.syncs, "file "+f.Name())
	return f.File.Sync()
}

// Datasync counts as a file fsync, then passes vfs.Datasync through.
func (f *countingFile) Datasync() error {
	f.c.record(&f.c.syncs, "file "+f.Name())
	return vfs.Datasync(f.File)
}

// WriteBack passes vfs.WriteBack through uncounted: it hands a written
// block to the device without a flush (sync_file_range on Linux), so it
// is a write, not an fsync. Without it vfs.WriteBack would fall back to
// Datasync on the wrapper and count a flush the node never issues (the
// journal's and the raft log's sync marks are written this way).
func (f *countingFile) WriteBack() error { return vfs.WriteBack(f.File) }

var _ io.Closer = (*countingFile)(nil)
var _ vfs.WriteBacker = (*countingFile)(nil)

// createProduceCost opens a one-node data directory through a counting
// filesystem, creates a first topic and produces to it (what a node pays
// once: its stream's directories, the journal's first file), then counts
// the fsyncs and directory entries created from the call that creates a
// second topic to the acknowledgement of the first produce to it.
func createProduceCost(t *testing.T, policy parkway.FsyncPolicy) (syncs, creates []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys := &countingFS{FS: vfs.Default}
	n, err := parkway.Open(parkway.Config{Shards: 2, DataDir: t.TempDir(), FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	}()
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	// A long interval: no interval sync runs within the measurement, as in
	// the bench module's case 6.
	opt := parkway.WithFsync(policy, time.Hour)
	warm, err := n.Admin().CreateTopic(ctx, s, "warm", 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, warm, parkway.PartitionID(0), parkway.Message{Payload: []byte("warm")}); err != nil {
		t.Fatal(err)
	}
	fsys.reset()
	fsys.on.Store(true)
	tp, err := n.Admin().CreateTopic(ctx, s, "new", 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	fsys.on.Store(false)
	return fsys.counts()
}

// DESIGN behaviour 32: a new partition costs its creator no fsync and no
// file creation beyond what its first acknowledged message needs. Counted
// through the vfs seam, from CreateTopic to the first produce's ack, on
// one node with a data directory: under FsyncAlways at most two fsyncs
// (the metadata command's, and one group commit for the message) and
// under FsyncInterval one (the metadata command's; the message is written,
// not synced, before its ack), and under both no directory entry created.
func TestBehaviour32CreateAndProduceCostNoFsyncOrFileOfTheirOwn(t *testing.T) {
	for _, tc := range []struct {
		policy   parkway.FsyncPolicy
		maxSyncs int
	}{{parkway.FsyncAlways, 2}, {parkway.FsyncInterval, 1}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			syncs, creates := createProduceCost(t, tc.policy)
			t.Logf("%d fsyncs, %d entries created", len(syncs), len(creates))
			if len(syncs) > tc.maxSyncs || len(creates) > 0 {
				t.Errorf("create + first ack cost %d fsyncs (limit %d) and %d directory entries (limit 0):\n%s",
					len(syncs), tc.maxSyncs, len(creates), describeOps(syncs, creates))
			}
		})
	}
}

func describeOps(syncs, creates []string) string {
	var b strings.Builder
	for _, s := range syncs {
		fmt.Fprintf(&b, "  fsync  %s\n", s)
	}
	for _, c := range creates {
		fmt.Fprintf(&b, "  create %s\n", c)
	}
	return b.String()
}

// The partitions behaviour 32 defers live in the node's journal until
// their files are created: a power loss while they do keeps every
// acknowledged message (the replay recreates them), a topic deleted
// before the crash stays deleted (the orphan sweep removes what the
// replay brought back), and a topic deleted and recreated comes back as
// its new incarnation only.
func TestBehaviour32DeferredPartitionsSurvivePowerLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		cfg := parkway.Config{DataDir: "/data", FS: mem, Shards: 2}
		n, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := mustStream(t, n, "s")
		keep := mustTopic(t, n, s, "keep", 1)
		mustProduce(t, n, keep, parkway.PartitionID(0), "a", "b")
		dead := mustTopic(t, n, s, "dead", 1)
		mustProduce(t, n, dead, parkway.PartitionID(0), "dead")
		gone := mustTopic(t, n, s, "gone", 1)
		mustProduce(t, n, gone, parkway.PartitionID(0), "old")
		if err := n.Admin().DeleteTopic(ctxFor(t), gone); err != nil {
			t.Fatal(err)
		}
		again := mustTopic(t, n, s, "gone", 1)
		if again.ID != gone.ID {
			t.Fatalf("recreated topic %v, want the slab id %d in a new incarnation", again, gone.ID)
		}
		mustProduce(t, n, again, parkway.PartitionID(0), "new")
		if err := n.Admin().DeleteTopic(ctxFor(t), dead); err != nil {
			t.Fatal(err)
		}
		partDir := func(tp parkway.Topic) string {
			return filepath.Join("/data", "streams", fmt.Sprint(tp.Stream.ID), "topics", fmt.Sprint(tp.ID), "partitions", "0")
		}
		if _, err := mem.Stat(partDir(keep)); err == nil {
			t.Fatal("the new partition has a directory after its first ack: it was not deferred")
		}
		crashed := mem.Crash() // power loss: only what was fsynced survives
		synctest.Wait()
		_ = n.Close()

		n2 := open(t, parkway.Config{DataDir: "/data", FS: crashed, Shards: 2})
		if got := strings.Join(payloads(readAll(t, n2, keep, 0)), " "); got != "a@0 b@1" {
			t.Errorf("keep after the power loss: %q, want \"a@0 b@1\"", got)
		}
		if got := strings.Join(payloads(readAll(t, n2, again, 0)), " "); got != "new@0" {
			t.Errorf("the recreated topic after the power loss: %q, want \"new@0\"", got)
		}
		if _, err := crashed.Stat(partDir(dead)); err == nil {
			t.Error("the deleted topic's partition is back on disk after the start")
		}
		if _, err := n2.Topic(ctxFor(t), s, "dead"); err == nil {
			t.Error("the deleted topic is back")
		}
	})
}

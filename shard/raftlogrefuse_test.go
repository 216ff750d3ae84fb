package shard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// refusedRun is a replicated partition whose raft log a lie cut below its
// sync mark while the node was down: the restarted node's build refuses
// it. mark is a copy of the sync mark saved before the last rounds, when
// it recorded a size the cut log still reaches (oldSize): restored by a
// second lie, it makes the cut log read as an older whole log.
type refusedRun struct {
	disk    *vfs.MemFS
	ns      metadata.Namespace
	epoch   uint64
	dir     string
	mark    []byte
	oldSize uint64
	refusal error // the restarted node's build failure
	acked   int
}

// newRefusedRun runs rounds rounds on one replicated partition (with
// more than replRounds fill a deferred partition's write-behind buffer,
// its files are created and its build is no longer deferred), saving the
// sync mark after the first, loses power, cuts the raft log back to the
// size that mark recorded, and builds the partition on the restarted
// node: the build must refuse the log.
func newRefusedRun(t *testing.T, rounds int) *refusedRun {
	t.Helper()
	mem := vfs.NewMem()
	r := newReplRun(t, mem, always)
	r.add("t0")
	if len(r.nss) != 1 {
		t.Fatal("the partition was not built")
	}
	ns := r.nss[0]
	x := &refusedRun{ns: ns, epoch: r.parts[ns],
		dir: fmt.Sprintf("/data/streams/%d/topics/%d/partitions/%d", ns.Stream(), ns.Topic(), ns.Partition())}
	log := filepath.Join(x.dir, RaftLogName)
	for k := range rounds {
		if k == 1 {
			var err error
			if x.mark, err = vfs.ReadFile(mem, filepath.Join(x.dir, RaftMarkName)); err != nil {
				t.Fatal(err)
			}
			if _, x.oldSize, _, err = replica.SyncedSize(mem, log); err != nil {
				t.Fatal(err)
			}
		}
		r.round(k)
	}
	x.acked = len(r.acks)
	if x.acked != rounds {
		t.Fatalf("%d produces acknowledged, want %d", x.acked, rounds)
	}
	x.disk = mem.Crash()
	_, size, _, err := replica.SyncedSize(x.disk, log)
	if err != nil || size <= x.oldSize {
		t.Fatalf("the mark records %d bytes synced (%v), want more than the saved copy's %d", size, err, x.oldSize)
	}
	cut(t, x.disk, log, int64(x.oldSize))
	x.refusal = x.build(t)
	if !refusable(x.refusal) || !RaftLogLost(x.refusal) {
		t.Fatalf("build of the cut raft log: %v; want it refused as damaged", x.refusal)
	}
	return x
}

// build builds and inserts the partition on a node restarted on x.disk,
// as the reconciler does, and returns its failure (nil: built).
func (x *refusedRun) build(t *testing.T) error {
	t.Helper()
	r := newReplRun(t, x.disk, always)
	if ns, e := r.h.topic("t0"); ns != x.ns || e != x.epoch {
		t.Fatalf("the restart's topic is %v@%d, want %v@%d", ns, e, x.ns, x.epoch)
	}
	p, err := r.store.BuildDeferred(x.ns, x.epoch)
	if err != nil {
		return err
	}
	return r.h.step(r.h.shards[0], opInsertOwned(p, always))
}

// rollBack is the second lie, on a disk after a power loss: the sync
// mark rolled back to the saved copy — and, worse than a lie on one
// file, the cut log and that mark put back where the build opens them,
// as if the refused log had never been set aside. Only the record of the
// refusal (RaftRefusedName) is left to tell.
func (x *refusedRun) rollBack(t *testing.T) {
	t.Helper()
	log := filepath.Join(x.dir, RaftLogName)
	for _, from := range []string{log, filepath.Join(x.dir, RaftRefusedName, RaftLogName)} {
		b, err := vfs.ReadFile(x.disk, from)
		if err != nil {
			continue
		}
		if err := vfs.WriteFileAtomic(x.disk, log, b); err != nil {
			t.Fatal(err)
		}
		break
	}
	if err := vfs.WriteFileAtomic(x.disk, filepath.Join(x.dir, RaftMarkName), x.mark); err != nil {
		t.Fatal(err)
	}
	if err := x.disk.SyncDir(x.dir); err != nil {
		t.Fatal(err)
	}
	if _, size, _, err := replica.SyncedSize(x.disk, log); err != nil || size != x.oldSize {
		t.Fatalf("after the rollback the mark records %d (%v), want %d", size, err, x.oldSize)
	}
}

// A raft log refused as damaged is recorded on disk at once
// (RefuseRaftLog), so that no restart builds the replica from it: a lie
// cut the log below its sync mark, the build refused it, the refusal was
// recorded, the node lost power, and a second lie rolled the mark back
// to an older copy that the cut log reaches (and put log and mark back in
// place): the log then reads as an older whole log, and only the record
// keeps the replica, under its raft id, from being built without entries
// it acknowledged (simulator cluster seed 1901: it was, was elected, and
// wrote an acknowledged offset anew). The damaged log and its mark are
// kept, whole, for an operator. Without the record the same disk builds
// (checked here too), which is the hole.
func TestRefusedRaftLogStaysRefused(t *testing.T) {
	for _, rounds := range []int{3, replRounds + 3} {
		t.Run(fmt.Sprint(rounds, " rounds"), func(t *testing.T) {
			x := newRefusedRun(t, rounds)
			q, err := RefuseRaftLog(x.disk, x.dir, x.refusal)
			if err != nil || q != filepath.Join(x.dir, RaftRefusedName) {
				t.Fatalf("RefuseRaftLog: %q, %v", q, err)
			}
			if got := names(t, x.disk, q); !slices.Equal(got, []string{RaftLogName, RaftMarkName}) {
				t.Fatalf("the refused directory holds %q, want the log and its mark", got)
			}
			if fi, err := x.disk.Stat(filepath.Join(q, RaftLogName)); err != nil || fi.Size() != int64(x.oldSize) {
				t.Fatalf("the refused log is %v (%v), want kept whole at %d bytes", fi, err, x.oldSize)
			}
			x.disk = x.disk.Crash()
			x.rollBack(t)

			err = x.build(t)
			if !errors.Is(err, ErrRaftLogRefused) || !RaftLogLost(err) || !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("build after the refusal and the rollback: %v; want the refused raft log", err)
			}
			l, err := RaftLogOf(x.disk, x.dir)
			if !errors.Is(err, ErrRaftLogRefused) || !l.Tagged || l.Incarnation != x.epoch || l.Held {
				t.Fatalf("RaftLogOf: %+v, %v; want refused, tagged with incarnation %d (the refused mark's tag)", l, err, x.epoch)
			}
			// Refusing again (each failed build does) keeps the first
			// refusal's files, and sets nothing else aside.
			if q2, err := RefuseRaftLog(x.disk, x.dir, err); err != nil || q2 != q {
				t.Fatalf("RefuseRaftLog again: %q, %v", q2, err)
			}
			if fi, err := x.disk.Stat(filepath.Join(q, RaftLogName)); err != nil || fi.Size() != int64(x.oldSize) {
				t.Fatalf("the refused log is %v (%v) after a second refusal, want the first one's %d bytes", fi, err, x.oldSize)
			}

			// The hole the record closes: the same disk without it.
			if err := x.disk.RemoveAll(q); err != nil {
				t.Fatal(err)
			}
			if err := x.build(t); err != nil {
				t.Fatalf("without the record, the rolled-back log was refused (%v): the test no longer reaches the hole", err)
			}
		})
	}
}

// RefuseRaftLog fails at each of its filesystem operations in turn, once
// and for good, and the node then loses power; the second lie of
// TestRefusedRaftLogStaysRefused follows. A refusal RefuseRaftLog
// reported as recorded (nil error) must hold: the build is refused. One
// it did not record (an error) may be lost, but the node must not build
// the log before the lie either (the damage is still there, or the
// record is): the reconciler refuses it again at that build.
func TestRefuseRaftLogCrashAtEveryOperation(t *testing.T) {
	kinds := []errorfs.OpKind{errorfs.OpStat, errorfs.OpMkdirAll, errorfs.OpSyncDir, errorfs.OpRename}
	for _, after := range []bool{false, true} {
		for i := int64(0); ; i++ {
			x := newRefusedRun(t, 3)
			inj := errorfs.OnIndex(i, syscall.EIO, kinds...)
			if after {
				inj = errorfs.FromIndex(i, syscall.EIO, kinds...)
			}
			_, rerr := RefuseRaftLog(errorfs.New(x.disk, inj), x.dir, x.refusal)
			if !inj.Fired() {
				if rerr != nil || i < 4 {
					t.Fatalf("op %d never reached, RefuseRaftLog: %v", i, rerr)
				}
				break
			}
			what := fmt.Sprintf("op %d failed (for good: %v)", i, after)
			if rerr == nil {
				t.Fatalf("%s: RefuseRaftLog reported no error", what)
			}
			x.disk = x.disk.Crash()
			if err := x.build(t); err == nil || !RaftLogLost(err) {
				t.Fatalf("%s: build after the power loss: %v; want the raft log refused", what, err)
			}
			recorded := false
			if _, err := x.disk.Stat(filepath.Join(x.dir, RaftRefusedName)); err == nil {
				recorded = true
			}
			// The reconciler's next pass refuses it again, on a disk
			// that works: recorded now, whatever the failure left.
			if _, err := RefuseRaftLog(x.disk, x.dir, x.refusal, x.build(t)); err != nil {
				t.Fatalf("%s: refusing again: %v", what, err)
			}
			x.disk = x.disk.Crash()
			x.rollBack(t)
			if err := x.build(t); !errors.Is(err, ErrRaftLogRefused) {
				t.Fatalf("%s (recorded before: %v): build after the second refusal and the rollback: %v; want the refused raft log", what, recorded, err)
			}
		}
	}
	// A clean run: the refusal recorded, then the rollback.
	x := newRefusedRun(t, 3)
	if _, err := RefuseRaftLog(x.disk, x.dir, x.refusal); err != nil {
		t.Fatal(err)
	}
	x.disk = x.disk.Crash()
	x.rollBack(t)
	if err := x.build(t); !errors.Is(err, ErrRaftLogRefused) {
		t.Fatalf("build after a clean refusal and the rollback: %v", err)
	}
}

// cut truncates the file at name to size, synced.
func cut(t *testing.T, fsys vfs.FS, name string, size int64) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(size), f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

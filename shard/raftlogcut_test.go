package shard

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// A replicated partition's raft log cut below its first record — the tag
// naming its incarnation and replica — in a directory holding nothing
// else (a replica built deferred, its files not created yet), as a lying
// disk leaves it, on the node that holds the partition's only replica.
// The log cannot say whose it was, but its sync mark, which survives the
// cut, names the tag (replica.OwnerTag):
//
//   - the build of the log's own incarnation is refused as a damaged raft
//     log (synced bytes are missing), the directory kept: never served
//     empty;
//   - the build of the next incarnation of the namespace, placed on the
//     same node, discards the directory as an earlier incarnation's, and
//     its replica builds, elects itself and acknowledges at offset 0.
//
// Before the mark carried the tag both builds were refused, and the next
// incarnation's partition, with no other replica to be seeded from,
// stayed down for good (the simulator's knownUnownedSoleLog; cluster
// seeds 273 and 64 on intermediate trees).
func TestRaftLogCutBelowItsTag(t *testing.T) {
	// The tag record: a wal header, the record type and the 16-byte tag.
	const tagEnd = 8 + 1 + 16
	for _, cut := range []int64{0, 12, tagEnd - 1} {
		t.Run(fmt.Sprint("cut to ", cut), func(t *testing.T) {
			mem := vfs.NewMem()
			r := newReplRun(t, mem, always)
			r.add("t0")
			for k := range 3 {
				r.round(k)
			}
			if len(r.nss) != 1 || len(r.acks) != 3 {
				t.Fatalf("%d partitions built, %d produces acknowledged; want 1 and 3", len(r.nss), len(r.acks))
			}
			ns := r.nss[0]
			e1 := r.parts[ns]
			// A power loss: the first shard never touches this copy.
			disk := mem.Crash()
			dir := fmt.Sprintf("/data/streams/%d/topics/%d/partitions/%d", ns.Stream(), ns.Topic(), ns.Partition())
			log := dir + "/" + RaftLogName
			if got := names(t, disk, dir); !slices.Equal(got, []string{RaftLogName, RaftMarkName}) {
				t.Fatalf("the deferred replica's directory holds %q, want its raft log and mark alone", got)
			}
			f, err := disk.OpenFile(log, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(f.Truncate(cut), f.Sync(), f.Close()); err != nil {
				t.Fatal(err)
			}
			if tag, err := replica.PrefixTag(disk, log); err != nil || tag != nil {
				t.Fatalf("the cut log's prefix holds tag %x (%v); the cut must remove it", tag, err)
			}

			// The restarted node, the partition still at its incarnation.
			r2 := newReplRun(t, disk, always)
			if ns2, e := r2.h.topic("t0"); ns2 != ns || e != e1 {
				t.Fatalf("the restart's topic is %v@%d, want %v@%d", ns2, e, ns, e1)
			}
			_, err = r2.store.BuildDeferred(ns, e1)
			if !errors.Is(err, partition.ErrCorrupt) || !RaftLogLost(err) {
				t.Fatalf("build of the cut log's own incarnation: %v; want a damaged raft log", err)
			}
			if fi, err := disk.Stat(log); err != nil || fi.Size() != cut {
				t.Fatalf("after the refused build the raft log is %v (%v), want kept at %d bytes", fi, err, cut)
			}

			// The topic deleted and created again: the same namespace, the
			// next incarnation, its only replica on this node.
			e2 := r2.h.recreate(ns, "t0")
			r2.parts[ns] = e2
			if !r2.insert(ns, e2) {
				t.Fatalf("the next incarnation %d over the cut log of %d was not built", e2, e1)
			}
			r2.nss = append(r2.nss, ns)
			r2.round(0)
			if len(r2.acks) != 1 || r2.acks[0].offset != 0 {
				t.Fatalf("the next incarnation acknowledged %+v, want one produce at offset 0", r2.acks)
			}
			if l, err := RaftLogOf(disk, dir); err != nil || !l.Tagged || l.Incarnation != e2 {
				t.Fatalf("the next incarnation's raft log: %+v, %v; want tagged %d", l, err, e2)
			}
		})
	}
}

// names lists dir's entries, sorted.
func names(t *testing.T, fsys vfs.FS, dir string) []string {
	t.Helper()
	n, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(n)
	return n
}

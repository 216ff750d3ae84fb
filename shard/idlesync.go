package shard

import (
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// syncQuiesced syncs the partition log of o, a replicated partition
// whose group just quiesced, when its topic is FsyncAlways, and writes
// its raft log back when its topic is FsyncInterval.
//
// A replicated partition's acknowledgements rest on its raft log, which
// Save fsyncs; its partition log is written by applying the committed
// entries and fsynced only before a compaction (maybeCompact), thousands
// of entries later. Until then its tail holds writes no fsync covered,
// and the partition store keeps such a tail's descriptor pinned (see
// partition.FileConfig.MaxOpenFiles): every replicated partition that
// took a write would hold a descriptor outside the store's budget until
// its next compaction, so a node with many replicated partitions would
// run out of descriptors as if it had no budget. A group that quiesces
// has nothing in flight and nothing more to apply, so this is the point
// where its partition goes idle: one fsync releases the pin, and the
// store may close the partition's files while the group sleeps, as it
// does for a single node's partitions after their group commit.
//
// Interval topics are synced by their timer, and FsyncNever topics keep
// their tails pinned by choice (as a single node's do). A failed fsync
// fences the partition, as one before a compaction does.
//
// A partition still deferred (partition.Deferred: built by
// partition.FileStore.BuildDeferred, its few records held behind in
// memory, its raft log lodged in its directory) is left as it is. This
// sync has nothing to do for it: it has no file, so no descriptor is
// pinned, and every record it holds is in the raft log, which Save
// fsynced before the acknowledgement and which re-applies them after a
// restart (the log is compacted only after a Sync of the partition,
// maybeCompact). Its Sync would create its files — ten or so directory
// entries and the fsyncs of its layout — for nothing: an idle replica
// would cost the files behaviour 32 keeps off its path, right after its
// first acknowledgement (DESIGN behaviour 32,
// TestBehaviour32ClusterReplicaCostsOnlyItsRaftLog). Its files are
// created when it needs them, as under the other policies: past its
// write-behind buffer, for a consumer offset, before a compaction.
//
// An interval topic's raft log is not synced by Save either, only by the
// interval timer, so it holds unsynced writes — and its descriptor, pinned
// outside the budget — for up to the interval after each write: a node
// that writes to more replicas within one interval (two minutes by
// default, as JetStream's sync_interval) than its budget ran out of
// descriptors (issue 33: case R6 on disk, three nodes in one process,
// failed with EMFILE at about 6,660 new topics). So a quiescing
// interval-policy group writes its raft log back (wal.Log.WriteBack:
// sync_file_range, a write without the device's cache flush), which
// releases the pin; the flush still waits for the interval. A failed
// writeback fails the group, as a failed Save does.
func (rg *raftGroups) syncQuiesced(o *owned) {
	if o.failed != nil {
		return
	}
	if o.dur.Fsync == metadata.FsyncInterval {
		if o.rep.grp != nil && o.rep.grp.Disk() != nil {
			if err := o.rep.grp.Disk().WriteBack(); err != nil {
				rg.failGroup(o, err)
			}
		}
		return
	}
	if !o.dur.always() {
		return
	}
	if d, ok := o.p.(partition.Deferred); ok && d.Deferred() {
		return
	}
	if err := o.p.Sync(); err != nil {
		rg.owner.fence(o, err)
		rg.log.Error("fsync of a quiesced partition failed; partition fenced", "ns", o.p.Namespace(), "error", err)
	}
}

package shard

import "github.com/parkway-io/parkway/partition"

// syncQuiesced syncs the partition log of o, a replicated partition
// whose group just quiesced, when its topic is FsyncAlways.
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
// memory and in the raft log) pins no descriptor, so it is left as it
// is: its Sync would create its files (ten or so directory entries and
// the fsyncs of its layout) for nothing this sync is for. Its files are
// created when it needs them, at the latest by the Sync before a
// compaction, as under the other policies. Synced here, a new topic's
// replicas created their files as soon as their group quiesced after the
// first acknowledgement, racing with the producer's return (DESIGN
// behaviour 32, TestBehaviour32ClusterReplicaCostsOnlyItsRaftLog).
func (rg *raftGroups) syncQuiesced(o *owned) {
	if !o.dur.always() || o.failed != nil {
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

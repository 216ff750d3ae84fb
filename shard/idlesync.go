package shard

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
func (rg *raftGroups) syncQuiesced(o *owned) {
	if !o.dur.always() || o.failed != nil {
		return
	}
	if err := o.p.Sync(); err != nil {
		rg.owner.fence(o, err)
		rg.log.Error("fsync of a quiesced partition failed; partition fenced", "ns", o.p.Namespace(), "error", err)
	}
}

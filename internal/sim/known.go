package sim

// Known engine bugs the simulator finds (Violation.Known): each violation
// that is an instance of one is classified as such where it is detected,
// as narrowly as the simulator can tell, and the cluster test skips the
// seed (-sim.known fails on it instead).
//
// TODO(sim): remove each constant, and the classification that points at
// it, once the fix lands.
const (
	// knownTombstonedPending: shard.unreplicate answers the produces a
	// leader proposed and has not applied yet with errTombstoned ("retry
	// here", which promises the request was not applied) when the
	// partition is torn down, though their entries may already be
	// committed — and applied on the other replicas. They should be
	// answered as LeaderChanged answers them: ErrOutcomeUnknown.
	knownTombstonedPending = "shard.unreplicate answers pending proposals \"retry here\" (errTombstoned) though they may have committed; it should answer ErrOutcomeUnknown"
	// knownMetaReadyError: when the metadata group's Ready fails (its raft
	// log refuses a write: ENOSPC, EIO), cluster.go's runMetadata logs it
	// and calls Handle again on its next turn; replica.Handle calls Ready
	// without the Advance of the failed one, and etcd raft panics ("two
	// accepted Ready structs without call to Advance"), taking the node's
	// process down. The default cluster faults spare the metadata raft log
	// (FaultRates.SpareMetadataLog); -sim.metafaults does not.
	knownMetaReadyError = "a failed metadata Ready is followed by another Handle; etcd raft panics (cluster.go runMetadata)"
	// knownApplyErrorSilence: shard's groupHandler.apply takes an entry's
	// waiting frames out of pending before applying its operations; when
	// one fails (its append hits ENOSPC or EIO) it returns at once, and
	// the frames of the entry's later operations are never answered —
	// the group is then dropped with an empty pending map.
	knownApplyErrorSilence = "an append failing in the middle of a raft entry leaves the entry's later writes unanswered (shard groupHandler.apply)"
	// knownRaftLogRecovery: replica.Disk.Save writes a Ready's snapshot
	// record before its hard state; when the hard state's write is torn
	// (or lost while the snapshot's survives), the log reopens with a
	// snapshot past the recovered hard state's commit index, and
	// replica.New hands raft a state it panics on ("state.commit N is out
	// of range [S, S]") — when the partition is rebuilt or the node
	// restarts.
	knownRaftLogRecovery = "a raft log whose hard state record is torn after a snapshot record reopens with commit < snapshot index; replica.New panics in etcd raft"
	// knownStoreOffsetDivergence: when a replica applies a consumer
	// offset entry and its partition's StoreConsumerOffset fails (ENOSPC,
	// EIO on the offset file), shard's applyOp answers the error to a
	// waiting client and goes on: that replica keeps the old offset while
	// the others store the new one, and the replicas' state diverges for
	// good (an append failure, by contrast, fences the partition for a
	// rebuild).
	knownStoreOffsetDivergence = "a consumer offset write failing on one replica at apply is answered and skipped: that replica's offsets diverge from the others'"
	// knownStoreOffsetRange: applying a consumer offset entry judges "past
	// the end of the log" against the local partition log's end
	// (Partition.StoreConsumerOffset), not the replicated log's end as a
	// truncation is judged. When a replica re-applies the entry after a
	// restart or a rebuild, its partition log may already hold the
	// messages that came after it, and an offset refused the first time
	// is stored: that replica's consumer offset diverges.
	knownStoreOffsetRange = "a consumer offset entry is judged against the local log's end, so re-applying it after a restart or rebuild can store what was refused: replicas diverge"
	// knownMetaDedupe: the metadata group's deduplication table
	// (cluster.go, metaHandler.seen) is not part of the metadata snapshot,
	// so a node that restarts from a snapshot, or installs one, forgets
	// the commands before it; a re-proposal of one of them that committed
	// after the snapshot is then applied again on that node only (every
	// other node skips it as a duplicate) — CreatePartitions adds a
	// partition, DeleteTopic by id could delete the topic that reused the
	// slab — and the replicas' metadata diverge.
	knownMetaDedupe = "the metadata dedupe table is not in the metadata snapshot: a node restarted from a snapshot re-applies a duplicate command the others skip, and the replicas' metadata diverge"
	// knownProposalIDs: replica.Group numbers its proposals from
	// Node<<40 on every start, so after a restart a member reissues the
	// ids its previous incarnation gave entries that are still in the log;
	// when such an old entry is applied (re-applied after the restart, or
	// committed late), the new proposal waiting under the same id is
	// answered with the old entry's result — a produce acknowledged at
	// another produce's offset.
	knownProposalIDs = "replica.Group proposal ids restart at Node<<40 after a restart: a new proposal is answered with the result of an older entry that carries the same id"
	// knownStaleLeaderReads: a read asked of the leader (FromLeader) is
	// served by any replica that believes it leads and has applied an
	// entry of its term, with no ReadIndex round or lease: a leader that
	// was paused (or cut off) while the others elected a new one and
	// acknowledged writes serves its stale copy until it learns of the
	// new term — contrary to the README's "a read sent anywhere sees
	// every acknowledged write".
	knownStaleLeaderReads = "leader reads have no ReadIndex or lease: a deposed leader that has not heard of the new term yet (paused, cut off) serves a stale read"
	// tombstonedText identifies errTombstoned, which shard does not
	// export.
	tombstonedText = "partition is being removed"
)

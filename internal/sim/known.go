package sim

// Fixed since the simulator found them (their classifications are gone,
// so a regression fails the test): proposal ids reissued after a restart,
// pending proposals answered "retry here" at teardown, an entry's later
// writes left unanswered when one failed, a torn hard state after a
// snapshot record, consumer offsets judged against the local log's end or
// skipped on an I/O error, and the metadata deduplication table missing
// from metadata snapshots; stale leader reads (leader reads now go
// through raft's ReadIndex); and a metadata member whose raft log refused
// one write leaving the group until its node restarted (it is reopened
// from its log now, and the default cluster faults reach that log); on
// a single node, damage the journal replay meets at open refusing the
// whole node (knownOpenRefused: the partitions it concerns are fenced
// now, package partition, replayJournals), and a partition left
// unusable by a failed write-behind never rebuilt
// (knownUnusableNotRebuilt: a read that meets it fences it too now).
//
// Known engine bugs the simulator finds are classified where they are
// detected (Violation.Known, as narrowly as the simulator can tell), and
// the cluster test and the lying-disk test skip such seeds (-sim.known
// fails on them instead).

// Known engine limits the lying disk (lie.go) finds on a single node.
const (
	// knownIncarnationDamage: the incarnation file of a partition
	// carries a checksum, and a whole record that fails it is reported
	// (a *CorruptError) and its directory kept; but a file cut short
	// reads exactly as the torn write of a half-built directory, and one
	// rolled back to an earlier copy (another incarnation's, or none)
	// names another incarnation: Build starts the partition over, or
	// the orphan sweep removes it, and the acknowledged messages are
	// deleted without an error.
	knownIncarnationDamage = "a damaged incarnation file makes the partition's directory look dead or half-built: it is removed or rebuilt empty, acknowledged messages deleted silently"
	// knownJournalDamage: the shared journal cut short or rolled back
	// to an earlier copy loses its last frames, and with them the only
	// durable copy of what they acknowledged since the partitions
	// manifest last recorded the logs' synced ends: nothing durable
	// records how far the journal itself was synced, so its end reads as
	// a torn tail. (The end of a partition's last segment cut off or
	// rolled back is no longer excused — knownTailDamage was fixed: the
	// manifest records each log's synced end and a shorter log is
	// reported — nor are bytes flipped in a last record written whole,
	// package tail's rule.) It is classified, as broadly as before,
	// whenever a lie touched any file outside the partitions'
	// directories (the journal, the manifest, the metadata's files):
	// the simulator does not tell which of them hid the loss.
	knownJournalDamage = "the journal's end cut off or rolled back looks like a torn tail (no durable record of the journal's synced end): its last frames' acknowledged messages lost"
)

// Known engine limits the lying disk finds in a cluster (clie.go). Each is
// classified only where the violation is, or follows from, the liar's own
// copy of an incarnation a lie touched (its constant says how); the
// honest majority is checked as always.
const (
	// knownReplicaIncarnationDamage: as knownIncarnationDamage on one
	// node: the liar's damaged incarnation file makes its copy look dead
	// or half-built, and the directory — the segments and the replica's
	// raft log with its term and vote — is removed while the node's
	// metadata names it a replica. Its raft term and vote go with it
	// (a member that forgets its vote may vote twice): a drain that never
	// ends after such a removal is classified as this limit too (cluster
	// seed 474: two honest replicas trading appends and rejections at one
	// instant).
	knownReplicaIncarnationDamage = "a damaged incarnation file makes a replica's directory (its log and raft state) look dead: removed while the node is a replica"
	// knownDeadIncarnationDamage: the liar's incarnation file damaged
	// while its directory held an incarnation that was deleted since
	// (a later one of the namespace committed): the file cannot say
	// whose the directory is, so every build of the new incarnation on
	// that node fails on it; the repair (reconciler's reincarnate) keeps
	// or discards a copy only when its raft log is tagged with the
	// incarnation the metadata names, and this one's names the dead one,
	// so the copy is never repaired and the frames for it stay parked on
	// that node (invariant 4; the group serves without it). Classified
	// only when every parked frame is on the liar, for such a partition.
	// Cluster seed 419 of 0-499.
	knownDeadIncarnationDamage = "a dead incarnation's damaged incarnation file blocks the next incarnation's builds on the liar (its raft log names the dead one, so it is not repaired): frames for it stay parked"
)

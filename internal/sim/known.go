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
// (knownUnusableNotRebuilt: a read that meets it fences it too now); in
// a cluster, a lie on a raft log's last synced write read as a torn
// tail, the replica forgetting entries it acknowledged or a vote it cast
// (knownRaftLogWindow, cluster seeds 326, 974, 2930, 4899, 7605, 7679,
// 8364, 20250, 20750: the log's sync mark lagged by one synced write;
// package replica now makes it durable before raft acts on the write,
// TestRaftLogWindowClosed).
//
// Known engine bugs the simulator finds are classified where they are
// detected (Violation.Known, as narrowly as the simulator can tell), and
// the cluster test and the lying-disk test skip such seeds (-sim.known
// fails on them instead).

// Known engine limits the lying disk (lie.go) finds on a single node.
const (
	// knownIncarnationDamage: an incarnation file cut short, emptied
	// or rolled back to an older record, in a directory where the store
	// knows the incarnation was synced (the partitions manifest records
	// its synced end, or the journal holds entries written once its
	// layout was durable), is reported (a *CorruptError) and the
	// directory kept (package partition, incarnationLost). What remains:
	// the proof itself lied about too — a lie on a file outside the
	// partitions' directories (the manifest rolled back to a copy without
	// the end, the journal cut) — and the directory reads as half-built:
	// Build starts it over, or the orphan sweep removes it, its
	// acknowledged messages deleted. Classified only when a lie touched
	// both the incarnation file and a file outside the directories.
	knownIncarnationDamage = "a damaged incarnation file, and a lie on the manifest or journal that proved the incarnation synced: the directory reads as half-built, removed or rebuilt empty"
	// knownJournalDamage: the journal's synced-end mark (package
	// partition, journal_mark.go) records how far each journal file was
	// synced, and a file found shorter is reported and fences the
	// partitions; but the mark lags by up to two synced writes (one is
	// inherent with one flush per write; the second is the price of
	// starting the mark's write rather than waiting for it: see the
	// window in journal_mark.go), so a lie that cuts, rolls back or
	// misdirects only the journal's last synced writes before a crash
	// reads as a torn tail.
	// Classified only for a lie on a journal file from a byte at or past
	// the end the mark records for it at the time (lies.journalHit).
	knownJournalDamage = "a lie on the journal's last synced writes, past the end its synced-end mark records (the mark's window of up to two writes): their frames read as a torn tail, their acknowledged messages lost"
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
	// a copy only when its raft log is tagged with the incarnation the
	// metadata names, and this one's names the dead one. The node then
	// reports its replica for a re-seed (a new raft id, the copy set
	// aside whole), which the group's leader carries out; a group that
	// cannot elect without this replica (two voters) never does, and the
	// frames for it stay parked on that node (invariant 4). Classified
	// only when every parked frame is on the liar, for such a partition.
	// Cluster seed 419 of 0-499 (before the re-seed existed).
	knownDeadIncarnationDamage = "a dead incarnation's damaged incarnation file blocks the next incarnation's builds on the liar (its raft log names the dead one, so it is not repaired): frames for it stay parked"
	// knownRaftLogMarkRollback: a lie cut or rolled back a replica's
	// raft log below the size its sync mark records — which the mark
	// reports — and, at a later power loss, before any build had read
	// the cut log and refused it on disk, a second lie rolled the mark
	// itself back to an older copy that does not reach the cut
	// (lies.raftMarkHit): the node lost power again before its
	// reconciler built the partition, or before the refusal's record was
	// synced. The log and its mark then read as an older log that was
	// never cut: the mark and the log rolled back together, which package
	// replica's mark.go says no mark catches (a disk restored from a
	// backup reads the same). The replica is built under its raft id
	// without entries it acknowledged. A log
	// the build refused is recorded on disk at once
	// (shard.RefuseRaftLog: the log and its mark set aside in
	// raft-refused, synced before the re-seed is reported), and every
	// later build refuses the replica whatever the mark says: cluster
	// seed 1901, where n2's raft log of 0/0/1 was cut from 475 to 236
	// bytes and refused at 3.76 s ("ends at byte 190, but 475 bytes of
	// it were synced"), n2 lost power 13 ms later and a lie restored an
	// older copy of the mark, used to build the log under the same raft
	// id, be elected and write offset 0 anew where another replica held
	// the batch (invariant 3 at the append), when the refusal lived in
	// memory only (the re-seed proposal the power loss dropped); it now
	// passes (the record refuses every later build, and the rollback
	// finds no mark at the log's name). Classified only for replicas of
	// such an incarnation disagreeing at an append (invariant 3); no
	// seed is known to reach it since the record.
	knownRaftLogMarkRollback = "a lie cut a raft log below its sync mark and, before a build refused the cut log on disk, another rolled the mark back to an older copy short of the cut: the log and its mark read as an older whole log, and the replica forgets entries it acknowledged"
	// knownUnownedSoleLog: a lie cut a raft log below its first record
	// (where its incarnation tag is) in a partition directory, another
	// left its sync mark with no valid slot (cut short, or both slots
	// hit), and the next incarnation placed there has its only replica
	// on the liar. The mark names the log's tag too (package replica,
	// mark.go), so a log cut below its tag alone still says whose it was
	// (replica.OwnerTag): an earlier incarnation's is discarded by the
	// next incarnation's build, and the incarnation's own is refused
	// (TestRaftLogCutBelowItsTag in package shard). With the mark
	// unreadable too, nothing says whose the log was: it may be the
	// incarnation's own, cut after it acknowledged writes, and with no
	// other replica there is nothing to re-seed from. The build refuses
	// the directory (a damaged mark is damage) and reports it on every
	// pass; the partition stays down until an operator sets the
	// directory aside — never served empty. Classified only when every
	// partition built nowhere has its only replica on the liar and lies
	// touched both that directory's raft log and its mark (invariant 3).
	// Before the mark carried the tag, a lie on the log alone did it
	// (cluster seeds 273 and 64 on intermediate trees).
	knownUnownedSoleLog = "lies cut a raft log below its incarnation tag and left its sync mark unreadable, where the next incarnation's only replica is the liar's: whose log it was cannot be told, so the build refuses the directory and the partition stays down"
	// knownTwoVoterReseed: the same cut log as knownUnownedSoleLog (its
	// sync mark left unreadable too), in a directory where the next
	// incarnation has two replicas, one of them the liar's. Its owner
	// cannot be told either, so the liar does not
	// build its replica under its raft id; it sets the directory aside
	// and reports the replica for a re-seed (a new raft id on the same
	// node, ReseedReplica), a move the group must commit. But the group
	// has two voters, the liar's one of them: without it there is no
	// majority to elect a leader or commit the change, and none is safe
	// to invent (the liar's copy may be the one that acknowledged). The
	// move never settles and the partition serves nothing. Issue 28's
	// rule repairs a replica only while a majority holds an intact copy,
	// which one of two is not. With the mark readable the log's tag is
	// known (replica.OwnerTag), a dead incarnation's log is discarded and
	// the replica built under its own raft id: seed 21633 found this
	// before the mark named the tag, and passes since. Classified only when
	// every unsettled move is such a re-seed: one replica leaving, on
	// the liar, replaced on the liar, in a group of two, whose directory's
	// raft log and sync mark lies touched (invariant 7). Cluster seed 21633: a lie
	// cut the log of an early incarnation of 0/0/0 at 0.33 s; the one
	// created at revision 16, replicas on n1 and n2, was refused on n1 at
	// 8.03 s ("raft log ends at byte 0, but 97 bytes of it were synced"),
	// and n2 asked n1's old replica for its vote until the end.
	//
	// The same route with no lie on the log: a mark a lie cut short, in a
	// directory whose log holds no tag, is refused as the cut log is (a
	// mark cut short keeps one slot, which may be the older: the newer
	// may have named this incarnation's tag and a synced size the log no
	// longer reaches — cluster seed 555's lost acknowledgements, package
	// replica, readMark), so whose the log was cannot be told either.
	// Classified when the mark is, on the liar's disk, unreadable
	// (ccheck.go, markUnreadable), with or without a lie on the log; a
	// mark that only read as damaged (a flip on read) is not. Cluster
	// seed 2461: on n3, a torn write at 2.14 s and the power loss at
	// 2.18 s left incarnation 11's raft log of 0/0/1 empty (none of it,
	// its tag included, had been synced), and a lie while n3 was down cut
	// its mark from 609 to 291 bytes (slot 0 left: seq 1, size 0, no
	// tag). Nothing was lost, but nothing on the disk says so: every
	// build there was refused ("291 bytes: not a mark file's size"), the
	// incarnation created at revision 21 with replicas on n2 and n3 was
	// refused on n3 too and re-seeded at 7.56 s, and n2 asked n3's old
	// replica for its pre-vote until the end. The run's flips on read
	// hit the zero padding after slot 0's record in 0/0/0's mark, which
	// a read ignores: they refused nothing. (The slot left was the
	// mark's creation record, which the mark's next write, seq 2, would
	// have overwritten in place: a reader could take it for proof that
	// the cut slot held nothing newer, but only if every write of the
	// mark landed where it was aimed, and a misdirected write is a lie
	// the disk tells; so the replica does not.)
	knownTwoVoterReseed = "a lie left a raft log's owner unknown (the log cut below its incarnation tag, or its sync mark cut short) where the next incarnation has two replicas, one the liar's: the liar re-seeds its replica, and the group of two voters cannot commit the move without it"
)

package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// Damage in a replica. A replicated partition's messages are held by
// every replica of its group, so a replica that finds its own copy damaged
// on disk (a *partition.CorruptError: a record that fails its checksum
// with whole records after it, a segment cut short or missing) is not left
// serving around the damage, as a single node is: it is repaired from its
// peers. The raft log — the replica's term, vote and acknowledged entries
// — is a separate file and stays; only the partition log is fetched again.
//
//   - Found by a read here (a poll, a catch-up fetch served to a peer,
//     an append the damage refuses), replicaDamaged reports it, a leader
//     hands leadership to a peer first, and the partition is fenced as
//     damaged (State.Damaged).
//   - The reconciler evicts it, sets its files aside (the store's
//     SetAside keeps the raft log, RaftLogName) and builds it again,
//     empty; damage found when the partition is built (a restart, the
//     rebuild) is set aside the same way. A damaged incarnation file
//     is set aside too and rewritten from the metadata, but only when
//     the raft log is tagged with that incarnation (tagRaftLog,
//     RaftLogOf): the raft state kept must be this group's. A raft log
//     that does not prove it (damaged too, untagged, another
//     incarnation's) gets the replica re-seeded under a new raft id, as
//     a damaged raft log does (below), and the whole copy set aside.
//   - replicate restores the group from the raft log: the snapshot's
//     state says how far the partition log reached, so the replica
//     fetches the messages from its peers (catchup.go) and re-applies the
//     raft log's entries after it, as a replica that installed a leader's
//     snapshot does. It does not campaign at once as the preferred
//     leader while it fetches (replicate's elect), but it may still
//     campaign later and be elected: its raft log is whole. A leader
//     still fetching applies nothing (the entries wait behind the
//     fetch) and serves no leader read until its log is whole.
//
// No offset is given out again: offsets are the group's (the replicated
// cursor), not the local log's. A damaged raft log is not repaired this
// way (what the replica promised its group is lost with it): replicate
// refuses the group with the *partition.CorruptError naming the raft log
// (a replica built deferred, whose directory holds its raft log and no
// file of its own, gets that error from its build already, which reads
// the log's tag: partition.FileConfig.OwnerIncarnation).
// That includes a raft log cut short or rolled back after it was synced,
// which its sync mark (RaftMarkName, package replica) tells from a torn
// tail. Such a replica is re-seeded instead, under a new raft id.
//
// Why a replica whose raft log is damaged is re-seeded under a new raft
// id. Rejoining with the same id and an empty (or shortened) log is
// unsafe: before the damage the member may have voted in term T for one
// candidate, and empty it may vote in T again for another, so two
// leaders can be elected in T; and entries it acknowledged, counted in a
// commit quorum, are forgotten, so a later quorum it joins may elect a
// leader that lacks a committed entry. Removing it and adding it back
// under the same id does not close the first hole in etcd raft: nothing
// tells a vote request of a term the old member voted in from one of a
// later term. So the new copy gets a raft id the group never had, as
// etcd's member ids and CockroachDB's replica ids are: a replica's raft
// id encodes its node and a per-partition generation (internal/raftid;
// generation 0 is the node id, so data written before replica ids keeps
// its ids), and the metadata allocates the next generation
// (metadata.ReseedReplica, reported by the node's reconciler: RaftLogLost,
// reconciler.Config.Reseed). The node's old copy is set aside whole, raft
// log included, and the new replica starts empty; the group's leader
// moves it in as any newcomer (move.go: a learner, sent a snapshot and
// the partition log, promoted once whole), then removes the old id. A
// message to the old id reaching the node is refused by the new
// replica's raft (it names its recipient), and a raft log is taken only
// by the replica id it is tagged with (tagRaftLog). The group runs on its
// other members meanwhile, as it did while the copy was refused.

// RaftLogName is the name of a replicated partition's raft log in the
// partition's directory, and RaftMarkName its sync mark's (how far the
// log was synced, replica.MarkName): what a repair of the partition log
// keeps.
const (
	RaftLogName  = raftLogName
	RaftMarkName = raftLogName + replica.MarkSuffix
)

// tagRaftLog binds disk, the raft log of the incarnation epoch of a
// replicated partition, to that incarnation and to the raft id of the
// replica that writes it (replica.Disk.SetTag; the tag is the epoch then
// the id, 8 bytes each, little endian): a log without a tag (new, or
// written before logs were tagged) is tagged now (the partition's build
// has just read its incarnation file and found epoch); a log tagged with
// another incarnation, or with another replica's id, is refused as
// damage — raft state of another group must never be taken for this
// one's, nor another replica's term, vote and acknowledged entries for
// this replica's (a re-seeded replica has a new id, internal/raftid, and
// a log of the id it had must not come back under the new one). A log
// tagged before tags named the replica (the epoch alone) was written by
// the replica of generation 0, whose id is the node id: it is taken by
// that id only, and tagged with it.
func tagRaftLog(disk *replica.Disk, epoch, id uint64) error {
	tag := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, epoch), id)
	have := disk.Tag()
	switch {
	case have == nil:
		return disk.SetTag(tag)
	case len(have) == 8 && binary.LittleEndian.Uint64(have) == epoch && raftid.Gen(id) == 0:
		return disk.SetTag(tag)
	case len(have) == 8 && binary.LittleEndian.Uint64(have) == epoch:
		return &partition.CorruptError{Path: disk.Path(), Err: fmt.Errorf("raft log of the replica %#x of incarnation %d opened by replica %#x", raftid.Node(id), epoch, id)}
	case len(have) == 16 && binary.LittleEndian.Uint64(have) == epoch && binary.LittleEndian.Uint64(have[8:]) != id:
		return &partition.CorruptError{Path: disk.Path(), Err: fmt.Errorf("raft log of the replica %#x of incarnation %d opened by replica %#x", binary.LittleEndian.Uint64(have[8:]), epoch, id)}
	case len(have) != 16 || binary.LittleEndian.Uint64(have) != epoch:
		return &partition.CorruptError{Path: disk.Path(), Err: fmt.Errorf("raft log tagged %x in the directory of incarnation %d", have, epoch)}
	}
	return nil
}

// RaftRefusedName is the directory, inside a replicated partition's
// directory, that a raft log refused as damaged is moved into with its
// sync mark, under their own names (RefuseRaftLog): the durable record
// that the replica lost its raft log.
const RaftRefusedName = "raft-refused"

// ErrRaftLogRefused is the damage of a replica whose raft log was
// refused before and set aside (RaftRefusedName): whatever the
// directory holds now, the replica waits to be re-seeded under a new
// raft id. The error wraps it and a *partition.CorruptError naming
// RaftRefusedName (so RaftLogLost holds).
var ErrRaftLogRefused = errors.New("parkway: raft log refused before and set aside; the replica waits to be re-seeded")

// RefuseRaftLog records on disk, at once, that the raft log in dir (a
// replicated partition's directory) was refused: if one of causes (the
// build's failure, what reading the log found) is damage read from the
// log or its sync mark (replica.ErrCorruptLog), or the record itself,
// the directory RaftRefusedName is created and synced — from then on
// every build of the replica in dir is refused (ErrRaftLogRefused)
// whatever the log reads — and the log and its mark are moved into it.
// It returns that directory ("" if no cause is such damage); nil error
// means the refusal is durable. An error means it may not be: the next
// build, which finds the damage again, is refused again, and the call
// made for it completes what a crash or an error interrupted.
//
// Why. Refused in memory only (the re-seed report to the metadata, a
// proposal a power loss drops), the refusal rested on the damage staying
// visible: a later lie that rolled the sync mark back to an older copy
// short of the cut made the cut log read as an older whole log, and the
// replica was built under its raft id without entries it had
// acknowledged, elected, and wrote an acknowledged offset anew
// (simulator cluster seed 1901). The mark cannot catch a log and mark
// rolled back together (package replica, mark.go); a record that the log
// was refused, made durable before anything else happens, can: no
// restart builds a replica from a log it once refused.
//
// What is kept. The damaged log and its mark, whole, for an operator:
// never deleted here. At most one refused log per directory: the first
// refusal's (a file already in RaftRefusedName is never replaced, and no
// build writes a new log beside the record). The re-seed sets the
// directory aside whole, RaftRefusedName with it (partition.FileStore's
// damaged-N, deleted with the partition), so the bytes kept per refusal
// are one raft log's, as for any replica set aside.
func RefuseRaftLog(fsys vfs.FS, dir string, causes ...error) (string, error) {
	if !slices.ContainsFunc(causes, refusable) {
		return "", nil
	}
	q := filepath.Join(dir, RaftRefusedName)
	if err := fsys.MkdirAll(q, 0o755); err != nil {
		return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
	}
	// The record: durable before the files move (a crash between leaves
	// the record with the damaged files in place, refused all the same).
	if err := fsys.SyncDir(dir); err != nil {
		return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
	}
	for _, name := range []string{RaftLogName, RaftMarkName} {
		from, to := filepath.Join(dir, name), filepath.Join(q, name)
		if _, err := fsys.Stat(from); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
		}
		if _, err := fsys.Stat(to); err == nil {
			continue // the first refusal's copy is kept; this one goes aside with the re-seed
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
		}
		if err := fsys.Rename(from, to); err != nil {
			return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
		}
	}
	if err := fsys.SyncDir(q); err != nil {
		return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return "", fmt.Errorf("refusing raft log %s: %w", dir, err)
	}
	return q, nil
}

// refusable reports whether err is damage read from a raft log or its
// sync mark (a *partition.CorruptError whose detail is
// replica.ErrCorruptLog), or the record of a log refused before. Not a
// log refused for its tag (tagRaftLog): that one is whole, and may be a
// newer replica's than the metadata names yet.
func refusable(err error) bool {
	if errors.Is(err, ErrRaftLogRefused) {
		return true
	}
	var ce *partition.CorruptError
	return errors.As(err, &ce) && errors.Is(ce.Err, replica.ErrCorruptLog)
}

// raftLogRefused returns the damage of a replica whose raft log in dir
// was refused before (RefuseRaftLog): ErrRaftLogRefused and a
// *partition.CorruptError naming RaftRefusedName; nil if there is no
// such record. A failed look is returned as it is: the build fails, and
// is retried, rather than taking a log that may have been refused.
func raftLogRefused(fsys vfs.FS, dir string) error {
	q := filepath.Join(dir, RaftRefusedName)
	_, err := fsys.Stat(q)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("raft log %s: %w", dir, err)
	}
	return fmt.Errorf("%w: %w", ErrRaftLogRefused,
		&partition.CorruptError{Path: q, Err: errors.New("the raft log was refused as damaged and set aside here")})
}

// RaftLogLost reports whether err, a replicated partition's build
// failure, is damage to its raft log (or its sync mark): a
// *partition.CorruptError naming one, or the record that one was
// refused before (RaftRefusedName). The replica has then lost what it
// promised its group, and only a replica under a new raft id may take
// its place (metadata.ReseedReplica).
func RaftLogLost(err error) bool {
	var ce *partition.CorruptError
	if !errors.As(err, &ce) {
		return false
	}
	switch filepath.Base(ce.Path) {
	case RaftLogName, RaftMarkName, RaftRefusedName:
		return true
	}
	return false
}

// RaftLog is what RaftLogOf found in a replicated partition's directory.
type RaftLog struct {
	// Held reports raft state: a raft log holding a snapshot, a hard
	// state or an entry. Without it the member never took part in its
	// group from this directory: no term, vote or acknowledged entry to
	// lose or to mistake for another incarnation's.
	Held bool
	// Tagged reports that the log names its incarnation, Incarnation,
	// and Replica the raft id of the replica that wrote it (0 in a log
	// tagged before tags named the replica: the node's generation 0).
	Tagged      bool
	Incarnation uint64
	Replica     uint64
}

// RaftLogOf reads the raft log in dir, a replicated partition's
// directory, without changing anything: whether it holds raft state, and
// the incarnation it is tagged with (see tagRaftLog). A missing log holds
// nothing; err is the log's damage or read error. With damage (a
// *partition.CorruptError), the RaftLog still reports the tag its sync
// mark names, or else the one the log's valid prefix holds
// (replica.OwnerTag), if any, and Held false: whose log it was, though
// not what it held. The mark's tag survives a cut of the log below its
// tag record: a build of a later incarnation then still knows the log
// for an earlier one's and discards the directory, and a build of the
// log's own incarnation is refused (partition.FileConfig.OwnerIncarnation;
// synced bytes are missing) rather than served empty.
//
// Why. A repair whose partition's incarnation file is damaged keeps the
// raft log — the member's term, vote and acknowledged entries — only if
// the log itself says it belongs to the incarnation the metadata names:
// a directory left by an earlier incarnation of the same namespace holds
// another group's raft state.
func RaftLogOf(fsys vfs.FS, dir string) (RaftLog, error) {
	if err := raftLogRefused(fsys, dir); err != nil {
		// Refused before: whose it was is the refused log's (its mark's
		// tag, or its prefix's), or, if a crash left it in place beside
		// the record, the log's still in dir.
		var l RaftLog
		if errors.Is(err, partition.ErrCorrupt) {
			for _, d := range []string{filepath.Join(dir, RaftRefusedName), dir} {
				if tag, terr := replica.OwnerTag(fsys, filepath.Join(d, raftLogName)); terr == nil && tag != nil {
					l.tag(tag)
					break
				}
			}
		}
		return l, err
	}
	d, err := replica.ReadDisk(fsys, filepath.Join(dir, raftLogName))
	if errors.Is(err, fs.ErrNotExist) {
		return RaftLog{}, nil
	}
	if err != nil {
		err = raftLogDamage(err)
		var l RaftLog
		if errors.Is(err, partition.ErrCorrupt) {
			if tag, terr := replica.OwnerTag(fsys, filepath.Join(dir, raftLogName)); terr == nil {
				l.tag(tag)
			}
		}
		return l, err
	}
	defer d.Close()
	rec := d.Recovered()
	l := RaftLog{Held: !rec.Empty()}
	l.tag(d.Tag())
	return l, nil
}

// tag records what tag (tagRaftLog) names.
func (l *RaftLog) tag(tag []byte) {
	switch len(tag) {
	case 8:
		l.Tagged, l.Incarnation = true, binary.LittleEndian.Uint64(tag)
	case 16:
		l.Tagged, l.Incarnation, l.Replica = true, binary.LittleEndian.Uint64(tag), binary.LittleEndian.Uint64(tag[8:])
	}
}

// replicaDamaged takes damage found at run time in the local copy of
// replicated partition o (see above). A leader transfers leadership to
// another voter first, so the group is led by a whole replica while this
// one is repaired.
func (rg *raftGroups) replicaDamaged(o *owned, err error) {
	if !repairable(o) || o.damaged != nil || !errors.Is(err, partition.ErrCorrupt) {
		return
	}
	rg.log.Error("replica damaged on disk; it is fenced and will be fetched again from its peers", "ns", o.p.Namespace(), "error", err)
	o.damaged = err
	if o.rep.grp.IsLeader() {
		rg.stepDown(o)
	}
	if o.failed == nil {
		rg.owner.fence(o, err)
	}
}

// errReplaced fences a replica whose node's metadata names a newer
// replica of the partition here (replaced): the reconciler evicts it and
// builds the new one (State.Replaced).
var errReplaced = errors.New("parkway: replica replaced by a newer one on this node")

// replaced takes a replica the metadata replaced while it ran: o runs
// under a raft id that info, o's committed partition, no longer names for
// this node, which it names a replica of a later generation instead
// (metadata.ReseedReplica). o is fenced (errReplaced) so the reconciler
// evicts it, sets its copy aside whole and builds the new replica (the
// reconciler's reseed); a leader hands leadership to another voter
// first. It reports whether o is fenced as replaced.
//
// Why. The node reports a raft log it read as damaged for a new raft id,
// and the report commits later, when it commits: meanwhile a build may
// have read the log whole (the read lied, or met a transient error) and
// the replica runs again under its id. Its copy is then one the metadata
// has replaced: the group's leader adds the new id as a learner and
// waits for it to catch up, and the old replica leaves only once the new
// one is a whole voter — but a shard holds one replica of a partition,
// and this one, left running, held the new one off for good: the move
// never settled, and the group stayed one whole voter short (cluster
// seed 3625). A restarted node finds the same on its build (the raft
// log's tag names the old id, tagRaftLog), and the reconciler replaces
// the copy the same way.
func (rg *raftGroups) replaced(o *owned, info metadata.PartitionInfo) bool {
	if o.failed != nil {
		return errors.Is(o.failed, errReplaced)
	}
	if o.rep.grp == nil || info.CreatedRevision != o.p.Epoch() || !replacedIn(info, o.rep.id) {
		return false
	}
	id, _ := info.ReplicaOf(rg.cfg.Node)
	rg.log.Warn("replica replaced by a newer one on this node; it is fenced and the new replica built", "ns", o.p.Namespace(), "replica", o.rep.id, "new", id)
	if o.rep.grp.IsLeader() {
		rg.stepDown(o)
	}
	rg.owner.fence(o, fmt.Errorf("%w: %#x by %#x", errReplaced, o.rep.id, id))
	return true
}

// repairable reports whether o is a replica its group can repair: a
// group with other members. A partition replicated once (a group of one)
// is served around its damage, as on a single node. A learner's peers
// are the voters and need not include it (sendFetch): one moving a
// one-replica partition has the old replica to be repaired from.
func repairable(o *owned) bool { return o.rep.grp != nil && hasOtherPeer(o) }

// hasOtherPeer reports whether o's peers name a replica other than o.
func hasOtherPeer(o *owned) bool {
	return slices.ContainsFunc(o.rep.peers, func(p uint64) bool { return p != o.rep.id })
}

// stepDown asks another voter of o's group, one liveness does not report
// down, to take leadership over (raft's leadership transfer).
func (rg *raftGroups) stepDown(o *owned) {
	self := o.rep.id
	for _, v := range o.rep.grp.Voters() {
		if v == self || !rg.q.down.Live(v) {
			continue
		}
		if err := o.rep.grp.TransferLeader(v); err != nil {
			rg.log.Warn("handing leadership of a damaged replica over failed", "ns", o.p.Namespace(), "to", v, "error", err)
			return
		}
		rg.m.LeaderTransfers.Inc()
		rg.markReady(o)
		return
	}
}

// damagedRead is the answer to a read of o whose partition answered err:
// damage met by a read of a replicated partition is taken as
// replicaDamaged, and the read is answered as by a replica that cannot
// serve it — a leader read is retried (the group gets another leader), a
// local read gets ErrPartitionFailed wrapping the *partition.CorruptError.
func (s *Shard) damagedRead(o *owned, f Frame, err error) error {
	if !repairable(o) || err == nil || !errors.Is(err, partition.ErrCorrupt) {
		return err
	}
	s.rg.replicaDamaged(o, err)
	if f.Req.FromLeader {
		if lead := o.rep.grp.Leader(); lead != 0 && lead != o.rep.id {
			return &NotLeaderError{Leader: raftid.Node(lead)}
		}
		return errNoLeader
	}
	return fmt.Errorf("%w: %v: %w", ErrPartitionFailed, o.p.Namespace(), err)
}

// stoppedAt returns the damage a read of p stopped below: n messages read
// from from, of count asked, below the partition's end. A partition's
// Read serves the messages below damage and leaves the damage to the read
// that starts at it; a replica its group can repair must not answer such
// a read short as if it were whole — nothing may then ever read the
// damaged offset on this replica, which would stay short of its group's
// log for good, without an error. The damage is read here so the caller
// takes it (damagedRead: the replica is fenced and fetched again from its
// peers). nil if the read was whole.
func stoppedAt(p partition.Partition, from uint64, n, count int) error {
	next := from + uint64(n)
	if n >= count || next >= p.NextOffset() {
		return nil
	}
	_, err := p.Read(next, 1)
	return err
}

// toGroup answers f, a request to damaged replica o that waits for its
// repair (or to one replaced, waiting for the new replica), if it is one
// the group serves: a write or a leader read goes to the group's leader
// ("not leader", or "retry here" until another one is known), as on any
// follower. A local read is not answered here: it gets the damage. It
// reports whether f was answered.
func (s *Shard) toGroup(o *owned, f Frame) bool {
	if (o.damaged == nil && !errors.Is(o.failed, errReplaced)) || o.rep.grp == nil {
		return false
	}
	if !f.Req.Op.IsWrite() && !f.Req.FromLeader {
		return false
	}
	s.rg.notLeader(o, f)
	return true
}

// raftLogDamage is the error of a raft log that cannot be opened: a
// damaged one is reported as the *partition.CorruptError every other
// damaged file of a partition is (naming the raft log and the byte
// offset), wrapping the replica's ErrCorruptLog.
func raftLogDamage(err error) error {
	var we *wal.CorruptError
	if errors.As(err, &we) {
		return &partition.CorruptError{Path: we.Path, Offset: we.Offset, Err: err}
	}
	return err
}

// answerBuildFailed answers ns's parked frames after its build failed
// with cause (VerdictBuildFailed). In a cluster, a replica that cannot be
// built for damage on its disk (a damaged raft log) is one replica of a
// group that serves without it: writes and leader reads are sent to
// another replica, as for a partition this node holds no replica of.
// Local reads, and every request on a single node, get the cause.
func (s *Shard) answerBuildFailed(ns metadata.Namespace, cause error) {
	q := s.park.take(ns)
	if q == nil {
		return
	}
	err := buildFailedAnswer(ns, cause)
	var peers []uint64
	if r := s.cfg.Replication; r != nil && errors.Is(cause, partition.ErrCorrupt) {
		if info, ok := s.meta.Partition(ns); ok {
			peers = info.Replicas
			if len(peers) == 0 {
				peers = r.Peers
			}
			peers = slices.DeleteFunc(slices.Clone(peers), func(id uint64) bool { return raftid.Node(id) == r.Node })
		}
	}
	for q.len() > 0 {
		f := q.pop().frame
		switch {
		case len(peers) == 0 || f.Req.Op == OpRaft || f.Req.Op == OpCatchUp:
		case f.Req.FromLeader, f.Req.Op.IsWrite():
			s.answer(f, Response{Err: &NotLeaderError{Leader: raftid.Node(s.rg.replicaHint(peers))}})
			continue
		}
		s.drop(f, metrics.ReasonBuildFailed, err)
	}
	s.gauges()
}

// writesRefused answers f, a write proposed on leader o, if o's partition
// refuses appends for damage at its end (partition.WriteFenced): proposed,
// the write would commit and then fail to apply on this replica, at every
// rebuild. A replica the group can repair takes it as replicaDamaged and
// sends f to the group; a partition replicated once refuses f with the
// damage, as a single node does. It reports whether f was answered.
func (rg *raftGroups) writesRefused(o *owned, f Frame) bool {
	if f.Req.Op != OpProduce {
		return false
	}
	w, ok := o.p.(partition.WriteFenced)
	if !ok {
		return false
	}
	err := w.WritesRefused()
	if err == nil {
		return false
	}
	if repairable(o) {
		rg.replicaDamaged(o, err)
		rg.notLeader(o, f)
		return true
	}
	rg.owner.answer(f, Response{Err: err})
	return true
}

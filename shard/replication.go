package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/dedupe"
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// Replication makes every partition this shard owns a member of a raft
// group spanning the nodes (multi-raft: one group per partition, all driven
// from this pump). Nil Config.Replication means a single node.
type Replication struct {
	// Node is this node's id; Peers every node's id (this one included).
	// A partition's group spans the nodes its metadata places it on
	// (metadata.PartitionInfo.Replicas), or every peer for a partition
	// placed before placement existed.
	Node  uint64
	Peers []uint64
	// Send hands a raft message of the partition (ns, epoch) to the
	// transport, for node to (the node of the message's recipient, whose
	// raft id may name a later replica generation: internal/raftid). It
	// must not block; a message it loses is re-sent by raft.
	Send func(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message)
	// TickInterval is the raft tick (default 10 ms); a leader is elected
	// within ElectionTicks..2·ElectionTicks ticks of losing the last one
	// (default 10).
	TickInterval  time.Duration
	ElectionTicks int
	// SendCatchUp hands a catch-up message of the partition (ns, epoch) to
	// the transport: a replica that was sent a snapshot fetches the
	// messages it lacks from a peer's partition log with it. Delivered
	// messages enter the peer's shard as OpCatchUp frames. Like Send, it
	// must not block, and a loss is repaired by a re-fetch.
	SendCatchUp func(to uint64, ns metadata.Namespace, epoch uint64, payload []byte)
	// CompactEntries and CompactBytes bound a partition's raft log: once
	// this many entries (or payload bytes) were applied since the last
	// snapshot, the partition is synced and its log compacted behind a
	// snapshot (defaults 4096 and 16 MiB).
	CompactEntries uint64
	CompactBytes   int64
	// Flush, if set, is called at the end of every unit of pump work and
	// before every write of a raft log: Send may hold messages back until
	// then, to hand a peer the messages of many groups together (the
	// host coalesces them per node pair). Nil: Send sends at once.
	Flush func()
	// Quiesce stops ticking the groups with nothing to do (see
	// quiesce.go). Their failure detection is then the host's node
	// liveness, reported through Shard.SetPeerLive: a host that sets
	// Quiesce must report its peers' deaths, or a quiesced group whose
	// leader died never elects another.
	Quiesce bool
	// Settle, if set, proposes metadata.SettleReplicas for (ns, epoch,
	// node): the group's leader calls it once the group no longer
	// counts node, a replica a move took off the partition (move.go).
	// It must not block; a settle it loses is proposed again.
	Settle func(ns metadata.Namespace, epoch, node uint64)
	// LeaderChanged, if set, is called whenever the group of a partition
	// this node replicates learns of a new leader (lead), or that it has
	// none (0). It runs on the pump and must not block. The host re-sends
	// the waiting polls it forwarded to the old leader, which may never
	// answer them (a dead node, or one cut off that stepped down).
	LeaderChanged func(ns metadata.Namespace, lead uint64)
}

// Raft log defaults.
const (
	DefaultCompactEntries = 4096
	DefaultCompactBytes   = 16 << 20
	// raftLogName is the partition's raft log, kept in the partition's
	// directory so it is built, swept and removed with the partition.
	raftLogName = "raft.log"
)

// DefaultTickInterval is the raft tick of replicated partitions.
const DefaultTickInterval = 10 * time.Millisecond

var (
	// ErrNotLeader means "go elsewhere": this node does not lead the
	// partition. The error is a *NotLeaderError carrying the leader's id
	// when one is known. It never matches ErrRetry.
	ErrNotLeader = errors.New("parkway: not the leader")
	// ErrOutcomeUnknown answers a produce whose leader lost leadership
	// before the batch committed (the batch may still commit under the
	// new leader, or may be gone), or one whose write or group commit
	// failed after its records reached the log and could not be taken
	// back (they may survive a rebuild or a restart). It is deliberately
	// not retriable — a blind retry could apply the batch twice. Such an
	// answer never matches ErrRetry, whatever its cause (OutcomeUnknown).
	ErrOutcomeUnknown = errors.New("parkway: outcome unknown: the write may or may not have been applied")

	errNoLeader = fmt.Errorf("%w: partition has no leader yet", ErrRetry)
	// errTermFenced answers a write fenced to a term (Request.Term) that
	// this replica does not lead in.
	errTermFenced = fmt.Errorf("%w: not the leader in the term the write is fenced to", ErrNotLeader)
)

// OutcomeUnknown is the answer to a write that cause left of unknown
// outcome: it matches ErrOutcomeUnknown, and whatever cause matches but
// ErrRetry. "Retry" promises that the write was not applied, and an
// unknown outcome promises nothing: a replica removed while a proposal of
// its was in flight has a cause that says "retry here" (the partition is
// being torn down), yet the proposal may already sit in the other
// replicas' logs and commit there; a caller that took it for "not
// applied" would retry it twice or count it lost while it is served. So
// a cause matching ErrRetry keeps its text and loses its chain; any other
// (ErrClosed, a context's error, a disk's) is wrapped as it is.
func OutcomeUnknown(cause error) error {
	if errors.Is(cause, ErrRetry) {
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, cause)
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
}

// NotLeaderError is ErrNotLeader with the leader's node id (0: unknown).
type NotLeaderError struct{ Leader uint64 }

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("parkway: not the leader (leader is node %d)", e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// replicate makes o a raft group member of the nodes its metadata places
// it on. A partition kept in a directory
// keeps its raft log there: a restarted node restores the group from it —
// term, vote, the entries it acknowledged — and the partition's state from
// the log's snapshot, then re-applies the entries after the snapshot over
// what the partition log already holds (see applyOne). The preferred
// leader — a pure function of the namespace, so leadership spreads across
// nodes — campaigns at once instead of waiting out an election timeout;
// its votes may reach nodes that have not materialised the partition yet,
// where they park and are stepped once it lands.
func (rg *raftGroups) replicate(o *owned) error {
	r := rg.cfg
	ns := o.p.Namespace()
	info, _ := rg.meta.Partition(ns)
	id := rg.replicaID(info)
	var disk *replica.Disk
	fsys, dir, onDisk, err := raftLogDir(o)
	if err != nil {
		return err
	}
	if onDisk {
		// A log refused before is never opened again, whatever it reads
		// now (RefuseRaftLog).
		if err := raftLogRefused(fsys, dir); err != nil {
			return err
		}
		if disk, err = replica.OpenDisk(fsys, filepath.Join(dir, raftLogName), o.dur.always()); err != nil {
			return raftLogDamage(err)
		}
		if err := tagRaftLog(disk, o.p.Epoch(), id); err != nil {
			_ = disk.Close()
			return err
		}
	}
	o.rep.peers, o.rep.placed = rg.peersOf(info), len(info.Replicas) > 0
	// A placed group's membership changes as its replicas move: a
	// replica a move added after the partition was created joins empty
	// and waits for the leader's snapshot (see move.go).
	joins := o.rep.placed && info.Joins(id)
	voters := o.rep.peers
	if o.rep.placed && !joins && len(info.Joined) > 0 {
		voters, joins = foundingVoters(info)
	}
	g, err := replica.New(replica.Config{
		Group: uint64(ns), Node: id, Peers: voters, Dynamic: o.rep.placed, Join: joins,
		ElectionTicks: r.ElectionTicks, Logger: rg.log, Disk: disk,
		Metrics: rg.m.Raft, Clock: rg.clock, Fsync: rg.m.RaftSyncs,
		// A peer's snapshot that ApplySnapshot would refuse is an invalid
		// message, not a failed group.
		CheckSnapshot: func(b []byte) error { _, err := decodeState(b); return err },
	})
	if err != nil {
		if disk != nil {
			_ = disk.Close()
		}
		return err
	}
	snapIndex, data := g.Snapshot()
	st, err := decodeState(data)
	if err != nil {
		_ = g.Close()
		return fmt.Errorf("partition %v: raft snapshot: %w", ns, err)
	}
	o.rep.grp, o.rep.id = g, id
	o.rep.restore(st)
	if o.p.NextOffset() < o.rep.cursor {
		// The snapshot says the partition holds more than it does (it was
		// lost, or a catch-up was interrupted): fetch the rest first.
		rg.startCatchUp(o, o.rep.cursor)
	} else if snapIndex > 0 {
		// The partition may not hold the snapshot's state: installing a
		// leader's snapshot can fail while settling it (a consumer
		// offset's write met EIO) after raft persisted the snapshot, and
		// the group is then rebuilt from here. Settle it again (settle
		// writes only what differs); the entries after the snapshot are
		// applied again over it. Without this, the rebuilt replica
		// answered "not found" for a consumer offset its peers held
		// (simulator cluster seed 1609).
		if err := o.settle(); err != nil {
			o.rep.grp = nil
			_ = g.Close()
			return fmt.Errorf("partition %v: settling the raft snapshot's state: %w", ns, err)
		}
	}
	rg.refreshPeers(o)
	// Many new groups at once campaign a bounded number at a time
	// (converge.go); a joining member never campaigns before it holds
	// the leader's snapshot (it has no voters until then). One restarted
	// after taking it is a member like any other: the metadata keeps it
	// in Joined for as long as it holds the replica, and it may be the
	// preferred leader, or the only replica left.
	// A replica fetching its partition log (a repaired one, damage.go)
	// does not campaign: it would lead with nothing to serve.
	elect := len(g.Voters()) > 0 && preferredLeader(ns, o.rep.peers, o.rep.placed) == o.rep.id && o.rep.catchup == nil
	campaigned := elect && rg.elect.Room()
	first := g.Term() <= 1 // a new group starts at term 1, its log only the initial snapshot
	if campaigned {
		if err := g.Campaign(); err != nil {
			o.rep.grp = nil
			_ = g.Close()
			return err
		}
	}
	rg.replicated[ns] = o
	rg.setLeader(o, g.Leader())
	// Held or queued first (admitNew), so that markReady does not add a
	// group that waits for its leader or its turn to the awake set.
	rg.admitNew(o, elect, campaigned, first)
	rg.markReady(o)
	rg.armTick()
	return nil
}

// raftLogDir returns the directory o's raft log lives in, its
// partition's (ok false: a partition kept in memory, whose raft log is
// too). The raft log holds every entry since its last snapshot, and a
// compaction syncs the partition first: so a partition built deferred
// (partition.FileStore.BuildDeferred) gets its directory only, the
// raft log is the one file on the path to its first acknowledgement,
// and the partition's own files are created when it needs them (DESIGN
// behaviour 32). Under FsyncAlways the directory is made durable first:
// the log's fsyncs mean nothing while its directory entry may be lost.
func raftLogDir(o *owned) (vfs.FS, string, bool, error) {
	if l, ok := o.p.(partition.Lodger); ok {
		fsys, dir, err := l.Lodge(o.dur.always())
		return fsys, dir, err == nil, err
	}
	if loc, ok := o.p.(partition.Located); ok {
		fsys, dir := loc.Location()
		if o.dur.always() {
			if err := o.p.Sync(); err != nil {
				return nil, "", false, err
			}
		}
		return fsys, dir, true, nil
	}
	return nil, "", false, nil
}

// unreplicate drops o's group; its waiting produces are answered. The
// raft log is synced (unless the policy is never, but for the shard's
// Close, which fsyncs whatever the policy: a partition built deferred
// leaves the records it holds to its raft log, partition.Lodger) and
// closed.
func (rg *raftGroups) unreplicate(o *owned, err error) {
	if o.rep.grp == nil {
		return
	}
	delete(rg.replicated, o.p.Namespace())
	rg.q.awake.Remove(o.p.Namespace())
	// Proposed writes may have committed — and been applied on the other
	// replicas — already: their outcome is unknown, never "retry here".
	for id, fs := range o.rep.pending {
		for _, f := range fs {
			rg.owner.answer(f, Response{Err: OutcomeUnknown(err)})
		}
		delete(o.rep.pending, id)
	}
	rg.dropReads(o, err)
	rg.polls.dropWaiters(o, err, false)
	for _, f := range o.rep.proposeBuf { // never proposed: err holds
		rg.owner.answer(f, Response{Err: err})
	}
	o.rep.proposeBuf = nil
	if d := o.rep.grp.Disk(); d != nil && (o.dur.Fsync != metadata.FsyncNever || errors.Is(err, ErrClosed)) {
		if serr := d.Sync(); serr != nil {
			rg.log.Warn("syncing a raft log on close", "ns", o.p.Namespace(), "error", serr)
		}
	}
	if cerr := o.rep.grp.Close(); cerr != nil {
		rg.log.Warn("closing a raft log", "ns", o.p.Namespace(), "error", cerr)
	}
	o.rep.grp = nil
	o.rep.catchup = nil
	rg.setLeader(o, 0)
}

// setLeader records lead, a raft id, as o's leader where other
// goroutines read it (Leaders: its node), and keeps the partitions-led
// gauge: one for each group this node leads.
func (rg *raftGroups) setLeader(o *owned, lead uint64) {
	if o.rep.led != (lead == o.rep.id && lead != 0) {
		o.rep.led = !o.rep.led
		if o.rep.led {
			rg.m.Led.Inc()
		} else {
			rg.m.Led.Dec()
		}
	}
	ns := o.p.Namespace()
	rg.reindex(o, rg.leaders[ns], raftid.Node(lead)) // the pump writes leaders: its own read needs no lock
	rg.leadersMu.Lock()
	if lead == 0 {
		delete(rg.leaders, ns)
	} else {
		if rg.leaders == nil {
			rg.leaders = make(map[metadata.Namespace]uint64)
		}
		rg.leaders[ns] = raftid.Node(lead)
	}
	rg.leadersMu.Unlock()
}

// reindex moves o in byLeader from its leader's node was to is; a
// group no longer replicated (unreplicate) leaves the index.
func (rg *raftGroups) reindex(o *owned, was, is uint64) {
	if set := rg.byLeader[was]; set != nil {
		delete(set, o)
		if len(set) == 0 {
			delete(rg.byLeader, was)
		}
	}
	if o.rep.grp == nil {
		return
	}
	if rg.byLeader == nil {
		rg.byLeader = make(map[uint64]map[*owned]struct{})
	}
	set := rg.byLeader[is]
	if set == nil {
		set = make(map[*owned]struct{})
		rg.byLeader[is] = set
	}
	set[o] = struct{}{}
}

// Leaders adds to into every replicated partition of this shard whose
// leader this node knows, with that leader. Safe from any goroutine: it
// reads what the pump recorded at each leader change, not the groups.
func (s *Shard) Leaders(into map[metadata.Namespace]uint64) {
	s.rg.leadersMu.Lock()
	defer s.rg.leadersMu.Unlock()
	for ns, lead := range s.rg.leaders {
		into[ns] = lead
	}
}

// notLeader answers f on a follower: "not leader" with the leader's id,
// or "retry here" while no leader is known.
func (rg *raftGroups) notLeader(o *owned, f Frame) {
	if lead := o.rep.grp.Leader(); lead != 0 && lead != o.rep.id {
		rg.owner.answer(f, Response{Err: &NotLeaderError{Leader: raftid.Node(lead)}})
	} else {
		rg.owner.deny(f, metrics.DenyNoLeader, errNoLeader)
	}
}

// propose serves a write on a replicated partition — a produce, a
// consumer offset, a truncation or a purge: only the leader proposes; the
// answer comes when the entry is committed by a quorum and applied here,
// so every replica applies the same writes in the same order (consumer
// offsets and truncations included: they survive the loss of the node
// that took them).
func (rg *raftGroups) propose(o *owned, f Frame) {
	if rg.termFenced(o, f) {
		return
	}
	if !o.rep.grp.IsLeader() {
		rg.notLeader(o, f)
		return
	}
	if rg.writesRefused(o, f) {
		return
	}
	rg.queuePropose(o, f) // groupcommit.go
}

// termFenced answers f errTermFenced, and reports true, when f is fenced
// to a term (Request.Term) this replica does not lead in.
func (rg *raftGroups) termFenced(o *owned, f Frame) bool {
	if f.Req.Term == 0 || o.rep.grp.IsLeader() && o.rep.grp.Term() == f.Req.Term {
		return false
	}
	rg.owner.answer(f, Response{Err: errTermFenced})
	return true
}

// readReplicated serves a read of a replicated partition. A read asking
// for the leader (Request.FromLeader) is linearizable: the leader confirms
// with a quorum that it still leads (raft's ReadIndex, a heartbeat round)
// and serves once it has applied everything committed when the read
// arrived. A leader cut off or paused while others elected a new one
// therefore never serves a stale read: its confirmation never comes, and
// the read is answered "retry" when it learns it lost leadership.
func (rg *raftGroups) readReplicated(o *owned, f Frame) bool {
	if !f.Req.FromLeader {
		return false
	}
	if !o.rep.grp.IsLeader() {
		rg.notLeader(o, f)
		return true
	}
	if err := o.rep.reads.Ask(o.rep.grp, f); err != nil {
		rg.failGroup(o, err) // answers f with the waiting reads
		return true
	}
	rg.markReady(o)
	return true
}

// serveReads serves the confirmed reads whose index is applied
// (groups.Process confirmed them).
func (rg *raftGroups) serveReads(o *owned) {
	g := o.rep.grp
	if o.rep.reads.Waiting() == 0 || o.rep.catchup != nil {
		return
	}
	rev, live := rg.meta.CreatedRevision(o.p.Namespace())
	live = live && rev == o.p.Epoch()
	o.rep.reads.Serve(g.Applied(), func(f Frame) {
		switch {
		case !live:
			// Behaviour 10 at serve time: a delete committed while the
			// read waited for its confirmation.
			rg.owner.deny(f, metrics.DenyIncarnation, errIncarnation)
		case o.failed != nil:
			rg.owner.fenceFailed(o, f)
		default:
			rg.owner.serveRead(o, f)
		}
	})
}

// dropReads answers every leader read of o's group, confirmed or not:
// leadership moved, or the group is gone.
func (rg *raftGroups) dropReads(o *owned, err error) {
	o.rep.reads.Drop(func(f Frame) { rg.owner.answer(f, Response{Err: err}) })
}

// flushProposals proposes every buffered write of each queued partition
// as one raft entry: concurrent producers share the entry's round of
// consensus, as they share an fsync in a commit group. It runs when the
// inbox is momentarily empty or enough writes are buffered; a partition
// with an entry in flight is queued only once it is applied
// (groupcommit.go).
func (rg *raftGroups) flushProposals() {
	list := rg.proposing
	rg.proposing = nil
	rg.proposed = 0
	for _, o := range list {
		o.rep.proposeQueued = false
		frames := o.rep.proposeBuf
		o.rep.proposeBuf = nil
		if o.rep.grp == nil || len(frames) == 0 {
			continue
		}
		if !o.rep.grp.IsLeader() {
			for _, f := range frames {
				rg.notLeader(o, f)
			}
			continue
		}
		// A write fenced to a term that ended while it was buffered
		// (this node lost and won again) is not proposed in the new one.
		frames = slices.DeleteFunc(frames, func(f Frame) bool { return rg.termFenced(o, f) })
		data := binary.LittleEndian.AppendUint32(rg.entryBuf[:0], uint32(len(frames)))
		kept := frames[:0]
		// The leader stamps append times before proposing: the entry
		// carries them, so every replica stores the same ones.
		now := rg.clock.Now().UnixMicro()
		for _, f := range frames {
			var err error
			if f.Req.Op == OpProduce {
				// An entry carries messages: an encoded batch (which a
				// clustered node does not send) is decoded first.
				err = decodeEncoded(f.Req)
				stampAppendTime(f.Req.Messages, now)
			}
			next := data
			if err == nil {
				next, err = appendOp(data, f)
			}
			if err != nil {
				rg.owner.answer(f, Response{Err: err}) // bad input: never proposed
				continue
			}
			data = next
			kept = append(kept, f)
		}
		if len(kept) == 0 {
			continue
		}
		binary.LittleEndian.PutUint32(data, uint32(len(kept)))
		id, err := o.rep.grp.Propose(data)
		rg.keepEntryBuf(data)
		if errors.Is(err, replica.ErrGroupFailed) {
			rg.failGroup(o, err)
			for _, f := range kept {
				rg.owner.fenceFailed(o, f)
			}
			continue
		}
		if err != nil {
			for _, f := range kept {
				rg.owner.answer(f, Response{Err: fmt.Errorf("%w: %w", ErrRetry, err)})
			}
			continue
		}
		if o.rep.pending == nil {
			o.rep.pending = make(map[uint64][]Frame) // let go when the group quiesces (shedIdle)
		}
		o.rep.pending[id] = kept
		rg.markReady(o)
		rg.q.awake.Busy(o.p.Namespace()) // a leader taking writes is not idle (Awake.Busy)
	}
	rg.reuseProposing(list)
}

// stepRaft feeds a peer's message to the partition's group
// (groups.Step): a message the group refuses as invalid is counted and
// dropped; one that stops the group (raft panicked on it) fences the
// partition. A held member asked for its vote may stand itself first
// (standAgainstBehind). A message whose sender's raft id names another
// node than the one the transport authenticated is refused: a raft id
// carries its node (internal/raftid), and a member may speak only for
// its own replicas.
func (rg *raftGroups) stepRaft(o *owned, f Frame) {
	if o.rep.grp == nil {
		rg.m.Drop(f.Req.Op.String(), metrics.ReasonNotReplicated)
		return
	}
	if from := f.Req.Raft.GetFrom(); f.Req.Peer != 0 && raftid.Node(from) != f.Req.Peer {
		rg.m.Drop(f.Req.Op.String(), metrics.ReasonInvalidRaft)
		rg.log.Debug("raft message from another node's replica id dropped", "ns", o.p.Namespace(), "from", from, "peer", f.Req.Peer)
		return
	}
	rg.standAgainstBehind(o, f.Req.Raft)
	groups.Step(o.rep.grp, f.Req.Raft, rg.handlerOf(o))
}

// failGroup fences o after its raft group stopped — a Ready that failed
// half way, or a panic inside raft that the group contained: the
// reconciler evicts and rebuilds the partition, and the rebuilt group
// restores from the raft log. Every request waiting on the group is
// answered with ErrPartitionFailed.
func (rg *raftGroups) failGroup(o *owned, err error) {
	rg.log.Error("raft group failed; partition fenced", "ns", o.p.Namespace(), "error", err)
	// A panic while applying may have left produces in the shard's apply
	// batch: they belong to this partition, and the next apply of another
	// one must not append them (their frames are still pending here).
	groupHandler{rg: rg, o: o}.resetBatch()
	if errors.Is(err, partition.ErrCorrupt) && o.damaged == nil && repairable(o) {
		o.damaged = err // an append met damage in the partition log (damage.go)
	}
	if o.failed == nil {
		rg.owner.fence(o, err)
	}
	rg.unreplicate(o, fmt.Errorf("%w: %w", ErrPartitionFailed, err))
}

// markReady queues o for processReady. A group with work is ticked: a
// quiesced group wakes.
func (rg *raftGroups) markReady(o *owned) {
	rg.wake(o)
	if !o.rep.ready {
		o.rep.ready = true
		rg.readyList = append(rg.readyList, o)
	}
}

// processReady handles every group with pending work (groups.Process:
// persist, send, apply, then the leader reads), then serves what became
// readable and compacts a log that is due. It runs after each pump step, so a Step or Propose is followed by
// its messages without waiting for a tick.
func (rg *raftGroups) processReady() {
	for len(rg.readyList) > 0 {
		// Swap in the spare list so markReady appends without allocating.
		list := rg.readyList
		rg.readyList, rg.readySpare = rg.readySpare[:0], nil
		for _, o := range list {
			o.rep.ready = false
			if o.rep.grp == nil {
				continue
			}
			if again, err := groups.Process(o.rep.grp, rg.handlerOf(o), &o.rep.reads); err != nil {
				// The group cannot go on (its log or its partition
				// refused a write, or raft panicked).
				rg.failGroup(o, err)
			} else {
				if again { // reads asked again of new voters
					rg.markReady(o)
				}
				rg.serveReads(o)
			}
			rg.polls.touch(o) // applied entries are readable by waiting polls
			rg.maybeCompact(o)
		}
		clear(list)
		rg.readySpare = list[:0]
	}
}

// maybeCompact compacts o's raft log once enough was applied since the
// last snapshot: the partition is synced (the snapshot will claim its
// content), then the log is cut behind a snapshot of the partition's
// state.
func (rg *raftGroups) maybeCompact(o *owned) {
	g := o.rep.grp
	if g == nil || o.rep.catchup != nil || o.failed != nil {
		return
	}
	r := rg.cfg
	if !o.rep.compact.Due(g, replica.CompactionPolicy{Entries: r.CompactEntries, Bytes: r.CompactBytes}) {
		return
	}
	if err := o.p.Sync(); err != nil {
		rg.owner.fence(o, err)
		rg.log.Error("fsync before a raft snapshot failed; partition fenced", "ns", o.p.Namespace(), "error", err)
		return
	}
	if err := g.Compact(g.Applied(), o.rep.encodeState()); err != nil {
		rg.log.Error("raft log compaction failed", "ns", o.p.Namespace(), "error", err)
		return
	}
	o.rep.compact.Compacted()
	rg.m.RaftCompactions.Inc()
}

// tickRaft ticks every awake group, in the order they woke (so a
// simulator's run is reproducible); a leader with nothing to do quiesces
// its group instead (quiesce.go).
func (rg *raftGroups) tickRaft() {
	rg.q.awake.Hibernate(1, rg.hibernate)
	rg.elect.Tick()
	rg.balanceStep()
	rg.moveStep()
	for _, o := range rg.tickList() {
		if !rg.q.awake.Has(o.p.Namespace(), o) {
			continue
		}
		if o.rep.elect.Unhold(o.rep.grp); o.rep.elect.Held() {
			rg.q.awake.Remove(o.p.Namespace()) // woken by a message; waits for its turn
			continue
		}
		if rg.maybeQuiesce(o) {
			continue
		}
		if err := rg.keepActive(o); err != nil {
			rg.failGroup(o, err)
			continue
		}
		if err := o.rep.grp.Tick(); err != nil {
			rg.failGroup(o, err)
			continue
		}
		rg.tickCatchUp(o)
		rg.markReady(o)
	}
	rg.armTick()
}

func (rg *raftGroups) armTick() {
	if (rg.q.awake.Len() == 0 && !rg.elect.Pending() && !rg.q.awake.Sleeping()) || rg.tickArmed {
		return
	}
	d := rg.cfg.TickInterval
	if rg.raftTimer == nil {
		rg.raftTimer = rg.clock.NewTimer(d)
	} else {
		rg.raftTimer.Reset(d)
	}
	rg.tickArmed = true
}

// tickC is the raft tick channel, nil (never ready) while no group is
// awake or waiting to hibernate, so a shard with nothing replicated, or
// all of it quiesced and its followers hibernated, has no timer.
func (rg *raftGroups) tickC() <-chan time.Time {
	if !rg.tickArmed {
		return nil
	}
	return rg.raftTimer.C()
}

// groupHandler applies one partition group's Ready.
type groupHandler struct {
	rg *raftGroups
	o  *owned
}

// Send implements replica.Handler: the message goes to the node holding
// its recipient, which a raft id names (internal/raftid).
func (h groupHandler) Send(m *raftpb.Message) {
	h.rg.cfg.Send(raftid.Node(m.GetTo()), h.o.p.Namespace(), h.o.p.Epoch(), m)
}

// Apply appends a committed batch to the local log. On the proposer the
// waiting produce is answered: the batch is in a quorum's raft logs,
// synced there under FsyncAlways, so the partition log itself need not be
// synced before the ack — after a crash it is rebuilt from the raft log.
//
// A batch carrying a (producer, sequence) pair that was applied before is
// not appended again: the waiting produce is answered with the first
// application's offset. Every replica applies the same log, so every
// replica's table agrees and a retry through a new leader dedupes too.
//
// While the replica catches up after a snapshot, committed entries wait
// in order behind the fetch.
func (h groupHandler) Apply(index, id uint64, payload []byte) error {
	if c := h.o.rep.catchup; c != nil {
		c.deferred = append(c.deferred, deferredEntry{index: index, id: id, payload: payload})
		return nil
	}
	return h.apply(index, id, payload)
}

func (h groupHandler) apply(index, id uint64, payload []byte) error {
	// The entry's frames stay pending until it is applied: if applying it
	// panics (the group contains the panic and fails), failGroup answers
	// them instead of leaving them unanswered.
	frames := h.o.rep.pending[id]
	err := h.applyFrames(index, frames, payload)
	delete(h.o.rep.pending, id)
	h.rg.reuseFrames(h.o, frames)
	h.rg.releaseProposals(h.o)
	return err
}

func (h groupHandler) applyFrames(index uint64, frames []Frame, payload []byte) error {
	h.o.rep.compact.Applied(int64(len(payload)))
	if len(payload) < 4 {
		return fmt.Errorf("apply index %d: entry shorter than its header", index)
	}
	n := int(binary.LittleEndian.Uint32(payload))
	rest := payload[4:]
	for i := range n {
		var f Frame
		waiting := i < len(frames)
		if waiting {
			f = frames[i]
		}
		op, next, derr := decodeOp(index, rest)
		var batched bool
		var err error
		if derr == nil {
			batched, err = h.batchProduce(index, op, f, waiting)
		}
		if err == nil && !batched {
			// The produces batched so far precede this operation in the
			// log: they are appended before it applies, or before a
			// malformed one fails the entry.
			if err = h.flushBatch(index); err == nil {
				if err = derr; err == nil {
					err = h.applyOp(index, op, f, waiting)
				}
			}
		}
		rest = next
		if err != nil {
			h.failBatch(err)
			// The replica cannot apply a committed entry: the group stops
			// and the partition is fenced and rebuilt, which applies the
			// entry again. Its writes from here on are committed, so their
			// outcome is unknown to their callers, not failed.
			for j := i; j < len(frames); j++ {
				h.rg.owner.answer(frames[j], Response{Err: OutcomeUnknown(err)})
			}
			return err
		}
	}
	if err := h.flushBatch(index); err != nil {
		h.failBatch(err)
		return err
	}
	return nil
}

// Applying an entry's produces: consecutive produces that land at the
// log's end (no duplicate, no re-apply over a longer local log) are
// appended with one Append, as a single node coalesces queued produces.

// pendingProduce is a produce batched for one Append.
type pendingProduce struct {
	key     produceKey
	n       int
	f       Frame
	waiting bool
}

// applyBatch is the shard's scratch for batching an entry's produces.
type applyBatch struct {
	items []pendingProduce
	msgs  []partition.Message
	keys  map[produceKey]bool
}

// batchProduce takes op, a produce, into the batch when it can share the
// Append (reports false otherwise).
func (h groupHandler) batchProduce(index uint64, op entryOp, f Frame, waiting bool) (bool, error) {
	o, b := h.o, &h.rg.applyBatch
	if op.kind != entryProduce || o.p.NextOffset() != o.rep.cursor {
		return false, nil
	}
	key := op.key
	if key.Producer != 0 {
		if _, dup := o.rep.dedupe.Get(key); dup || b.keys[key] {
			return false, nil
		}
	}
	had := len(b.msgs)
	var err error
	if b.msgs, err = partition.AppendDecodedBatch(b.msgs, op.batch); err != nil {
		return false, fmt.Errorf("apply index %d: %w", index, err)
	}
	if key.Producer != 0 {
		if b.keys == nil {
			b.keys = make(map[produceKey]bool)
		}
		b.keys[key] = true
	}
	b.items = append(b.items, pendingProduce{key: key, n: len(b.msgs) - had, f: f, waiting: waiting})
	return true, nil
}

// flushBatch appends the batched produces and answers them.
func (h groupHandler) flushBatch(index uint64) error {
	o, b := h.o, &h.rg.applyBatch
	if len(b.items) == 0 {
		return nil
	}
	// The messages' bytes are the committed entry's, which nothing writes
	// again (raft's log holds the entry as proposed or as received, each
	// its own memory): a partition that stores bytes as given keeps them,
	// and an in-memory replica skips a copy of every message. That copy,
	// into fresh arena memory, was the largest one on a 3-node cluster's
	// apply path under many producers.
	got, _, err := appendTo(o.p, b.msgs, true)
	if err == nil && got != o.rep.cursor {
		err = fmt.Errorf("appended at %d, want %d", got, o.rep.cursor)
	}
	if err != nil {
		return fmt.Errorf("apply index %d: %w", index, err)
	}
	for _, it := range b.items {
		first := o.rep.cursor
		o.rep.cursor += uint64(it.n)
		if it.key.Producer != 0 {
			o.rep.dedupe.Put(it.key, first)
		}
		h.answered(it.f, it.waiting, Response{Offset: first})
	}
	if o.dur.Fsync == metadata.FsyncInterval {
		h.rg.commit.dirtyInterval(o)
	}
	h.resetBatch()
	return nil
}

// failBatch answers the batched produces of an entry that could not be
// applied: committed, so their outcome is unknown.
func (h groupHandler) failBatch(err error) {
	for _, it := range h.rg.applyBatch.items {
		h.answered(it.f, it.waiting, Response{Err: OutcomeUnknown(err)})
	}
	h.resetBatch()
}

func (h groupHandler) resetBatch() {
	b := &h.rg.applyBatch
	clear(b.items)
	b.items = b.items[:0]
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	clear(b.keys)
}

// applyOp applies op, one operation of the entry at index.
func (h groupHandler) applyOp(index uint64, op entryOp, f Frame, waiting bool) error {
	o := h.o
	switch op.kind {
	case entryProduce:
		return h.applyOne(index, op.key, op.batch, f, waiting)
	case entryStoreOffset:
		off := op.offset
		consumer := string(op.consumer)
		// Judged against the replicated log's end, so every replica — one
		// re-applying after a restart included — decides alike.
		// (The local log is ahead of it only while re-applying after a
		// restart; otherwise the partition judges, against the same end.)
		if off > o.rep.cursor && o.p.NextOffset() > o.rep.cursor {
			h.answered(f, waiting, Response{Err: fmt.Errorf("%w: consumer offset %d past the log's end %d", partition.ErrOffsetOutOfRange, off, o.rep.cursor), Offset: off})
			return nil
		}
		if err := o.p.StoreConsumerOffset(consumer, off); errors.Is(err, partition.ErrOffsetOutOfRange) {
			h.answered(f, waiting, Response{Err: err, Offset: off})
			return nil
		} else if err != nil {
			// An I/O failure: this replica would diverge. Fence and
			// rebuild; the entry is applied again.
			return fmt.Errorf("apply index %d: store consumer offset: %w", index, err)
		}
		o.rep.setConsumer(consumer, off)
		h.answered(f, waiting, Response{Offset: off})
		return nil
	case entryDeleteOffset:
		consumer := string(op.consumer)
		if err := o.p.DeleteConsumerOffset(consumer); err != nil {
			// An I/O failure, as for a store: fence and rebuild.
			return fmt.Errorf("apply index %d: delete consumer offset: %w", index, err)
		}
		_, found := o.rep.consumers[consumer]
		delete(o.rep.consumers, consumer)
		h.answered(f, waiting, Response{Found: found})
		return nil
	default: // entryTruncate, entryPurge (decodeOp refuses other kinds)
		off := o.rep.cursor
		if op.kind == entryTruncate {
			off = op.offset
		}
		// Judged against the replicated log's end, not the local log's,
		// so every replica decides alike.
		if off > o.rep.cursor {
			h.answered(f, waiting, Response{Err: fmt.Errorf("%w: truncate before %d past the log's end %d", partition.ErrOffsetOutOfRange, off, o.rep.cursor), Offset: o.rep.start})
			return nil
		}
		if off > o.rep.start {
			o.rep.start = off
		}
		if err := o.p.TruncateBefore(min(off, o.p.NextOffset())); err != nil {
			return fmt.Errorf("apply index %d: truncate: %w", index, err)
		}
		h.answered(f, waiting, Response{Offset: o.rep.start})
		return nil
	}
}

// answered answers a waiting frame.
func (h groupHandler) answered(f Frame, waiting bool, r Response) {
	if waiting {
		h.rg.owner.answer(f, r)
	}
}

// applyOne applies one produce of a committed entry. The replicated state
// is (cursor, dedupe table): cursor is the offset the produce's first
// message gets in every replica's log. The local partition log may already
// hold it — the node restarted and is re-applying the entries after its
// snapshot over a log that kept them — so only what lies at or past the
// log's end is appended.
func (h groupHandler) applyOne(index uint64, key produceKey, batch []byte, f Frame, waiting bool) error {
	o := h.o
	if key.Producer != 0 {
		if first, dup := o.rep.dedupe.Get(key); dup {
			if waiting {
				h.rg.owner.answer(f, Response{Offset: first})
			}
			return nil
		}
	}
	msgs, err := partition.DecodeBatch(batch)
	if err != nil {
		return fmt.Errorf("apply index %d: %w", index, err)
	}
	first := o.rep.cursor
	have := o.p.NextOffset()
	switch {
	case have < first:
		return fmt.Errorf("apply index %d: partition log ends at %d, before the entry's offset %d", index, have, first)
	case have-first < uint64(len(msgs)):
		got, err := o.p.Append(msgs[have-first:])
		if err != nil {
			// The replica's log now lacks a committed entry: the group
			// stops here and the partition is fenced and rebuilt (apply
			// answers the waiting writes: outcome unknown).
			return fmt.Errorf("apply index %d: %w", index, err)
		}
		if got != have {
			return fmt.Errorf("apply index %d: appended at %d, want %d", index, got, have)
		}
	}
	o.rep.cursor += uint64(len(msgs))
	if key.Producer != 0 {
		o.rep.dedupe.Put(key, first)
	}
	if waiting {
		h.rg.owner.answer(f, Response{Offset: first})
	}
	if o.dur.Fsync == metadata.FsyncInterval {
		h.rg.commit.dirtyInterval(o)
	}
	return nil
}

// ApplySnapshot installs a snapshot the leader sent: the replica's state
// becomes the snapshot's, and if its partition log is shorter than the
// snapshot says, it fetches the missing messages before applying anything
// more.
func (h groupHandler) ApplySnapshot(index uint64, data []byte) error {
	st, err := decodeState(data)
	if err != nil {
		return fmt.Errorf("raft snapshot at %d: %w", index, err)
	}
	o := h.o
	o.rep.restore(st)
	o.rep.compact.Restored()
	if c := o.rep.catchup; c != nil {
		kept := c.deferred[:0]
		for _, e := range c.deferred {
			if e.index > index {
				kept = append(kept, e)
			}
		}
		c.deferred = kept
	}
	h.rg.m.RaftSnapshots.Inc()
	h.rg.refreshPeers(o) // the snapshot carries the voters
	if have := o.p.NextOffset(); have < o.rep.cursor {
		h.rg.startCatchUp(o, o.rep.cursor)
		return nil
	}
	return o.settle()
}

// ConfChanged implements replica.ConfChanger: the move driver follows
// every applied change of the group's voters.
func (h groupHandler) ConfChanged(index uint64, add bool, node uint64, ctx []byte) error {
	h.rg.confChanged(h.o)
	return nil
}

// LeaderChanged fails the produces this node proposed as leader: their
// outcome is now unknown (behaviour: never silently applied twice).
func (h groupHandler) LeaderChanged(lead uint64) {
	h.rg.setLeader(h.o, lead)
	if f := h.rg.cfg.LeaderChanged; f != nil {
		f(h.o.p.Namespace(), raftid.Node(lead))
	}
	if lead == h.o.rep.id {
		h.rg.considerBalance(h.o)
		h.rg.considerMove(h.o)
		return
	}
	// Leader reads waiting here, for leadership confirmation or for
	// messages, go to the new leader.
	var err error = errNoLeader
	if lead != 0 {
		err = &NotLeaderError{Leader: raftid.Node(lead)}
	}
	h.rg.dropReads(h.o, err)
	h.rg.polls.dropWaiters(h.o, err, true)
	for id, fs := range h.o.rep.pending {
		for _, f := range fs {
			h.rg.owner.answer(f, Response{Err: ErrOutcomeUnknown})
		}
		delete(h.o.rep.pending, id)
	}
	// The writes gathered behind them were never proposed: flushProposals
	// answers them "not leader".
	h.rg.releaseProposals(h.o)
}

// produceKey identifies one logical produce across retries.
type produceKey = dedupe.Key

// A partition remembers dedupe.DefaultSize (65,536) recent produces. A
// retry older than the window could apply twice; the Node retries within
// its request deadline, far inside it.

// dedupeTable maps a produce's key to the first offset it was given
// (internal/dedupe: the one implementation the metadata group uses too).
type dedupeTable = dedupe.Window[uint64]

// Leader reports the node this shard believes leads ns's group (0: none
// known, or ns is not replicated here).
func (s *Shard) Leader(ctx context.Context, ns metadata.Namespace) (uint64, error) {
	lead, _, err := s.LeaderTerm(ctx, ns)
	return lead, err
}

// LeaderTerm is Leader and the group's current term as this replica
// knows it (0 and 0 for a group this shard does not hold). While a
// leader is known the term is the one it was elected in.
func (s *Shard) LeaderTerm(ctx context.Context, ns metadata.Namespace) (uint64, uint64, error) {
	// The pump writes these; they are read only once it answered (a
	// do abandoned by ctx may still run the operation later, so they
	// must not be the results the early return writes).
	var lead, term uint64
	if err := s.do(ctx, newControl(func(s *Shard) error {
		if o := s.owned[ns]; o != nil && o.rep.grp != nil {
			lead, term = raftid.Node(o.rep.grp.Leader()), o.rep.grp.Term()
		}
		return nil
	}, nil)); err != nil {
		return 0, 0, err
	}
	return lead, term, nil
}

// inSyncLag is how many entries behind the commit index a follower may
// be and still count as in sync (Response.InSync): a follower keeping up
// lags by the entries in flight to it, one that stopped falls behind by
// every entry committed since.
const inSyncLag = 64

package sim

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/shard"
)

// raftCalmRounds is how many rounds of one raft tick each the cluster
// must stay idle and converged before the clock may move in bigger
// steps: several election timeouts.
const raftCalmRounds = 60

// drainLimit bounds one drain: raft answers messages only with messages
// that end, so a drain that does not end is a simulator bug.
const drainLimit = 1_000_000

// drain runs every ready piece of engine work, without moving the clock,
// until none is left.
func (c *sim) drain() {
	for k := 0; c.viol == nil; k++ {
		if k == drainLimit {
			// A replica whose raft state the liar's damaged incarnation
			// file got removed may have voted twice (cluster seed 474:
			// two honest replicas then traded appends and rejections at
			// one instant without end).
			known := ""
			if c.raftStateLost {
				known = knownReplicaIncarnationDamage
			}
			c.failKnown(known, 0, "the cluster is still busy after %d drain rounds", k)
			return
		}
		did := false
		for _, n := range c.nodes {
			for len(n.ep.Recv()) > 0 && c.viol == nil {
				c.deliver(n, 64)
				c.afterAction()
				did = true
			}
			if !n.clk.monoNow().Before(n.metaTickAt) {
				c.metaTick(n)
				c.afterAction()
				did = true
			}
			for i := range n.shards {
				for (len(n.shadow[i]) > 0 || n.clocks[i].due()) && c.viol == nil {
					n.step(i)
					c.afterAction()
					did = true
				}
			}
		}
		if !did {
			return
		}
	}
}

// converged reports, empty when there is none, what still differs between
// the nodes: their metadata, their metadata groups (metadataGroupsDiffer),
// or a replica of a committed partition (on
// the nodes its placement names: the others hold none) — its length, or
// its group's applied index, or it is not running (its node down, its
// build failed or not retried yet). A write that adds no message (a
// consumer offset) leaves the lengths equal: a replica that has not
// applied it — one rebuilt after a crash, whose commit index (not
// synced) its leader has yet to teach it again — shows only in its
// applied index (cluster seed 7179, invariant 3).
func (c *sim) converged() string { return c.convergedExcept(nil) }

// unownedSoleLog reports whether ns's only replica is on the liar, node
// id, and lies touched both the raft log in ns's directory there and
// its sync mark (knownUnownedSoleLog): a build refusing that directory
// leaves the partition built nowhere. A lie on the log alone is not
// excused: the mark names whose the log was.
func (c *sim) unownedSoleLog(id uint64, ns metadata.Namespace) bool {
	n := c.node(id)
	if n == nil || !c.isLiar(n) || !c.lies.bases[ns][shard.RaftLogName] || !c.lies.bases[ns][shard.RaftMarkName] {
		return false
	}
	info, ok := c.nodes[0].meta.Partition(ns)
	return ok && len(c.replicasOf(info)) == 1
}

// twoVoterReseeds reports whether every unsettled move is the liar's
// re-seed of its replica in a group of two whose directory's sync mark a
// lie touched, and either its raft log too or the mark left unreadable
// on the liar's disk (markUnreadable) (knownTwoVoterReseed): the group
// has no majority without the replica the move replaces.
func (c *sim) twoVoterReseeds() bool {
	if c.lies == nil {
		return false
	}
	found := false
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		if len(p.Leaving) == 0 {
			continue
		}
		if len(p.Leaving) != 1 || len(p.Replicas) != 2 || metadata.NodeOf(p.Leaving[0]) != c.liar ||
			!slices.ContainsFunc(p.Replicas, func(r uint64) bool { return r != p.Leaving[0] && metadata.NodeOf(r) == c.liar }) ||
			!c.lies.bases[p.NS][shard.RaftMarkName] || !c.lies.bases[p.NS][shard.RaftLogName] && !c.markUnreadable(p.NS) {
			return false
		}
		found = true
	}
	return found
}

// markUnreadable reports whether the liar's disk holds, now, a sync
// mark of a raft log in ns's directory — the log's own, one set aside
// with its copy (damaged-N, package partition), or one a refusal moved
// (shard.RaftRefusedName, in the directory or in a copy set aside) —
// that the replica refuses as damage (replica.SyncedSize: cut to no mark's size, or no
// valid slot). It reads the disk itself, below the lies that make a read
// return bytes the disk does not hold (a flip on read): a mark that only
// read as damaged is not this limit, and a re-seed it caused stays a
// failure.
func (c *sim) markUnreadable(ns metadata.Namespace) bool {
	fsys := c.lies.mem()
	dir := partitionDir(ns)
	dirs := []string{dir}
	names, _ := fsys.ReadDir(dir) // none: no mark
	for _, name := range names {
		// A set-aside copy or a refused log, or no directory; a copy
		// set aside may hold a refused log.
		dirs = append(dirs, path.Join(dir, name), path.Join(dir, name, shard.RaftRefusedName))
	}
	return slices.ContainsFunc(dirs, func(d string) bool {
		if _, err := fsys.Stat(path.Join(d, shard.RaftMarkName)); err != nil {
			return false
		}
		_, _, _, err := replica.SyncedSize(fsys, path.Join(d, shard.RaftLogName))
		return err != nil
	})
}

// partitionDir is partition ns's directory in a node's data directory.
func partitionDir(ns metadata.Namespace) string {
	return path.Join(dataDir, "streams", strconv.FormatUint(uint64(ns.Stream()), 10),
		"topics", strconv.FormatUint(uint64(ns.Topic()), 10),
		"partitions", strconv.FormatUint(uint64(ns.Partition()), 10))
}

// metadataGroupsDiffer reports, empty when there is none, a node whose
// metadata group has applied another index, or holds other voters or
// learners, than n1's. The stores alone can agree while a member lags: a
// configuration change (a learner's promotion) is raft's, not the
// store's, and a member reopened after a failed write, short of a commit
// its leader has yet to teach it again, holds the store it had. Settling
// moves the clock a whole pass period per round once converged, which
// raft sees as one tick: a leader that stepped down then (cluster seed
// 5885: a quiesced leader told of a higher term by a member reopened
// from its log) is replaced only an election timeout of such rounds
// later, past the judgment at quiescence (invariant 8), where in real
// time it takes a tenth of a second. Judged not converged, the rounds
// stay one raft tick long until the group agrees.
func (c *sim) metadataGroupsDiffer() string {
	ref := c.nodes[0].eng.MetadataStatus()
	for _, n := range c.nodes[1:] {
		st := n.eng.MetadataStatus()
		if st.Applied != ref.Applied || !slices.Equal(st.Voters, ref.Voters) || !slices.Equal(st.Learners, ref.Learners) {
			return fmt.Sprintf("n%d's metadata group (applied %d, voters %v, learners %v) differs from n%d's (applied %d, voters %v, learners %v)",
				n.id, st.Applied, st.Voters, st.Learners, c.nodes[0].id, ref.Applied, ref.Voters, ref.Learners)
		}
	}
	return ""
}

// convergedExcept is converged, but for the copies skip names (a node and
// a partition).
func (c *sim) convergedExcept(skip func(id uint64, ns metadata.Namespace) bool) string {
	ref, err := metadata.EncodeSnapshot(c.nodes[0].meta.Export())
	if err != nil {
		c.fail(0, "encode metadata: %v", err)
		return "error"
	}
	for _, n := range c.nodes[1:] {
		b, err := metadata.EncodeSnapshot(n.meta.Export())
		if err != nil {
			c.fail(0, "encode metadata: %v", err)
			return "error"
		}
		if !bytes.Equal(b, ref) {
			return fmt.Sprintf("n%d's metadata (revision %d) differs from n1's (revision %d)",
				n.id, n.meta.Revision(), c.nodes[0].meta.Revision())
		}
	}
	if diff := c.metadataGroupsDiffer(); diff != "" {
		return diff
	}
	states := shardStates{}
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		key := incKey{p.NS, p.CreatedRevision}
		rl := c.oracle[key]
		if rl == nil {
			if skip != nil && !slices.ContainsFunc(c.replicasOf(p), func(n *node) bool { return !skip(n.id, p.NS) }) {
				continue
			}
			return fmt.Sprintf("%v built nowhere", key)
		}
		var applied uint64
		var appliedOn *node
		for _, n := range c.replicasOf(p) {
			if skip != nil && skip(n.id, p.NS) {
				continue
			}
			if l, ok := rl.lens[n.id]; !ok || l != uint64(len(rl.ids)) {
				return fmt.Sprintf("%v: n%d holds %d of %d messages (built: %v)", key, n.id, l, len(rl.ids), ok)
			}
			if len(p.Leaving) > 0 {
				continue // a move under way: moving judges it (a joining replica waits for a snapshot)
			}
			if n.down || p.Owner >= len(n.shards) {
				return fmt.Sprintf("%v: n%d, which holds a replica, is down", key, n.id)
			}
			st, ok := states.of(c, n, p.Owner)
			if !ok {
				return "error"
			}
			at, held := st.Applied[p.NS]
			if st.Owned[p.NS] != p.CreatedRevision || !held || slices.Contains(st.Failed, p.NS) {
				return fmt.Sprintf("%v: n%d's replica is not running (owned at %d, group %v, failed %v)",
					key, n.id, st.Owned[p.NS], held, slices.Contains(st.Failed, p.NS))
			}
			if appliedOn == nil {
				applied, appliedOn = at, n
			} else if at != applied {
				return fmt.Sprintf("%v: n%d applied its group's log to index %d, n%d to %d", key, appliedOn.id, applied, n.id, at)
			}
		}
	}
	return ""
}

// shardStates caches the shards' states for one convergence check.
type shardStates map[[2]uint64]shard.State

// of is shard i of n's state, inspected once per check.
func (m shardStates) of(c *sim, n *node, i int) (shard.State, bool) {
	k := [2]uint64{n.id, uint64(i)}
	if st, ok := m[k]; ok {
		return st, true
	}
	st, err := n.shards[i].Inspect(c.ctx)
	if err != nil {
		c.fail(0, "inspect %sshard %d: %v", n.tag(), i, err)
		return shard.State{}, false
	}
	m[k] = st
	return st, true
}

// silencedByOldProposal reports whether every unanswered attempt is a
// write that a restarted node proposed and applied: the entry it waited
// for was matched to an older entry with the same proposal id
// (knownProposalIDs).
func (c *sim) silencedByOldProposal(as []*attempt) bool {
	for _, a := range as {
		applied := len(a.ids) > 0 && c.msgs[a.ids[0]].appended
		if !c.regrouped(a) || a.handles == 0 || (a.op.kind != kindStore && !applied) {
			return false
		}
	}
	return len(as) > 0
}

// silencedByApplyError reports whether every unanswered attempt is a
// write proposed by a replica whose append failed while applying
// (knownApplyErrorSilence).
func (c *sim) silencedByApplyError(as []*attempt) bool {
	for _, a := range as {
		k := a.op.kind
		if (k != kindProduce && k != kindBatch && k != kindStore) || a.handles == 0 ||
			!c.applyFailed[buildKey{a.node.id, incKey{a.op.ns, a.stamp}}] {
			return false
		}
	}
	return len(as) > 0
}

// clusterDropOK says which drop reasons cluster mode explains, by
// variant. Raft traffic has no client and raft re-sends it, so dropping
// it is fine wherever a frame can be dropped (behaviour 17) — except for
// routing failures, which are always violations. Client frames are
// dropped by convergence (a delete racing a request, a park outliving its
// passes, a namespace another shard owns), by inboxes that raft traffic
// fills, and by park buffers it crowds; build failures need a disk fault.
func (c *sim) clusterDropOK(variant, reason string) bool {
	switch reason {
	case metrics.ReasonUnroutable, metrics.ReasonMisrouted, metrics.ReasonDeliveryFailed:
		return false
	case metrics.ReasonOutOfReach:
		// A term out of the bound's reach: only a forged one (cpeer.go),
		// as no correct run comes near the bound.
		return c.faults.ForgedTerms > 0
	}
	if variant == metaRaftVariant && reason == metrics.ReasonInvalidRaft {
		return c.faults.ForgedExtreme > 0 // past the absolute cap
	}
	if variant == shard.OpRaft.String() || variant == shard.OpCatchUp.String() {
		return true
	}
	switch reason {
	case metrics.ReasonParkExpired, metrics.ReasonNotOwner, metrics.ReasonRemoved,
		metrics.ReasonFull, metrics.ReasonParkOverflow:
		return true
	case metrics.ReasonBuildFailed:
		// A disk fault, or a lie: a bad sector's EIO fails a build as
		// any read error does (single-node mode counts lies too).
		return c.faults.DiskFull+c.faults.DiskError > 0 || c.faults.Lies.Total() > 0
	case metrics.ReasonShutdown, metrics.ReasonDisconnected:
		// A crash, or a removed node closed with frames still queued.
		return c.faults.Crash+c.faults.ProcessCrash+c.faults.Removed > 0
	}
	return false
}

// metaRaftVariant labels the metadata group's refused raft messages in
// parkway_frame_drops_total (the engine's label).
const metaRaftVariant = "metadata_raft"

// linearizeProduce places a produce in the history of each incarnation a
// try of it was applied to: as acknowledged (at its offset) in the one
// the acknowledgement reported, as of unknown outcome elsewhere. A
// produce that ended "not applied" or with an error must not have been
// applied anywhere.
func (c *sim) linearizeProduce(o *op, add func(*op, incKey, linIn, linOut)) {
	tries, ok := c.appliedTries(o)
	if !ok {
		return
	}
	keys := make([]incKey, 0, len(tries))
	for k := range tries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].compare(keys[j]) < 0 })
	for _, key := range keys {
		a := tries[key]
		in := linIn{kind: o.kind, ids: a.ids}
		var out linOut
		switch {
		case o.outcome == outcomeOK && o.acked == a:
			out.offset = o.resp.Offset
		case o.outcome == outcomeOK || o.outcome == outcomeUnknown:
			out.unknown = true
		default:
			c.fail(5, "op %d ended %v (%v), yet attempt %d was appended to %v", o.id, o.outcome, o.err, a.id, key)
			return
		}
		add(o, key, in, out)
	}
}

// storeElsewhere places a consumer offset store in the history of every
// incarnation, other than except, that a leader took one of its tries
// against without a definite answer (outcome unknown, or the node
// crashed with it): any of them may have applied it, so it is a store of
// unknown outcome there. After a delete and recreate an operation's tries
// span incarnations; placing a store only where its last try went left an
// earlier incarnation's history without a store that may have applied
// there, and correct answers looked non-linearizable (the simulator's
// seeds 5504 and 8371: a false alarm of the checker, not an engine bug).
func (c *sim) storeElsewhere(o *op, except uint64, add func(*op, incKey, linIn, linOut)) {
	in := linIn{kind: o.kind, consumer: o.consumer, offset: o.offset}
	seen := map[uint64]bool{except: true}
	for _, a := range o.attempts {
		if a.handles == 0 || a.stamp == 0 || seen[a.stamp] {
			continue
		}
		if a.crashed || errors.Is(a.resp.Err, shard.ErrOutcomeUnknown) {
			seen[a.stamp] = true
			add(o, incKey{o.ns, a.stamp}, in, linOut{unknown: true})
		}
	}
}

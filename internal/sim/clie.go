package sim

import (
	"errors"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
)

// Disks that lie in a cluster (DESIGN behaviour 28). With FaultRates.Lie
// set, one founding node per seed — a minority of every group it holds a
// replica of, as the rule needs a majority of honest copies — is the
// liar: its disk lies the way a single node's does (lie.go, the same
// code): while it is down after a power loss, a bit flipped in the stored
// bytes, a file cut short, or a file rolled back to a copy of it saved at
// an earlier power loss; while it runs, a write misdirected, a bad sector
// or a bit flipped on read. Every file of its data directory may be hit
// — segments, indexes, consumer offsets, incarnation files, each
// partition's raft log and the journal — but the metadata group's raft
// log, the lock and the identity file.
//
// The invariants are those of every cluster seed, unchanged: no
// acknowledged message lost or changed, no offset reused, every read
// returning what the log holds at each offset, every replica at
// quiescence holding the whole log. One more: damage may be reported
// (a typed *partition.CorruptError, or the EIO of a bad sector) only by
// the liar, for an incarnation a lie touched. The liar's damaged copies
// are repaired from their peers (the store wrapper forwards the repair);
// one whose raft log a lie damaged is refused by design, and is
// classified as a known limit (known.go), only where the violation is
// the liar's own copy of that partition.

// ClusterLie is the lying-disk rate of LyingClusterConfig: about five lies
// in a run of the default length, all on one node.
const ClusterLie = 0.0004

// LyingClusterConfig is the configuration of the cluster lying-disk seeds:
// the default cluster configuration plus ClusterLie.
func LyingClusterConfig(seed uint64) Config {
	cfg := DefaultClusterConfig(seed)
	cfg.Faults.Lie = ClusterLie
	return cfg
}

// startLies picks the liar, a founder, when lies are on.
func (c *csim) startLies() {
	if c.cfg.Faults.Lie == 0 {
		return
	}
	c.liar = c.founders[c.rng.IntN(len(c.founders))]
	liarNode := func() *cnode {
		for _, n := range slices.Concat(c.nodes, c.gone) {
			if n.id == c.liar {
				return n
			}
		}
		return nil
	}
	c.lies = newLies(&c.base,
		func() *vfs.MemFS { return liarNode().mem },
		func() *metadata.Store { return liarNode().meta },
		path.Dir(metaRaftLog), &c.faults, "n"+strconv.FormatUint(c.liar, 10)+" ")
	// The rule needs an honest majority of every group a lie touches: a
	// partition whose replicas the liar's metadata counts as fewer than
	// three (placed on two nodes, or moved down to two) is not lied to.
	c.lies.only = func(ns metadata.Namespace) bool {
		info, ok := liarNode().meta.Partition(ns)
		return !ok || len(info.Replicas) == 0 || len(info.Replicas) >= 3
	}
	c.event("n%d is the liar", c.liar)
}

// lie injects one lie on the liar, if it is a running member: a lie of
// the stored bytes crashes it (a power loss) and damages its disk while
// it is down (one node down at a time, as for crashes).
func (c *csim) lie() {
	n := c.node(c.liar)
	if n == nil || n.down || n.eng == nil {
		return
	}
	kind, name, ok := c.lies.pick(c.cfg.Faults.LieKinds)
	if !ok {
		return
	}
	if !lieWhileDown(kind) {
		c.lies.arm(kind, name)
		return
	}
	if slices.ContainsFunc(c.nodes, func(m *cnode) bool { return m.down }) {
		return
	}
	c.crashHow(n, true, 0, time.Second)
	c.lies.lieDown(kind, name)
}

// isLiar reports whether n is the node whose disk lies.
func (c *csim) isLiar(n *cnode) bool { return c.lies != nil && n.id == c.liar }

// liedTo reports whether n's copy of key may be damaged: n is the liar
// and a lie touched key's files (or a file outside every partition
// directory, the journal).
func (c *csim) liedTo(n *cnode, key incKey) bool {
	return c.isLiar(n) && c.lies.damageOK(key)
}

// unrepaired reports whether everything that kept the cluster from
// settling is a copy the liar holds of a partition a lie touched — frames
// parked for it there, requests waiting on it there, its copy short of
// the log, its group not led by it as the preferred leader, a replica
// move (and the removal it drains) waiting for that copy to catch up —
// and that copy's raft log was damaged by a lie (stuckLabel). Anything
// else is a bug: every other damage is repaired from the peers.
func (c *csim) unrepaired() string {
	liar := c.node(c.liar)
	if c.lies == nil || liar == nil || liar.down {
		return ""
	}
	touched := func(ns metadata.Namespace) bool { return c.lies.all || c.lies.dirs[ns] }
	for _, n := range c.nodes {
		for _, sh := range n.shards {
			if sh.Parked() == 0 {
				continue
			}
			st, err := sh.Inspect(c.ctx)
			if err != nil {
				return ""
			}
			for _, pn := range st.Parked {
				if n != liar || !touched(pn.NS) {
					return ""
				}
			}
		}
	}
	for _, a := range c.inflight {
		if a.node != liar || !touched(a.op.ns) {
			return ""
		}
	}
	skip := func(id uint64, ns metadata.Namespace) bool {
		return id == c.liar && touched(ns)
	}
	// A move that adds the liar's copy of a touched partition waits for
	// that copy to catch up, which it never does.
	// So does the removal of a node that move drains.
	stuckMove := false
	for _, p := range c.nodes[0].meta.Snapshot().Partitions {
		if len(p.Leaving) > 0 && (!touched(p.NS) || !slices.Contains(p.Replicas, c.liar)) {
			return ""
		}
		if len(p.Leaving) > 0 {
			stuckMove = true
		}
	}
	if c.convergedExcept(skip) != "" || c.join != nil || c.remove != nil && !stuckMove || c.movingOther() != "" {
		return ""
	}
	if c.unbalancedExcept(skip) != "" {
		return ""
	}
	// Only a damaged raft log excuses it (refused by design; the liar
	// retries its group forever, so the cluster never stays calm even
	// when it is calm at this instant). Every other damage is repaired
	// from the peers.
	return c.stuckLabel(nil, "")
}

// movingOther is moving, but for the nodes whose metadata is the same
// committed moves unrepaired already judged (every member's view).
func (c *csim) movingOther() string {
	for _, n := range c.nodes {
		if moving, _ := n.meta.Moving(0); moving == 0 {
			continue
		}
		if len(n.meta.Snapshot().Partitions) != len(c.nodes[0].meta.Snapshot().Partitions) {
			return "metadata differs"
		}
	}
	return ""
}

// stuckLabel names the known limit a copy on the liar of a partition a
// lie touched is stuck in: its raft log, which a lie touched, refused
// (a damaged incarnation file beside it too: the repair keeps raft state
// only from a log that names its incarnation); otherwise def. ns, if not
// nil, is the copy's partition (else every partition a lie touched).
func (c *csim) stuckLabel(ns *metadata.Namespace, def string) string {
	for n, b := range c.lies.bases {
		if (ns == nil || n == *ns) && (b[shard.RaftLogName] || b[shard.RaftMarkName]) {
			return knownRaftLogRefused
		}
	}
	return def
}

// unowned reports whether the only difference between key's owners and
// its placement is the liar's copy, missing, of a partition a lie
// touched: the known limit of that copy (invariant 7 at quiescence).
func (c *csim) unowned(key incKey, got, want []uint64) string {
	if c.lies == nil || !c.liedTo(c.node(c.liar), key) && !(c.lies.all || c.lies.dirs[key.ns]) {
		return ""
	}
	if len(want) != len(got)+1 || !slices.Contains(want, c.liar) || slices.Contains(got, c.liar) {
		return ""
	}
	for _, id := range got {
		if !slices.Contains(want, id) {
			return ""
		}
	}
	return c.stuckLabel(&key.ns, "")
}

// damageReported reports whether o's failure, the answer of a final read
// of key through n, is damage the liar reports for its copy (counted as
// detected): the liar answered it (n itself, or the replica n's "not
// leader" hint sent the read to).
func (c *csim) damageReported(n *cnode, o *op, key incKey) bool {
	if len(o.attempts) == 0 || !isLogDamage(o.err) || !c.liedTo(o.attempts[len(o.attempts)-1].node, key) {
		return false
	}
	c.faults.Detected++
	c.event("final read of %v through n%d: damage reported by the liar: %v", key, n.id, o.err)
	return true
}

// damageExplained reports whether a's answer may report damage: it was
// answered by the liar, for a partition a lie touched. Any other node's
// disk tells the truth, and a node never serves a peer's damage (a
// forwarded read reaches the liar only through a client here).
func (c *csim) damageExplained(a *attempt) bool {
	return c.isLiar(a.node) && (c.lies.all || c.lies.dirs[a.op.ns])
}

// isLogDamage reports whether err reports damage on disk: a typed
// corruption error, a bad sector's EIO, or a raft log refused as corrupt.
func isLogDamage(err error) bool {
	return isDamageError(err) || isCorruptLog(err)
}

// isCorruptLog reports whether err reports damage found by a checksum or
// a record that does not decode — in a partition's files or its raft log
// — which only a lie explains (an EIO may be a plain disk error).
func isCorruptLog(err error) bool {
	return isCorrupt(err) || errors.Is(err, wal.ErrCorrupt) || errors.Is(err, replica.ErrCorruptLog)
}

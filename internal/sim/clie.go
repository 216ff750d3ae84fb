package sim

import (
	"errors"
	"path"
	"slices"
	"strconv"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/metadata"
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

// ClusterLie is the lying-disk rate of the default cluster faults
// (DefaultClusterFaults): about five lies in a run of the default length,
// all on one node.
const ClusterLie = 0.0004

// startLies picks the liar, a founder, when lies are on.
func (c *sim) startLies() {
	if c.cfg.Faults.Lie == 0 {
		return
	}
	c.liar = c.founders[c.rng.IntN(len(c.founders))]
	liarNode := func() *node {
		for _, n := range slices.Concat(c.nodes, c.gone) {
			if n.id == c.liar {
				return n
			}
		}
		return nil
	}
	c.lies = newLies(c,
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

// isLiar reports whether n is the node whose disk lies.
func (c *sim) isLiar(n *node) bool { return c.lies != nil && n.id == c.liar }

// liedTo reports whether n's copy of key may be damaged: n is the liar
// and a lie touched key's files (or a file outside every partition
// directory, the journal).
func (c *sim) liedTo(n *node, key incKey) bool {
	return c.isLiar(n) && c.lies.damageOK(key)
}

// damageExplained reports whether a's answer may report damage: it was
// answered by the liar, for a partition a lie touched. Any other node's
// disk tells the truth, and a node never serves a peer's damage (a
// forwarded read reaches the liar only through a client here).
func (c *sim) damageExplained(a *attempt) bool {
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

// deadIncarnationDamaged reports whether n is the liar and a lie damaged
// the incarnation file of ns's directory while it held an incarnation
// that n's metadata no longer commits (knownDeadIncarnationDamage).
func (c *sim) deadIncarnationDamaged(n *node, ns metadata.Namespace) bool {
	if !c.isLiar(n) {
		return false
	}
	info, ok := n.meta.Partition(ns)
	for key, classes := range c.lies.keys {
		if key.ns == ns && classes["incarnation"] && (!ok || key.epoch != info.CreatedRevision) {
			return true
		}
	}
	return false
}

package groups

import "github.com/parkway-io/parkway/internal/replica"

// Compaction is one group's compaction trigger: the payload bytes
// applied since the last snapshot, and a compaction forced by a member
// joining (a newcomer takes only a snapshot whose configuration names
// it). The owner asks Due, with the node's policy (one
// replica.CompactionPolicy for all its groups of a kind, kept once rather
// than per group), after it applied a Ready, compacts behind a snapshot
// of its application when it is due, and reports Compacted.
type Compaction struct {
	since  int64
	forced bool
}

// Applied counts payload bytes applied since the last snapshot.
func (c *Compaction) Applied(bytes int64) { c.since += bytes }

// Force makes the next Due true once anything was applied since the
// last snapshot: a member joined.
func (c *Compaction) Force() { c.forced = true }

// Due reports whether g's log is to be compacted now, by policy p or
// forced. A forced compaction with nothing applied since the last
// snapshot is dropped: that snapshot already names the newcomer.
func (c *Compaction) Due(g *replica.Group, p replica.CompactionPolicy) bool {
	if !c.forced && !p.Due(g, c.since) {
		return false
	}
	if g.Applied() <= g.SnapshotIndex() {
		c.forced = false
		return false
	}
	return true
}

// Compacted records a compaction: the count starts again.
func (c *Compaction) Compacted() { c.since, c.forced = 0, false }

// Restored restarts the count: the member installed a snapshot. A
// forced compaction stays due (the snapshot a member installed is not
// one its own log is compacted behind).
func (c *Compaction) Restored() { c.since = 0 }

package groups

import "github.com/parkway-io/parkway/internal/replica"

// Compaction is one group's compaction trigger: the payload bytes
// applied since the last snapshot, beside the group's own judgement that
// its latest snapshot leaves out a member added since
// (replica.Group.SnapshotStale: a newcomer takes only a snapshot whose
// configuration names it). The owner asks Due, with the node's policy
// (one replica.CompactionPolicy for all its groups of a kind, kept once
// rather than per group), after it applied a Ready, compacts behind a
// snapshot of its application when it is due, and reports Compacted.
//
// The staleness is read from the group, not recorded when the owner sees
// a member join: a note of the join was lost where the group was
// reopened past the change (Config.Applied: the change is not applied
// again), and a leader elected later must compact as well if its own
// snapshot leaves the newcomer out.
type Compaction struct {
	since int64
}

// Applied counts payload bytes applied since the last snapshot.
func (c *Compaction) Applied(bytes int64) { c.since += bytes }

// Due reports whether g's log is to be compacted now: by policy p, or
// because its latest snapshot leaves out a member added since (once
// anything was applied after that snapshot: the change that added the
// member is, so a stale snapshot always has something to compact).
func (c *Compaction) Due(g *replica.Group, p replica.CompactionPolicy) bool {
	if g.Applied() <= g.SnapshotIndex() {
		return false
	}
	return p.Due(g, c.since) || g.SnapshotStale()
}

// Compacted records a compaction: the count starts again.
func (c *Compaction) Compacted() { c.since = 0 }

// Restored restarts the count: the member installed a snapshot.
func (c *Compaction) Restored() { c.since = 0 }

package replica

// CompactionPolicy decides when a group's raft log is compacted behind a
// snapshot of its state machine: the one policy of the metadata group and
// of every partition group.
type CompactionPolicy struct {
	// Entries compacts once this many entries were applied since the last
	// snapshot (0: never by count).
	Entries uint64
	// Bytes compacts once this many payload bytes were applied since the
	// last snapshot (0: never by size).
	Bytes int64
}

// Due reports whether g's log should be compacted now, given the payload
// bytes applied since its last snapshot.
func (p CompactionPolicy) Due(g *Group, bytesSince int64) bool {
	if g.Applied() <= g.SnapshotIndex() {
		return false
	}
	return (p.Entries > 0 && g.Applied()-g.SnapshotIndex() >= p.Entries) ||
		(p.Bytes > 0 && bytesSince >= p.Bytes)
}

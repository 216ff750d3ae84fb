package shard

// flushRaft hands the raft messages held back during a unit of pump work
// to the transport (Replication.Flush).
func (rg *raftGroups) flushRaft() {
	if r := rg.cfg; r != nil && r.Flush != nil {
		r.Flush()
	}
}

// BeforeSave hands the messages held back so far to the transport before
// a group's raft log is written (replica.BeforeSave): a leader's appends
// leave before its fsync, and no group's messages wait for another
// group's.
func (h groupHandler) BeforeSave() { h.rg.flushRaft() }

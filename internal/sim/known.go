package sim

// Fixed since the simulator found them (their classifications are gone,
// so a regression fails the test): proposal ids reissued after a restart,
// pending proposals answered "retry here" at teardown, an entry's later
// writes left unanswered when one failed, a torn hard state after a
// snapshot record, consumer offsets judged against the local log's end or
// skipped on an I/O error, and the metadata deduplication table missing
// from metadata snapshots; and stale leader reads (leader reads now go
// through raft's ReadIndex).
//
// Known engine bugs the simulator finds (Violation.Known): each violation
// that is an instance of one is classified as such where it is detected,
// as narrowly as the simulator can tell, and the cluster test skips the
// seed (-sim.known fails on it instead).
//
// TODO(sim): remove each constant, and the classification that points at
// it, once the fix lands.
const (
	// knownMetaReadyError: when the metadata group's Ready fails (its raft
	// log refuses a write: ENOSPC, EIO), cluster.go's runMetadata logs it
	// and calls Handle again on its next turn; replica.Handle calls Ready
	// without the Advance of the failed one, and etcd raft panics ("two
	// accepted Ready structs without call to Advance"), taking the node's
	// process down. The default cluster faults spare the metadata raft log
	// (FaultRates.SpareMetadataLog); -sim.metafaults does not.
	knownMetaReadyError = "a failed metadata Ready is followed by another Handle; etcd raft panics (cluster.go runMetadata)"
)

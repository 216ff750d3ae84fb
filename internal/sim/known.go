package sim

// Fixed since the simulator found them (their classifications are gone,
// so a regression fails the test): proposal ids reissued after a restart,
// pending proposals answered "retry here" at teardown, an entry's later
// writes left unanswered when one failed, a torn hard state after a
// snapshot record, consumer offsets judged against the local log's end or
// skipped on an I/O error, and the metadata deduplication table missing
// from metadata snapshots; stale leader reads (leader reads now go
// through raft's ReadIndex); and a metadata member whose raft log refused
// one write leaving the group until its node restarted (it is reopened
// from its log now, and the default cluster faults reach that log).
//
// Known engine bugs the simulator finds are classified where they are
// detected (Violation.Known, as narrowly as the simulator can tell), and
// the cluster test skips such seeds (-sim.known fails on them instead).
// None is known at present.

package sim

// kind is what a run's course leaves to its harness, where the nodes'
// engine kinds make the harnesses differ: the scheduler step, and
// quiescence's parts (base.quiesce, one course for both). A single node
// reopens at once after a crash and picks among a fixed set of actions
// (client, shard step, reconcile pass, clock move); a cluster picks among
// the engine work that is ready on its members, whose crashes keep them
// down a while.
type kind interface {
	// tick is one scheduler step.
	tick()
	// faultsOff ends every fault, for quiescence.
	faultsOff()
	// settle runs rounds until the run is calm (base.settleLoop),
	// reporting false on a violation.
	settle() bool
	// finalReads reads every partition back, reporting true when a read
	// met a partition fenced after a failed fsync, which restartFenced
	// then restarts the node for.
	finalReads() bool
	restartFenced()
}

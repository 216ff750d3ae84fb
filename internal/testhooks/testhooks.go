// Package testhooks holds switches that deliberately break parkway.
//
// They exist only so the deterministic simulator (internal/sim) can prove
// that it catches the bugs they introduce: a test flips one, expects the
// simulator to report an invariant violation within its default seeds, and
// flips it back. Nothing else may set them, and a normal build cannot:
// the switches exist only in a build with the tag parkway_brokenbuild
// . In every other
// build each switch is a value whose Load is the constant false, so the
// broken branch is dead code the compiler drops, and a test that would
// flip one does not compile without the tag. CI runs those tests with
// the tag (go test -tags parkway_brokenbuild -run
// 'ServeStaleParked|ClusterCatchesNo' ./shard ./internal/sim).
//
// The package imports nothing of parkway, so any package may read it.
//
// Eleven switches are left. The other broken builds the simulator proves
// it catches (a fast-skip that ignores parked frames, raft messages
// without their incarnation) are built from outside, through the engine's
// public seams (internal/sim's Break* variables); these break checks no
// seam reaches: the shard's re-dispatch (ServeStaleParked), the bound on
// a peer's raft term relative to the receiver's (NoTermStep), the
// budget of forwarded requests (NoForwardBudget) — these two caught by
// the cluster simulator's misbehaving member (internal/sim, cpeer.go) —
// the metadata read barrier's wait for a confirmed, applied read
// index (NoReadIndexWait, caught by the cluster simulator's barriers),
// and AddNode's configuration change (NoJoinConfChange, caught by the
// cluster simulator's node additions, which run AddNode's own steps),
// a consumer group's committed offset (CommitSkipsOffset, caught by
// the cluster simulator's group members), and a consumer's count of
// handled positions (CommitBeforeHandled, caught by the same members,
// which step the consumer's own driver), its interval commit
// (IntervalCommitsFetched, caught by the same members under
// CommitOnInterval), and the stall deadline of an inbound frame
// (NoStallTimeout, caught by the cluster simulator's member that stalls
// frames, which runs the transport's own inbound budget,
// internal/inbound), the bound on connections still handshaking
// (NoHandshakeBound) and the slot a closed connection gives back
// (CloseKeepsSlot), both caught by the cluster simulator's connection
// flood, which runs the transport's own connection slots
// (internal/slots).
package testhooks

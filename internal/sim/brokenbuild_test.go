//go:build parkway_brokenbuild

package sim_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/sim"
	"github.com/parkway-io/parkway/internal/testhooks"
)

func init() {
	brokenBuilds["testhooks.ServeStaleParked"] = &testhooks.ServeStaleParked
	brokenBuilds["testhooks.NoTermStep"] = &testhooks.NoTermStep
	brokenBuilds["testhooks.NoForwardBudget"] = &testhooks.NoForwardBudget
	brokenBuilds["testhooks.NoReadIndexWait"] = &testhooks.NoReadIndexWait
	brokenBuilds["testhooks.NoJoinConfChange"] = &testhooks.NoJoinConfChange
	brokenBuilds["testhooks.CommitSkipsOffset"] = &testhooks.CommitSkipsOffset
	brokenBuilds["testhooks.CommitBeforeHandled"] = &testhooks.CommitBeforeHandled
	brokenBuilds["testhooks.IntervalCommitsFetched"] = &testhooks.IntervalCommitsFetched
	brokenBuilds["testhooks.NoStallTimeout"] = &testhooks.NoStallTimeout
	brokenBuilds["testhooks.CloseKeepsFrame"] = &testhooks.CloseKeepsFrame
	brokenBuilds["testhooks.NoHandshakeBound"] = &testhooks.NoHandshakeBound
	brokenBuilds["testhooks.CloseKeepsSlot"] = &testhooks.CloseKeepsSlot
}

// Serving parked frames stamped with another incarnation (instead of
// rejecting them) is caught as a message crossing incarnations.
func TestCatchesServeStaleParked(t *testing.T) {
	expectCaught(t, "testhooks.ServeStaleParked", 2)
}

// A term bound that is not relative to the receiver's term (only the
// absolute cap, as before issue 26) lets a misbehaving member's forged
// term of 2^62 or 2^62−1 through: the group it reaches adopts it, can
// elect at most once more, and never settles. Forged terms run at ten
// times their default rate, so that early seeds forge extreme ones.
func TestClusterCatchesNoTermBound(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Peer.Terms *= 10
		return cfg
	}, "testhooks.NoTermStep", 0, 1, 3, 4, 7, 8)
}

// Without the forwarded-request budget a node holds every request a
// flooding member sends it until it answers it: caught when a node holds
// more than its budget (invariant 10).
func TestClusterCatchesNoForwardBudget(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "testhooks.NoForwardBudget", 10)
}

// A read barrier answered at once, before the metadata group confirmed a
// read index and before the node applied it, is caught when a barrier
// on a node behind the others returns (invariant 11).
func TestClusterCatchesNoReadIndexWait(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "testhooks.NoReadIndexWait", 11)
}

// An AddNode that proposes its AddNode command alone, without the
// metadata group's membership change that carries it, leaves the
// metadata naming a node the group does not have as a member: caught
// after the first action that applies it (invariant 8). The simulator
// adds nodes through the engine's own AddNode steps (host.MemberChange),
// so the broken branch is the shipped code's.
func TestClusterCatchesNoJoinConfChange(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "testhooks.NoJoinConfChange", 8)
}

// A group commit that stores one offset past the one committed leaves a
// message below the group's committed offset that no member was handed:
// caught on the member seeds when a member's next poll of the partition
// ends, or once the run settled (invariant 12) — or, when a member is
// handed that message after the commit stepped over it, as a delivery
// below the committed offset (invariant 9: seed 0 since stalled frames
// moved the schedules).
func TestClusterCatchesNoDeliveryBeforeCommit(t *testing.T) {
	expectCaughtIn(t, defaultMemberSeeds, memberConfig, "testhooks.CommitSkipsOffset", 12, 9)
}

// A consumer that counts a batch as handled when its fetch answers,
// before its application was handed any of it, commits the messages of
// a batch it then drops (its partition revoked while the batch waited
// for the application, or the member's fence refusing it): the members
// step the Consumer's own driver (host.ConsumerDriver), so the broken
// decision is the shipped code's, caught when a member's next poll of
// the partition ends, or once the run settled (invariant 12).
func TestClusterCatchesNoHandlingBeforeCommit(t *testing.T) {
	expectCaughtIn(t, defaultMemberSeeds, consumerConfig, "testhooks.CommitBeforeHandled", 12)
}

// A consumer whose interval commit (CommitOnInterval) names where its
// fetches stand rather than what its application handled commits the
// batches queued for the application; one dropped after (its partition
// revoked, the member's fence refusing it) is committed all the same.
// The members draw their commit policy from the seed and step the
// Consumer's own driver, whose deadline and offsets decide the interval
// commit (host.ConsumerDriver.IntervalCommit): caught when a member's
// next poll of the partition ends, or once the run settled (invariant
// 12).
func TestClusterCatchesIntervalCommitsFetched(t *testing.T) {
	expectCaughtIn(t, defaultMemberSeeds, consumerConfig, "testhooks.IntervalCommitsFetched", 12)
}

// Without the stall deadline a member that stops inside a frame keeps
// its charge of the receiver's inbound budget until the frame's
// FrameTimeout: caught when the receiver's read deadlines pass the
// frame's stall deadline with its bytes still held (invariant 13).
// Stalled frames run at ten times their default rate.
func TestClusterCatchesNoStallTimeout(t *testing.T) {
	expectClusterCaught(t, func(seed uint64) sim.Config {
		cfg := sim.DefaultClusterConfig(seed)
		cfg.Faults.Peer.Stall *= 10
		return cfg
	}, "testhooks.NoStallTimeout", 13)
}

// A connection closed mid-frame that keeps the frame's charge leaks it
// from the receiver's budget: caught as the connection closes (a closed
// connection must hold nothing: invariant 13), here on a slow link whose
// frame missed its read deadline, with the stalling member off so that
// only the slow links close connections mid-frame.
func TestClusterCatchesNoChargeBackOnClose(t *testing.T) {
	expectClusterCaught(t, slowLinksAloneConfig, "testhooks.CloseKeepsFrame", 13)
}

// slowLinksAloneConfig has slow links on and the stalling member off:
// only slow links close connections mid-frame.
func slowLinksAloneConfig(seed uint64) sim.Config {
	cfg := sim.DefaultClusterConfig(seed)
	cfg.Faults.Peer.Stall = 0
	return cfg
}

// The stall deadline forgotten is caught on slow links too, the stalling
// member off: a slow frame whose next chunk is late keeps its charge
// past the deadline the simulator computes for it (invariant 13).
func TestClusterCatchesNoStallTimeoutOnSlowLinks(t *testing.T) {
	expectClusterCaught(t, slowLinksAloneConfig, "testhooks.NoStallTimeout", 13)
}

// Connections that never finish their handshake bounded by MaxConns
// alone, as before issue 28, let a flood hold more than MaxHandshakes
// slots and, from one address, take the slots an honest member's redial
// needs: caught on the default cluster seeds' connection floods
// (invariant 14).
func TestClusterCatchesNoHandshakeBound(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "testhooks.NoHandshakeBound", 14)
}

// A connection whose close keeps its slot leaks one of MaxConns per
// close: caught on the default cluster seeds' connection floods when the
// slots held outnumber the connections open (invariant 14).
func TestClusterCatchesNoSlotBackOnClose(t *testing.T) {
	expectClusterCaught(t, sim.DefaultClusterConfig, "testhooks.CloseKeepsSlot", 14)
}

package shard

import (
	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/metrics"
)

// handlerOf returns o's side of its group as groups.Step and
// groups.Process drive it (the Handler its Ready goes to included).
// Converting a groupHandler value to the interface allocates, and
// processReady hands one to every Process — a few times per replicated
// produce on every node — so each partition keeps its handler in its
// owned and hands out a pointer to it, which converts without allocating
// (and costs no heap object of its own per replica). The handler holds
// only the raft groups and o, which never change for o.
func (rg *raftGroups) handlerOf(o *owned) groups.Member {
	if o.rep.handler.o == nil {
		o.rep.handler = groupHandler{rg: rg, o: o}
	}
	return &o.rep.handler
}

// AcceptsQuiesce implements groups.Member: a quiesce heartbeat stops the
// group's ticks only with Replication.Quiesce, and only while nothing is
// pending on it here (replicated.idle).
func (h groupHandler) AcceptsQuiesce() bool {
	return h.rg.cfg.Quiesce && h.o.rep.idle()
}

// Quiesced implements groups.Member: the follower took a quiesce
// heartbeat, and its group is no longer ticked; it sleeps, and hibernates
// if it stays asleep (groups.Awake.Sleep, hibernate in quiesce.go).
func (h groupHandler) Quiesced() {
	rg, o := h.rg, h.o
	if rg.q.awake.Has(o.p.Namespace(), o) {
		rg.q.awake.Sleep(o.p.Namespace(), o)
		rg.m.RaftQuiesces.Inc()
		rg.shedIdle(o)
		rg.syncQuiesced(o)
		rg.armTick() // counts its sleep
	}
}

// Refused implements groups.Member: a message no correct member sends is
// counted and logged (one out of reach as a warning: a peer's term ran
// away), one raft refused itself only logged.
func (h groupHandler) Refused(reason string, err error) {
	rg, ns := h.rg, h.o.p.Namespace()
	switch reason {
	case metrics.ReasonOutOfReach:
		rg.m.Drop(OpRaft.String(), reason)
		rg.log.Warn("raft message with a term out of reach dropped", "ns", ns, "error", err)
	case "":
		rg.log.Debug("raft step refused", "ns", ns, "error", err)
	default:
		rg.m.Drop(OpRaft.String(), reason)
		rg.log.Debug("invalid raft message dropped", "ns", ns, "error", err)
	}
}

// Stepped implements groups.Member: the group has work.
func (h groupHandler) Stepped() { h.rg.markReady(h.o) }

// Failed implements groups.Member: the partition is fenced and rebuilt.
func (h groupHandler) Failed(err error) { h.rg.failGroup(h.o, err) }

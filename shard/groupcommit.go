package shard

// Group commit for raft. A leader proposes the writes buffered for a
// partition as one raft entry (flushProposals). While an entry it
// proposed is in flight — proposed, not yet applied here — the writes
// that arrive are not proposed on their own: they gather behind it and
// are proposed together, as one entry and one round of frames, the
// moment the last entry in flight is applied (or dropped, when
// leadership moves), or once maxGroup of them are gathered. Concurrent
// synchronous producers then share entries as the ProduceAsync ring's
// queued produces do; a lone producer finds nothing in flight and is
// proposed at once, so it waits for nothing more than before. Holding a
// write behind an entry in flight costs it no commit it would have had:
// raft applies the log in order, so it could not be answered before that
// entry anyway, only its round trip overlaps less.

// queuePropose buffers f, a write admitted on o's leader, for the next
// entry of o's group.
func (rg *raftGroups) queuePropose(o *owned, f Frame) {
	o.rep.proposeBuf = append(o.rep.proposeBuf, f)
	rg.proposed++
	if !o.rep.proposeQueued && (len(o.rep.pending) == 0 || len(o.rep.proposeBuf) >= maxGroup) {
		rg.queueProposal(o)
	}
}

// queueProposal puts o on the list flushProposals proposes from.
func (rg *raftGroups) queueProposal(o *owned) {
	o.rep.proposeQueued = true
	rg.proposing = append(rg.proposing, o)
}

// releaseProposals queues the writes gathered behind o's entries in
// flight once none is left: the last was applied, or leadership moved
// and they were answered. settle proposes them before it returns.
func (rg *raftGroups) releaseProposals(o *owned) {
	if len(o.rep.pending) == 0 && len(o.rep.proposeBuf) > 0 && !o.rep.proposeQueued {
		rg.queueProposal(o)
		rg.released = true
	}
}

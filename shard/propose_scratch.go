package shard

// maxEntryBuf bounds the entry scratch a shard keeps between flushes: a
// large batch's buffer is let go rather than held for the shard's life.
const maxEntryBuf = 64 << 10

// keepEntryBuf keeps data, an entry just handed to Propose (which copies
// it), as the scratch the next flushProposals encodes into.
func (rg *raftGroups) keepEntryBuf(data []byte) {
	if cap(data) <= maxEntryBuf {
		rg.entryBuf = data[:0]
	}
}

// reuseProposing gives flushProposals' list back as s.proposing when
// nothing was queued meanwhile, so the next flush appends without
// allocating.
func (rg *raftGroups) reuseProposing(list []*owned) {
	clear(list)
	if rg.proposing == nil {
		rg.proposing = list[:0]
	}
}

// reuseFrames gives an applied entry's frame list, answered and dropped
// from o.pending, back to o as the buffer its next produces are gathered
// in, unless some are being gathered already. The frames were copied out
// of it (applyFrames and the apply batch hold Frame values).
func (rg *raftGroups) reuseFrames(o *owned, frames []Frame) {
	if cap(frames) == 0 || len(o.rep.proposeBuf) > 0 {
		return
	}
	clear(frames)
	o.rep.proposeBuf = frames[:0]
}

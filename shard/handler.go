package shard

import "github.com/parkway-io/parkway/internal/replica"

// handlerOf returns o's raft Handler. Converting a groupHandler to the
// interface allocates, and processReady hands one to every Handle — a few
// times per replicated produce on every node — so each partition boxes
// its handler once and keeps it. The handler holds only the shard and o,
// which never change for o.
func (rg *raftGroups) handlerOf(o *owned) replica.Handler {
	if o.rep.handler == nil {
		o.rep.handler = groupHandler{s: rg.sh, o: o}
	}
	return o.rep.handler
}

package host

import "github.com/parkway-io/parkway/metadata"

// Requests forwarded to a partition's leader (Engine.forward) wait for
// the leader's answer: a waiting poll up to its MaxWait, anything else up
// to the forward timeout. A leader that dies, or is cut off and steps
// down, never answers: without news the poll's reader waited out its
// MaxWait (5 s by default) although the new leader was known a fraction
// of a second after the failure. So each forwarded request is watched:
// when this node learns that its partition has a new leader (its
// replica's raft group reports it, shard Replication.LeaderChanged) or
// that the node it went to is dead (node liveness), forward gives up on
// the old leader. A read is sent again where the news points (the old
// leader's late answer finds no one waiting); a write ends with an
// unknown outcome, as at the timer, and the caller retries it (a produce
// with its producer sequence, which the partition deduplicates) — on a
// new leader only, not on a death node liveness declared: a node busy
// taking a large batch can look dead for a while, and its write would
// start over.
//
// Without news, a request is sent once to its node and never stacked on
// it again: a leader slow to take or serve it (a multi-MiB batch on a
// starved machine, where each forward timeout used to add one more copy,
// 4–5 in all) would only fall further behind. At each forward timeout
// the sender asks instead whether the node still holds the request
// (KindProbe, answered from the forward budget's record of the requests
// received and not yet answered) and waits on while it does, or while
// the question goes unanswered, up to the caller's context and the
// request's deadline. A "no" means the request or its answer was lost —
// the answer is sent before the record is dropped, on the same
// connection, so it arrives first — and ends the attempt with an unknown
// outcome; the caller's retry sends it again.

// forwardWatch is one watched forwarded poll: the node it went to, and
// where the news arrives (buffered: the newest unread news is enough).
type forwardWatch struct {
	to uint64
	c  chan forwardEvent
}

// forwardEvent is news for a watched poll: the partition's new leader
// (0: none known yet), or that the node the poll went to is dead.
type forwardEvent struct {
	lead uint64
	dead bool
}

// watch registers forwarded poll id of ns, sent to node to.
func (c *clusterNode) watch(id uint64, ns metadata.Namespace, to uint64) *forwardWatch {
	w := &forwardWatch{to: to, c: make(chan forwardEvent, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watching[ns]
	if ws == nil {
		ws = make(map[uint64]*forwardWatch)
		c.watching[ns] = ws
	}
	ws[id] = w
	return w
}

// unwatch forgets forwarded poll id of ns.
func (c *clusterNode) unwatch(id uint64, ns metadata.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watching[ns]
	delete(ws, id)
	if len(ws) == 0 {
		delete(c.watching, ns)
	}
}

// tell hands w the news ev, merged with news it has not read yet (a
// death is not forgotten, a known leader not replaced by "none"). Its
// callers hold c.mu, so there is one writer: once it emptied the buffer,
// the send cannot block.
func (w *forwardWatch) tell(ev forwardEvent) {
	select {
	case old := <-w.c:
		ev.dead = ev.dead || old.dead
		if ev.lead == 0 {
			ev.lead = old.lead
		}
	default:
	}
	w.c <- ev
}

// leaderChanged is shard Replication.LeaderChanged: ns's group on this
// node learned its leader is lead (0: none). It runs on a shard's pump.
func (c *clusterNode) leaderChanged(ns metadata.Namespace, lead uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watching[ns] {
		w.tell(forwardEvent{lead: lead})
	}
}

// peerDead tells the polls forwarded to peer that it was declared dead.
func (c *clusterNode) peerDead(peer uint64) {
	c.hints.dropNode(peer)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ws := range c.watching {
		for _, w := range ws {
			if w.to == peer {
				w.tell(forwardEvent{dead: true})
			}
		}
	}
}

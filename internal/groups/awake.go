package groups

// Awake is a host's quiescence state (quiesce.go): the set of groups it
// ticks (the others are quiesced, or held), in the order they woke, each
// with its quiescence clock, the ticks since it woke or its owner last
// gave it work (Busy). A host that ticks
// them in that order ticks them in an order its history decides, not map
// iteration, so a simulator's run is reproducible. K names a group (a
// partition's namespace); G is the host's handle of one incarnation of
// it, so a rebuilt group replaces the entry of the one it replaced. A
// host of many groups (a shard) and a host of one (the metadata member)
// keep the same set. The zero value is empty: every group quiesced. It is
// not safe for concurrent use.
type Awake[K comparable, G comparable] struct {
	groups []G
	keys   []K
	ticks  []int // ticks since each woke or was busy (Quiesce, Busy)
	at     map[K]int
	// buf is Turn's copy; next is where the next turn starts when more
	// groups are awake than a turn takes.
	buf  []G
	next int
	// The followers waiting to hibernate (hibernate.go): now counts the
	// host's ticks, sleepers holds the followers that quiesced in the
	// order they did with the tick they did at, from head on, and slept
	// the tick of each one's latest entry (an older entry is stale).
	now      int64
	sleepers []sleeper[K, G]
	head     int
	slept    map[K]int64
}

// Len is the number of awake groups.
func (a *Awake[K, G]) Len() int { return len(a.groups) }

// Has reports whether g, under k, is awake.
func (a *Awake[K, G]) Has(k K, g G) bool {
	i, ok := a.at[k]
	return ok && a.groups[i] == g
}

// Add wakes g under k and reports whether it was not awake; a group that
// wakes starts its quiescence clock again. An entry of another handle
// under k (an earlier incarnation) is dropped first.
func (a *Awake[K, G]) Add(k K, g G) bool {
	if a.Has(k, g) {
		return false
	}
	a.Remove(k) // and a wait to hibernate ends
	if a.at == nil {
		a.at = make(map[K]int)
	}
	a.at[k] = len(a.groups)
	a.groups = append(a.groups, g)
	a.keys = append(a.keys, k)
	a.ticks = append(a.ticks, 0)
	return true
}

// Busy restarts the quiescence clock of the group under k, if it is
// awake: its owner just gave it work of its own (a proposal), so it
// counts QuiesceAfterTicks more ticks before its leader may quiesce it.
// A group that wakes restarts its clock (Add), but one that never went to
// sleep does not wake: without this, a leader producing steadily kept
// counting ticks from the first one, and quiesced on the first tick that
// found it between two writes — its last entry applied, the next not yet
// proposed — though the next write was microseconds away. Each such
// quiesce cost the write after it the quiesce heartbeats, each
// replica's writeback of its raft log on its pump (the interval policy's
// syncQuiesced in the shard) and the wakes of all three (issue 33: R1,
// one producer waiting for each ack, a few times a second on three
// nodes over TCP). With it, a group quiesces only after a whole tick
// interval without a proposal.
func (a *Awake[K, G]) Busy(k K) {
	if i, ok := a.at[k]; ok {
		a.ticks[i] = 0
	}
}

// Remove stops ticking the group under k: it quiesced, or it is gone.
// The last awake group takes its place (the order stays a function of
// what happened).
func (a *Awake[K, G]) Remove(k K) {
	delete(a.slept, k)
	i, ok := a.at[k]
	if !ok {
		return
	}
	last := len(a.groups) - 1
	if i != last {
		a.groups[i], a.keys[i], a.ticks[i] = a.groups[last], a.keys[last], a.ticks[last]
		a.at[a.keys[i]] = i
	}
	var g G
	var key K
	a.groups[last], a.keys[last] = g, key
	a.groups, a.keys, a.ticks = a.groups[:last], a.keys[:last], a.ticks[:last]
	delete(a.at, k)
}

// Ticks is how many ticks the group under k was counted (Quiesce) since
// it woke or was busy (Busy); 0 when it is not awake.
func (a *Awake[K, G]) Ticks(k K) int {
	if i, ok := a.at[k]; ok {
		return a.ticks[i]
	}
	return 0
}

// Turn is the groups to tick this tick, a copy the caller may go through
// while ticking changes the set (valid until the next Turn): all of them,
// or, when budget is positive and more are awake, the next budget of them
// in turn, so a tick's work stays bounded however many groups are awake.
func (a *Awake[K, G]) Turn(budget int) []G {
	n := len(a.groups)
	clear(a.buf)
	a.buf = a.buf[:0]
	if budget <= 0 || n <= budget {
		a.next = 0
		a.buf = append(a.buf, a.groups...)
		return a.buf
	}
	start := a.next % n
	for i := range budget {
		a.buf = append(a.buf, a.groups[(start+i)%n])
	}
	a.next = start + budget
	return a.buf
}

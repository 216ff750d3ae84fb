package groups

// Hibernation (TiKV's hibernated regions): a follower whose group stayed
// quiesced HibernateAfterTicks drops its raft node
// (replica.Group.Hibernate), which is most of what an idle replica
// costs, and rebuilds it when anything needs it (a message, a tick, a
// campaign, a read, a proposal, node liveness's verdict on its leader).
// A leader keeps its node: etcd raft rebuilds every member as a
// follower, and leading again would take an election.
//
// The host's Awake keeps the followers waiting for it, so quiescence and
// hibernation live in one place, whoever the host: a follower that takes
// a quiesce heartbeat goes to sleep (Awake.Sleep rather than Remove), a
// wake ends the wait (Add), and the host's tick hands the followers that
// waited long enough to the host (Awake.Hibernate), which hibernates the
// ones it has nothing pending on. The wait, rather than hibernating at
// the quiesce heartbeat itself, keeps a leader's ordinary heartbeats that
// reach a follower after its quiesce heartbeat (sent before it, delivered
// late) from rebuilding the node each time: a benchmark whose groups
// hibernated at once took 25–77 s rather than 3 s to have every group
// quiesced.

// HibernateAfterTicks is how many host ticks a follower stays quiesced
// before its host hibernates it: 0.5 s at the default 10 ms tick, five
// election timeouts.
const HibernateAfterTicks = 50

// sleeper is a follower that quiesced at tick at.
type sleeper[K comparable, G comparable] struct {
	k  K
	g  G
	at int64
}

// Sleep stops ticking the follower g under k, which took a quiesce
// heartbeat: it is no longer awake, and HibernateAfterTicks ticks later,
// if nothing woke it, Hibernate hands it to its host.
func (a *Awake[K, G]) Sleep(k K, g G) {
	a.Remove(k)
	if a.slept == nil {
		a.slept = make(map[K]int64)
	}
	a.slept[k] = a.now
	a.sleepers = append(a.sleepers, sleeper[K, G]{k: k, g: g, at: a.now})
}

// Sleeping reports whether a follower waits to hibernate: the host keeps
// its tick running for it while nothing is awake.
func (a *Awake[K, G]) Sleeping() bool { return a.head < len(a.sleepers) }

// Hibernate counts ticks of the host's clock and calls hibernate with
// each follower that has slept HibernateAfterTicks since, unwoken; the
// host hibernates it if it has nothing pending on it (its group may have
// gone, been replaced, or have work the host knows of). Once no follower
// waits, the queue's memory goes: an idle host keeps none.
func (a *Awake[K, G]) Hibernate(ticks int64, hibernate func(K, G)) {
	a.now += ticks
	for a.head < len(a.sleepers) {
		s := a.sleepers[a.head]
		if a.now-s.at < HibernateAfterTicks {
			break
		}
		a.sleepers[a.head] = sleeper[K, G]{}
		a.head++
		if at, ok := a.slept[s.k]; !ok || at != s.at {
			continue // woken since, or asleep again from a later tick
		}
		delete(a.slept, s.k)
		hibernate(s.k, s.g)
	}
	switch {
	case a.head == len(a.sleepers):
		a.sleepers, a.head, a.slept = nil, 0, nil
	case a.head > len(a.sleepers)/2:
		n := copy(a.sleepers, a.sleepers[a.head:])
		clear(a.sleepers[n:])
		a.sleepers, a.head = a.sleepers[:n], 0
	}
}

package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// Consumer group members under faults (cluster mode, Config.GroupMembers;
// invariants 9 and 12, DESIGN behaviour 33). Each member is a client
// homed on one node, as a parkway.Member is joined through one Node, and
// makes the Member's own decisions (host.GroupMember, which parkway's
// Member holds: the fence, the heartbeat, where a poll starts, the
// commit, the generation adopted) and the Consumer's around them
// (host.ConsumerDriver, which parkway's Consumer holds): it joins group
// memberGroup of a topic, follows its generations as its home applies
// them (the fetches follow the assignment; a partition moving away is
// revoked: its handled position committed, then released by a heartbeat
// acknowledging the generation), heartbeats at a third of its session
// timeout acknowledging the driver's generation, polls the partitions
// it fetches with waiting polls (from the committed offset, then from
// where the last batch ended), queues each batch for its application,
// which takes it at a later step message by message, and commits after
// it. It hands a message over only through the fence a Consumer applies
// before each message (metadata.Store.CheckDelivery on its home node's
// store: its lease, from its last applied join, heartbeat or commit,
// and its home's committed assignment), checked when the poll is made,
// when its answer arrives and before each message. Faults do the rest:
// a network partition or a stop cuts a member's node off, its session lapses, the others take its
// partitions and commit, the network heals and its waiting poll —
// retried in place meanwhile — is answered with messages the group has
// committed since (cutMember makes that scenario a fault of its own).
// Invariant 9: no message below the group's committed
// offset (the largest any node has applied for the group's incarnation)
// is handed to an application.

// BreakMemberFence, when set, makes the simulated members fence a poll
// only when they make it, not when its answer arrives nor before each
// message: the Consumer
// before behaviour 33, for the proof that invariant 9 catches it. Only
// tests set it.
var BreakMemberFence atomic.Bool

// memberGroup is the group the members share on their topic; the random
// group commands (groupNames) never touch it.
const memberGroup = "members"

// gmember is one simulated group member.
type gmember struct {
	home uint64
	// The engine's group member (host.GroupMember, a parkway.Member's
	// state and decisions): its topic incarnation (TopicRevision 0: none
	// picked yet), its member ID (0: not joined), the generation it acts
	// in, its lease's start, its session timeout.
	host.GroupMember
	// groupRev is the group incarnation it acts in, lastBeat when it
	// last heartbeated.
	groupRev uint64
	lastBeat time.Time
	// drv is the member's Consumer (host.ConsumerDriver, a
	// parkway.Consumer's state and decisions): its fetches and their
	// positions, its handled positions, its revocation, the generation
	// it acknowledges. queue are the batches its fetches read that the
	// application has not taken yet (at most one a fetch, as a
	// Consumer's fetcher waits until the iterator takes its batch).
	drv   *host.ConsumerDriver
	queue []memberBatch
	// mode is the Consumer's commit policy, drawn per member from the
	// seed. pollAfter is when a fetch whose poll failed may poll again
	// (the driver's backoff, host.ConsumerDriver.FetchFailed), by
	// fetcher ID.
	mode      host.CommitMode
	pollAfter map[uint64]time.Time
	// What the application was told (its OnAssigned and OnRevoked):
	// told, the partitions its OnAssigned named in this membership and
	// no OnRevoked since; revokedTold, the partitions of the last
	// OnRevoked, of generation revokedGen — a message is handed out
	// only of a told partition, and a revocation releases only what
	// OnRevoked named (behaviour 33's promises, invariant 9).
	told        map[uint32]bool
	revokedTold []uint32
	revokedGen  uint64
	// Of the command in flight: its kind and Now; of a poll, the fetch;
	// of a commit, its offsets.
	doing  string
	now    int64
	fetch  host.Fetcher
	commit map[uint32]uint64
	// A lease renewal in flight (a heartbeat that releases nothing: no
	// log entry, see host.Engine.SendLease): its answer, the call that
	// forgets it, and when it is given up.
	lease       <-chan host.LeaseResult
	leaseCancel func()
	leaseUntil  time.Time
	leaseFor    string // "heartbeat" or "release"
}

// memberBatch is a batch one of a member's fetches read, queued for its
// application.
type memberBatch struct {
	f    host.Fetcher
	msgs []partition.Message
}

// startMembers creates the member clients (after the ordinary ones).
func (c *sim) startMembers() {
	for i := range c.cfg.GroupMembers {
		session := time.Duration(1500+c.rng.IntN(1500)) * time.Millisecond
		// A Consumer under one of the three commit policies (interval:
		// 20-500 ms), whose application never stalls (the member asks
		// between its steps).
		mode := host.CommitMode(c.rng.IntN(3))
		interval := time.Duration(20+c.rng.IntN(480)) * time.Millisecond
		m := &gmember{home: c.peers[i%len(c.peers)], GroupMember: host.GroupMember{Group: memberGroup, Session: session},
			mode: mode, pollAfter: map[uint64]time.Time{}, told: map[uint32]bool{},
			drv: host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, Commit: mode,
				MaxPollInterval: time.Hour, SessionTimeout: session, CommitInterval: interval,
				RetryMin: host.DefaultRetryBackoffMin, RetryMax: host.DefaultRetryBackoffMax}, c.clk.Now())}
		c.clients = append(c.clients, &client{id: len(c.clients), member: m})
	}
}

// members are the member clients.
func (c *sim) members() []*client {
	return c.clients[len(c.clients)-c.cfg.GroupMembers:]
}

// cutMember is the scenario of behaviour 33, as a fault: now and then,
// while member cl has a poll in flight and no partition is in force, its
// node is cut off from every other for longer than its session timeout
// (plus 0.5–1.5 s for the others to take its partitions and commit),
// then the network heals and the poll, retried in place meanwhile, is
// answered.
//
// In a join storm (Config.MemberPartitions) the first cut waits until the
// group has settled, and the next until it could have settled again
// after the last one healed: stormCutGap past it. Drawn at every poll of
// a thousand members, cuts otherwise followed one another as soon as the
// network healed, from before the group had even formed: the metadata
// leader's node was cut off about once a second, and the group never
// settled.
func (c *sim) cutMember(cl *client) {
	m, o, w := cl.member, cl.op, &c.netf
	if o == nil || o.kind != kindPoll || w.partitioned || c.quiescing || c.calming() || c.rng.IntN(20) != 0 {
		return
	}
	if c.cfg.MemberPartitions > 0 && (c.storm.settled == 0 || c.clk.Now().Before(c.storm.nextCut)) {
		return // a storm settles first, then between cuts
	}
	var rest []uint64
	for _, id := range c.memberIDs() {
		if id != m.home {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return
	}
	w.sides = [2][]uint64{{m.home}, rest}
	w.partitioned = true
	w.partitionEnd = c.clk.Now().Add(m.Session + c.randDuration(500*time.Millisecond, 1500*time.Millisecond))
	if c.cfg.MemberPartitions > 0 {
		c.storm.nextCut = w.partitionEnd.Add(stormCutGap)
	}
	c.faults.Partitions++
	c.faults.MemberCuts++
	c.event("net partition (member %d's node cut off with its poll op=%d in flight) %v | %v until %v",
		cl.id, o.id, w.sides[0], w.sides[1], w.partitionEnd.Sub(epoch0))
	c.applyCuts()
}

// stormCutGap is how long after a member cut heals a join storm's next
// may start: the longest session timeout (a member cut off expires
// within it and rejoins) and as long again for the rebalances.
const stormCutGap = 6 * time.Second

// stormState is what a join storm's run measures (see Result).
type stormState struct {
	started       time.Time // the first member's join
	settled       time.Duration
	deliveredThen int
	nextCut       time.Time
}

// stormCheck records when a join storm's group first settles: every
// member in the group on the metadata leader's store, every partition
// held by one and none moving. It looks every 64th step (reading the
// group copies it).
func (c *sim) stormCheck() {
	st := &c.storm
	if c.cfg.MemberPartitions == 0 || st.settled != 0 || c.quiescing {
		return
	}
	if st.started.IsZero() {
		if c.ops.MemberJoins > 0 {
			st.started = c.clk.Now()
		}
		return
	}
	if c.actions%64 != 0 {
		return
	}
	var meta *metadata.Store
	for _, n := range c.nodes {
		if !n.down && n.meta != nil && n.eng != nil && n.eng.MetadataStatus().Leader == n.id {
			meta = n.meta
		}
	}
	if meta == nil {
		return
	}
	m := c.members()[0].member
	g, ok := meta.Group(m.Stream, m.Topic, memberGroup)
	if !ok {
		return
	}
	moving, free := 0, 0
	for _, p := range g.Partitions {
		if p.Holder == 0 {
			free++
		}
		if p.Next != 0 {
			moving++
		}
	}
	if len(g.Members) != c.cfg.GroupMembers || moving > 0 || free > 0 {
		if c.actions%4096 == 0 {
			c.event("storm unsettled: %d members of %d, generation %d, %d partitions moving, %d free", len(g.Members), c.cfg.GroupMembers, g.Generation, moving, free)
		}
		return
	}
	st.settled = c.clk.Now().Sub(st.started)
	st.deliveredThen = c.ops.MemberDelivered
	c.event("storm settled %v after the first join: %d members, generation %d, %d messages delivered", st.settled, len(g.Members), g.Generation, st.deliveredThen)
}

// stormRunning reports whether a join storm's run goes on past its
// steps (Config.StormFor): it has not settled and delivered after it yet,
// and StormFor has not passed since the first join.
func (c *sim) stormRunning() bool {
	st := &c.storm
	if c.viol != nil || c.cfg.MemberPartitions == 0 || c.cfg.StormFor == 0 {
		return false
	}
	if st.settled != 0 && c.ops.MemberDelivered > st.deliveredThen {
		return false
	}
	return !st.started.IsZero() && c.clk.Now().Sub(st.started) < c.cfg.StormFor
}

// memberAct lets member client cl start its next operation.
func (c *sim) memberAct(cl *client) {
	m := cl.member
	if m.lease != nil && !c.leaseDone(cl) {
		return // a renewal in flight
	}
	home := c.node(m.home)
	if home == nil || !home.reachable() || !home.joined || c.quiescing || c.calming() {
		return // its process is down or paused with its node
	}
	now := c.clk.Now()
	meta := home.meta
	t, ok := c.memberTopic(m, meta)
	if !ok {
		if c.cfg.MemberPartitions > 0 && cl == c.members()[0] {
			c.createStormTopic(cl, home)
		}
		return
	}
	// What a member reads of its group costs what it holds, not the
	// group's size, as a Member's reads do (GroupSummary, MemberOf,
	// GroupPartitionState): copies of a thousand members' group at every
	// act made a storm's seed take minutes.
	g, ok := meta.GroupSummary(t.Stream, t.ID, memberGroup)
	if !ok {
		c.memberMeta(cl, home, "create", metadata.CreateGroup{Stream: t.Stream, Topic: t.ID, Name: memberGroup, Revision: t.CreatedRevision})
		return
	}
	if g.CreatedRevision != m.groupRev {
		m.groupRev = g.CreatedRevision // a new incarnation
		c.memberGone(m)
	}
	m.now = now.UnixNano()
	if m.ID != 0 {
		// The Consumer follows its group's generations as its node
		// applies them (its regroup), not only at its heartbeats.
		c.memberFollow(cl, meta)
	}
	switch {
	case m.ID == 0:
		c.memberMeta(cl, home, "join", metadata.JoinGroup{Stream: t.Stream, Topic: t.ID, Group: memberGroup,
			Member: fmt.Sprintf("m%d", cl.id), SessionTimeout: m.Session, Now: m.now, Revision: t.CreatedRevision})
	case m.drv.Revoking():
		c.memberRevoke(cl, home)
	case c.memberIntervalCommit(cl, home, now):
		// The Consumer's interval commit, due by the driver's deadline.
	case m.mode == host.CommitManual && m.drv.Uncommitted() && c.rng.IntN(4) == 0:
		// A CommitManual application calls Commit now and then.
		c.memberCommit(cl, home, "commit", m.drv.ToCommit())
	case now.Sub(m.lastBeat) >= m.Session/3:
		// A heartbeat as a Consumer's: it acknowledges the generation
		// whose revoked partitions the consumer released
		// (host.ConsumerDriver.AckGen); if that releases partitions, a
		// commit of nothing, else a lease renewal at the metadata
		// leader, no log entry (host.GroupMember.Heartbeat).
		m.lastBeat = now
		renew, cmd := m.Heartbeat(meta, m.drv.AckGen(), m.now)
		if renew {
			c.memberLease(cl, home, "heartbeat")
			return
		}
		c.memberMeta(cl, home, "heartbeat", cmd)
	case len(m.queue) > 0 && c.rng.IntN(2) == 0:
		// The application takes the batch its fetch queued; the
		// fetches of other partitions go on meanwhile, as a
		// Consumer's goroutines do.
		c.memberDeliver(cl, home)
	default:
		// The members' topic needs messages: a member produces too, half
		// the time — in a storm less, so that a thousand members do not
		// bury the cluster in produces while they should heartbeat.
		produce := 2
		if c.cfg.MemberPartitions > 0 {
			produce = max(2, c.cfg.GroupMembers/8)
		}
		if c.rng.IntN(produce) == 0 {
			if ns, err := metadata.NewNamespace(t.Stream, t.ID, uint32(c.rng.IntN(t.Partitions))); err == nil {
				m.doing = "produce"
				c.dataOp(cl, home, ns, kindProduce)
			}
			return
		}
		c.memberPoll(cl, home)
	}
}

// memberFollow is the Consumer's regroup and assign: the member's part
// of its group on its home's committed metadata makes its generation
// the member's (host.GroupMember.Adopt), the fetches follow the
// assignment and a revocation starts for partitions moving away
// (host.ConsumerDriver.Assign, Start, Follow).
func (c *sim) memberFollow(cl *client, meta *metadata.Store) {
	m := cl.member
	v, err := meta.MemberOf(m.Stream, m.Topic, memberGroup, m.ID, m.Gen)
	if err != nil || !m.Adopt(v) {
		return
	}
	held := slices.DeleteFunc(slices.Clone(v.Held), func(p uint32) bool { return slices.Contains(v.Revoking, p) })
	_, added := m.drv.Assign(held, v.Revoking)
	if len(added) > 0 {
		// OnAssigned, then the fetches (host.ConsumerDriver.Assigned).
		for _, p := range added {
			m.told[p] = true
		}
		c.event("member %d (id %d gen %d) OnAssigned %v", cl.id, m.ID, m.Gen, added)
		m.drv.Assigned(added)
	}
	if m.drv.Follow(m.Gen, v.Revoking) {
		c.ops.MemberRevokes++
		c.event("member %d (id %d) revokes %v of generation %d", cl.id, m.ID, v.Revoking, m.Gen)
	}
}

// memberRevoke runs member cl's revocation up to its next operation,
// in the steps a Consumer's revoke takes (host.ConsumerDriver.RevokeNext;
// the application handles no message between the member's steps, so the
// wait ends at once): OnRevoked — a CommitManual application commits
// its handled positions there, half the time —, the commit of the
// revoked partitions' handled positions, then the heartbeat
// acknowledging the revocation's generation, whose answer ends it
// (RevokeDone). A release of partitions OnRevoked did not name breaks
// behaviour 33's promise (invariant 9).
func (c *sim) memberRevoke(cl *client, home *node) {
	m := cl.member
	for {
		st := m.drv.RevokeNext(false)
		switch st.Op {
		case host.RevokeWait:
			c.fail(0, "member %d: its revocation waits for a message the application is not handling", cl.id)
			return
		case host.RevokeCallback:
			for _, p := range st.Parts {
				delete(m.told, p)
			}
			m.revokedTold, m.revokedGen = st.Parts, st.Gen
			c.event("member %d (id %d gen %d) OnRevoked %v", cl.id, m.ID, m.Gen, st.Parts)
			if m.mode == host.CommitManual && m.drv.Uncommitted() && c.rng.IntN(2) == 0 {
				c.memberCommit(cl, home, "commit", m.drv.ToCommit())
				return
			}
		case host.RevokeCommit:
			if len(st.Offsets) > 0 {
				m.commit = st.Offsets
				c.memberMeta(cl, home, "revoke-commit", m.Commit(m.Gen, groupOffsets(st.Offsets), m.now))
				return
			}
		case host.RevokeRelease:
			if m.revokedGen != st.Gen || !slices.Equal(m.revokedTold, st.Parts) {
				c.fail(9, "member %d (id %d) releases %v of generation %d; its application's last OnRevoked named %v of generation %d",
					cl.id, m.ID, st.Parts, st.Gen, m.revokedTold, m.revokedGen)
				return
			}
			m.lastBeat = c.clk.Now()
			renew, cmd := m.Heartbeat(home.meta, st.Gen, m.now)
			if renew {
				c.memberLease(cl, home, "release")
				return
			}
			c.memberMeta(cl, home, "release", cmd)
			return
		}
	}
}

// memberIntervalCommit starts member cl's interval commit, if the
// driver says it is due (host.ConsumerDriver.IntervalCommit), and
// reports whether it did.
func (c *sim) memberIntervalCommit(cl *client, home *node, now time.Time) bool {
	m := cl.member
	if m.mode != host.CommitOnInterval {
		return false
	}
	offsets, due := m.drv.IntervalCommit(now)
	if !due || len(offsets) == 0 {
		return false
	}
	c.memberCommit(cl, home, "commit", offsets)
	return true
}

// memberCommit starts a Consumer's commit of offsets (what a commit
// names: ToCommit's, or an interval commit's).
func (c *sim) memberCommit(cl *client, home *node, what string, offsets map[uint32]uint64) {
	m := cl.member
	m.commit = offsets
	c.memberMeta(cl, home, what, m.Commit(m.Gen, groupOffsets(offsets), m.now))
}

// revoked ends member m's revocation, if one runs: released reports
// whether its generation's acknowledgement was answered.
func (c *sim) revoked(m *gmember, released bool) {
	if m.drv.Revoking() {
		m.drv.RevokeDone(released)
	}
}

// memberGone records that member m's membership ended (expired, left,
// or its group's incarnation changed): it joins again, and a revocation
// it ran is over.
func (c *sim) memberGone(m *gmember) {
	m.ID = 0
	c.revoked(m, false)
}

// memberPoll starts a poll of one of the partitions member cl fetches
// (host.ConsumerDriver's fetches) whose last batch the application has
// taken, from where the fetch stands (its last batch's end, or the
// group's committed offset), through the fence a Member.Poll checks
// first.
func (c *sim) memberPoll(cl *client, home *node) {
	m := cl.member
	var parts []uint32
	now := c.clk.Now()
	for _, p := range m.drv.Partitions() {
		f, _ := m.drv.Fetching(p)
		if now.Before(m.pollAfter[f.ID]) {
			continue // its backoff after a failed poll
		}
		if !slices.ContainsFunc(m.queue, func(b memberBatch) bool { return b.f.Part == p }) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	f, _ := m.drv.Fetching(parts[c.rng.IntN(len(parts))])
	if err := c.memberFence(m, home, f.Part); err != nil {
		c.memberFetchFailed(cl, f, err) // Member.Poll refused it
		return
	}
	ns, err := metadata.NewNamespace(m.Stream, m.Topic, f.Part)
	if err != nil {
		c.fail(0, "member %d: %v", cl.id, err)
		return
	}
	from, ok := m.drv.From(f)
	if !ok {
		from = 0 // none committed: from the first, as ResetEarliest
		if off, ok := m.PollFrom(home.meta, f.Part); ok {
			from = off
		}
	}
	m.doing, m.fetch = "poll", f
	c.nextOp++
	o := &op{id: c.nextOp, client: cl, kind: kindPoll, ns: ns, home: home, from: from,
		count: 1 + c.rng.IntN(8), wait: time.Duration(1+c.rng.IntN(300)) * time.Millisecond, minCount: 1}
	c.ops.Poll++
	cl.op = o
	c.allOps = append(c.allOps, o)
	o.callEv = c.event("call op=%d member=%d (id %d gen %d) n%d poll ns=%v%s", o.id, cl.id, m.ID, m.Gen, home.id, ns, o.args())
	c.startCall(o, c.newAttempt(o), home)
}

// memberDeliver hands the application the batch member cl's fetch
// queued first, as a Consumer's iterator does: before each message the
// fetch must still be current (host.ConsumerDriver.Deliver) and the
// member's fence must hold (a refusal replaces the fetch: Refused);
// each message handled counts (Handled), and a handled batch is
// committed (BatchDone, ToCommit).
func (c *sim) memberDeliver(cl *client, home *node) {
	m := cl.member
	b := m.queue[0]
	m.queue = m.queue[1:]
	var handled []uint64
	for _, msg := range b.msgs {
		if !m.drv.Deliver(b.f) {
			c.event("member %d (id %d gen %d) drops a batch of %d from %d: its fetch stopped", cl.id, m.ID, m.Gen, b.f.Part, msg.Offset)
			break
		}
		var err error
		if !BreakMemberFence.Load() {
			err = c.memberFence(m, home, b.f.Part)
		}
		if err != nil {
			m.drv.Refused(b.f)
			m.lastBeat = time.Time{} // the Consumer refreshes
			c.ops.MemberFenced++
			c.event("member %d (id %d gen %d) drops messages of %d from %d: %v", cl.id, m.ID, m.Gen, b.f.Part, msg.Offset, err)
			break
		}
		if !m.told[b.f.Part] {
			c.fail(9, "member %d (id %d, generation %d) handed its application message %d of partition %d before its OnAssigned named it (or after its OnRevoked)",
				cl.id, m.ID, m.Gen, msg.Offset, b.f.Part)
			return
		}
		if committed, node := c.groupCommitted(m, b.f.Part); msg.Offset < committed {
			c.fail(9, "member %d (id %d, generation %d, on n%d) handed its application message %d of partition %d; the group's committed offset is %d (applied on n%d)",
				cl.id, m.ID, m.Gen, m.home, msg.Offset, b.f.Part, committed, node)
			return
		}
		handled = append(handled, msg.Offset)
		m.drv.Handled(b.f, msg.Offset+1, c.clk.Now())
	}
	if len(handled) > 0 {
		c.ops.MemberDelivered += len(handled)
		c.noteDelivered(deliveryKeyOf(m, b.f.Part), handled)
	}
	if !m.drv.BatchDone() {
		return
	}
	if offsets := m.drv.ToCommit(); len(offsets) > 0 {
		c.memberCommit(cl, home, "commit", offsets)
	}
}

// groupOffsets are offsets as a commit names them, in partition order.
func groupOffsets(offsets map[uint32]uint64) []metadata.GroupOffset {
	var offs []metadata.GroupOffset
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		offs = append(offs, metadata.GroupOffset{Partition: p, Offset: offsets[p]})
	}
	return offs
}

// The members' own topic (Config.MemberPartitions).
const (
	stormStream = "storm"
	stormTopic  = "t"
)

// createStormTopic creates the members' own topic through home: its
// stream if missing, then the topic.
func (c *sim) createStormTopic(cl *client, home *node) {
	parts := c.cfg.MemberPartitions
	mo := &metaOp{desc: fmt.Sprintf("member %d create the members' topic", cl.id)}
	if st, ok := home.meta.StreamByName(stormStream); ok {
		mo.steps = append(mo.steps, func(metadata.Result) metadata.Command {
			return metadata.CreateTopic{Stream: st.ID, Name: stormTopic, Partitions: parts, Config: c.topicConfig(home)}
		})
	} else {
		mo.steps = append(mo.steps, func(metadata.Result) metadata.Command { return metadata.CreateStream{Name: stormStream} },
			func(prev metadata.Result) metadata.Command {
				return metadata.CreateTopic{Stream: prev.Stream, Name: stormTopic, Partitions: parts, Config: c.topicConfig(home)}
			})
	}
	cl.member.doing = "create"
	c.nextOp++
	o := &op{id: c.nextOp, client: cl, kind: kindMeta, home: home, meta: mo}
	cl.op = o
	c.metaOps = append(c.metaOps, o)
	c.ops.Metadata++
	o.callEv = c.event("call op=%d client=%d n%d meta %s", o.id, cl.id, home.id, mo.desc)
	c.nextCommand(o, metadata.Result{})
}

// memberLease sends member cl's lease renewal through home: a
// heartbeat that releases nothing, for a heartbeat or for a
// revocation's release (what).
func (c *sim) memberLease(cl *client, home *node, what string) {
	m := cl.member
	ch, cancel, err := home.eng.SendLease(m.Lease())
	if err != nil {
		c.event("member %d (id %d) lease on n%d: %v", cl.id, m.ID, home.id, err)
		m.lastBeat = time.Time{} // ask again
		if what == "release" {
			c.revoked(m, false)
		}
		return
	}
	c.ops.MemberLeases++
	m.lease, m.leaseCancel, m.leaseUntil, m.leaseFor = ch, cancel, c.clk.Now().Add(forwardTicks*c.cfg.TickInterval), what
	c.event("member %d (id %d gen %d) renews its lease through n%d (%s)", cl.id, m.ID, m.Gen, home.id, what)
}

// leaseDone takes member cl's lease answer, if it came or is given up
// (reported true): an acknowledged renewal renews the member's own lease
// from the renewal's Now, as a Member's does, and ends a revocation's
// release.
func (c *sim) leaseDone(cl *client) bool {
	m := cl.member
	var r host.LeaseResult
	select {
	case r = <-m.lease:
	default:
		if c.clk.Now().Before(m.leaseUntil) {
			return false
		}
		m.leaseCancel()
		r.Err = errors.New("no answer")
	}
	m.lease, m.leaseCancel = nil, nil
	err := r.Of(0) // the message held this member's renewal only
	c.event("member %d (id %d) lease answered: %v", cl.id, m.ID, errString(err))
	if m.leaseFor == "release" {
		c.revoked(m, err == nil)
	}
	switch {
	case err == nil:
		m.Renewed(m.now)
	case errors.Is(err, metadata.ErrUnknownMember):
		c.memberGone(m) // expired or gone: join again
	default:
		m.lastBeat = time.Time{} // refused or lost: ask again
	}
	return true
}

// memberTopic is the topic m's group lives on: the one it used while it
// is committed on its home, else the first topic home knows (with
// Config.MemberPartitions, the members' own topic).
func (c *sim) memberTopic(m *gmember, meta *metadata.Store) (metadata.TopicInfo, bool) {
	if m.TopicRevision != 0 {
		if t, ok := meta.Topic(m.Stream, m.Topic); ok && t.CreatedRevision == m.TopicRevision {
			return t, true
		}
	}
	if c.cfg.MemberPartitions > 0 {
		st, ok := meta.StreamByName(stormStream)
		if !ok {
			return metadata.TopicInfo{}, false
		}
		t, ok := meta.TopicByName(st.ID, stormTopic)
		if !ok || t.Partitions == 0 {
			return metadata.TopicInfo{}, false
		}
		m.Stream, m.Topic, m.TopicRevision, m.groupRev, m.ID = t.Stream, t.ID, t.CreatedRevision, 0, 0
		return t, true
	}
	for _, st := range meta.Streams() {
		for _, t := range meta.Topics(st.ID) {
			if t.Partitions > 0 {
				m.Stream, m.Topic, m.TopicRevision, m.groupRev, m.ID = t.Stream, t.ID, t.CreatedRevision, 0, 0
				return t, true
			}
		}
	}
	return metadata.TopicInfo{}, false
}

// memberFence is the Consumer's fence (Member.check) for m on home.
func (c *sim) memberFence(m *gmember, home *node, part uint32) error {
	return m.Fence(home.meta, part, c.clk.Now().UnixNano())
}

// memberMeta proposes a member's group command through home.
func (c *sim) memberMeta(cl *client, home *node, what string, cmd metadata.Command) {
	m := cl.member
	m.doing = what
	mo := &metaOp{desc: fmt.Sprintf("member %d %s", cl.id, what),
		steps: []func(metadata.Result) metadata.Command{func(metadata.Result) metadata.Command { return cmd }}}
	c.nextOp++
	o := &op{id: c.nextOp, client: cl, kind: kindMeta, home: home, meta: mo}
	cl.op = o
	c.metaOps = append(c.metaOps, o)
	c.ops.Metadata++
	o.callEv = c.event("call op=%d client=%d n%d meta %s", o.id, cl.id, home.id, mo.desc)
	c.nextCommand(o, metadata.Result{})
}

// memberDoneOf takes the end of a member's operation: a group command's
// result renews its lease (or drops its membership) and moves its
// commit or revocation on; a poll's batch passes the fence of a
// Member.Poll's answer and is queued for the application.
func (c *sim) memberDoneOf(cl *client, o *op) {
	m := cl.member
	home := c.node(m.home)
	if home == nil {
		return
	}
	if o.kind == kindMeta {
		c.memberMetaDone(cl, home, o)
		return
	}
	if o.kind == kindPoll && m.ID != 0 {
		c.checkDelivered(deliveryKeyOf(m, m.fetch.Part))
	}
	if o.kind != kindPoll || m.ID == 0 {
		return
	}
	f := m.fetch
	switch {
	case o.outcome != outcomeOK:
		c.memberFetchFailed(cl, f, o.err)
		return
	case len(o.resp.Messages) == 0:
		m.drv.Fetched(f, o.resp.Offset)
		delete(m.pollAfter, f.ID)
		return
	}
	var err error
	if !BreakMemberFence.Load() {
		err = c.memberFence(m, home, f.Part)
	}
	if err != nil || !home.reachable() {
		// Member.Poll refuses the answer: the fetch ends, the Consumer
		// refreshes.
		c.ops.MemberFenced++
		c.event("member %d (id %d gen %d) drops %d messages of %d at %d: %v", cl.id, m.ID, m.Gen,
			len(o.resp.Messages), f.Part, o.resp.Messages[0].Offset, errString(err))
		if err == nil {
			err = metadata.ErrUnknownMember // its node stopped under it: the member is gone with it
		}
		c.memberFetchFailed(cl, f, err)
		return
	}
	m.queue = append(m.queue, memberBatch{f: f, msgs: o.resp.Messages})
	m.drv.Fetched(f, o.resp.Offset)
	delete(m.pollAfter, f.ID)
	if len(m.queue) == 1 && c.rng.IntN(2) == 0 {
		// The application was waiting for a message (a Consumer's
		// iterator, asking): it takes the batch at once. Else it is
		// busy, and takes it at a later step.
		c.memberDeliver(cl, home)
	}
}

// memberFetchFailed does what the Consumer's driver decides after fetch
// f's poll failed with err (host.ConsumerDriver.FetchFailed): poll again
// after its backoff, end the fetch and refresh, or end the consumer —
// the application starts a new one, which joins as a new member.
func (c *sim) memberFetchFailed(cl *client, f host.Fetcher, err error) {
	m := cl.member
	st := m.drv.FetchFailed(f, err)
	c.event("member %d (id %d gen %d) fetch of %d failed (%v): %v after %v", cl.id, m.ID, m.Gen, f.Part, err, st.Op, st.Wait)
	switch st.Op {
	case host.FetchRetry:
		m.pollAfter[f.ID] = c.clk.Now().Add(st.Wait)
	case host.FetchEnd:
		delete(m.pollAfter, f.ID)
		m.lastBeat = time.Time{} // the Consumer refreshes
	case host.FetchFatal:
		c.memberGone(m)
	}
}

// memberMetaDone takes the end of member cl's group command.
func (c *sim) memberMetaDone(cl *client, home *node, o *op) {
	m := cl.member
	ok := o.outcome == outcomeOK
	if m.ID != 0 {
		// Invariant 12 where a commit of the member's ends, for the
		// partitions it named.
		for _, p := range slices.Sorted(maps.Keys(m.commit)) {
			c.checkDelivered(deliveryKeyOf(m, p))
		}
	}
	if m.doing == "revoke-commit" {
		m.commit = nil
	}
	switch {
	case ok && m.doing == "join":
		// A new Member: its generation is its group's, from its join
		// on; the Consumer's fetches and positions of the old one end
		// (host.ConsumerDriver.Joined).
		c.revoked(m, false)
		m.ID, m.Gen, m.Confirmed, m.lastBeat = o.meta.result.Member, 0, m.now, c.clk.Now()
		m.queue = nil
		clear(m.told) // a new membership: its OnAssigned names what it holds
		clear(m.pollAfter)
		if v, err := home.meta.MemberOf(m.Stream, m.Topic, memberGroup, m.ID, 0); err == nil {
			m.Adopt(v)
		}
		m.drv.Joined(m.Gen)
		c.ops.MemberJoins++
		c.memberFollow(cl, home.meta)
		return
	case ok && m.doing != "create":
		m.Renewed(m.now)
	case errors.Is(o.err, metadata.ErrUnknownMember):
		c.memberGone(m) // expired or gone: join again
		return
	case !ok:
		m.lastBeat = time.Time{} // refused or lost: refresh first
	}
	switch m.doing {
	case "release":
		c.revoked(m, ok)
	case "commit", "commit-again":
		// A Consumer's Commit: committed positions are forgotten; a
		// commit refused because the group moved on gives up the
		// positions of partitions that moved and commits the others
		// once more (host.ConsumerDriver.Rebalanced).
		offsets := m.commit
		m.commit = nil
		rebalanced := errors.Is(o.err, metadata.ErrNotAssigned) || errors.Is(o.err, metadata.ErrStaleGeneration) ||
			errors.Is(o.err, metadata.ErrOffsetRegression)
		switch {
		case ok || (rebalanced && m.doing == "commit-again"):
			m.drv.Committed(offsets)
		case rebalanced:
			var held []uint32
			if v, err := home.meta.MemberOf(m.Stream, m.Topic, memberGroup, m.ID, m.Gen); err == nil {
				m.Adopt(v)
				held = v.Held
			}
			if retry := m.drv.Rebalanced(offsets, held); len(retry) > 0 {
				c.memberCommit(cl, home, "commit-again", retry)
			}
		}
	}
}

// groupCommitted is the group's committed offset of part as far as any
// node knows (each applies the log at its own pace; what one applied is
// committed), for m's group incarnation, and a node that applied it.
func (c *sim) groupCommitted(m *gmember, part uint32) (uint64, uint64) {
	return c.committedOf(deliveryKeyOf(m, part))
}

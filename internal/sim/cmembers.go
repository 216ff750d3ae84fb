package sim

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
)

// Consumer group members under faults (cluster mode, Config.GroupMembers;
// invariants 9 and 12, DESIGN behaviour 33). Each member is a client
// homed on one node, as a parkway.Member is joined through one Node, and
// makes the Member's own decisions (host.GroupMember, which parkway's
// Member holds: the fence, the heartbeat, where a poll starts, the
// commit, the generation adopted): it joins group
// memberGroup of a topic, heartbeats at a third of its session timeout
// (acknowledging its generation, which releases the partitions moving
// away from it: it hands nothing out between its steps),
// polls a partition it holds from the committed offset with a waiting
// poll, hands the batch to its application and commits after it. It
// hands a batch over only through the fence a Consumer applies before
// each message (metadata.Store.CheckDelivery on its home node's store:
// its lease, from its last applied join, heartbeat or commit, and its
// home's committed assignment), checked when the poll is made and when
// its answer arrives. Faults do the rest: a network partition or a stop
// cuts a member's node off, its session lapses, the others take its
// partitions and commit, the network heals and its waiting poll —
// retried in place meanwhile — is answered with messages the group has
// committed since (cutMember makes that scenario a fault of its own).
// Invariant 9: no message below the group's committed
// offset (the largest any node has applied for the group's incarnation)
// is handed to an application.

// BreakMemberFence, when set, makes the simulated members fence a poll
// only when they make it, not when its answer arrives: the Consumer
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
	// Of the command in flight: its kind and Now; of a poll, the
	// partition.
	doing string
	now   int64
	part  uint32
	// A lease renewal in flight (a heartbeat that releases nothing: no
	// log entry, see host.Engine.SendLease): its answer, the call that
	// forgets it, and when it is given up.
	lease       <-chan host.LeaseResult
	leaseCancel func()
	leaseUntil  time.Time
}

// startMembers creates the member clients (after the ordinary ones).
func (c *csim) startMembers() {
	for i := range c.cfg.GroupMembers {
		m := &gmember{home: c.peers[i%len(c.peers)], GroupMember: host.GroupMember{Group: memberGroup,
			Session: time.Duration(1500+c.rng.IntN(1500)) * time.Millisecond}}
		c.clients = append(c.clients, &client{id: len(c.clients), member: m})
	}
}

// members are the member clients.
func (c *csim) members() []*client {
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
func (c *csim) cutMember(cl *client) {
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
func (c *csim) stormCheck() {
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
func (c *csim) stormRunning() bool {
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
func (c *csim) memberAct(cl *client) {
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
		m.groupRev, m.ID = g.CreatedRevision, 0 // a new incarnation
	}
	m.now = now.UnixNano()
	switch {
	case m.ID == 0:
		c.memberMeta(cl, home, "join", metadata.JoinGroup{Stream: t.Stream, Topic: t.ID, Group: memberGroup,
			Member: fmt.Sprintf("m%d", cl.id), SessionTimeout: m.Session, Now: m.now, Revision: t.CreatedRevision})
	case now.Sub(m.lastBeat) >= m.Session/3:
		// A heartbeat as a Member's: if it releases partitions moving
		// away from the member (it hands out nothing between its steps),
		// a commit of nothing acknowledging the generation it acts in;
		// else a lease renewal at the metadata leader, no log entry.
		m.lastBeat = now
		// The Member's own decision (host.GroupMember.Heartbeat).
		renew, cmd := m.Heartbeat(meta, m.Gen, m.now)
		if renew {
			c.memberLease(cl, home, m.Lease())
			return
		}
		c.memberMeta(cl, home, "heartbeat", cmd)
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
		v, err := meta.MemberOf(t.Stream, t.ID, memberGroup, m.ID, m.Gen)
		held := v.Held
		if err != nil || len(held) == 0 {
			return
		}
		part := held[c.rng.IntN(len(held))]
		if err := c.memberFence(m, home, part); err != nil {
			m.lastBeat = time.Time{} // refresh first
			return
		}
		ns, err := metadata.NewNamespace(t.Stream, t.ID, part)
		if err != nil {
			c.fail(0, "member %d: %v", cl.id, err)
			return
		}
		var from uint64 // none committed: from the first, as ResetEarliest
		if off, ok := m.PollFrom(meta, part); ok {
			from = off
		}
		m.doing, m.part = "poll", part
		c.nextOp++
		o := &op{id: c.nextOp, client: cl, kind: kindPoll, ns: ns, home: home, from: from,
			count: 1 + c.rng.IntN(8), wait: time.Duration(1+c.rng.IntN(300)) * time.Millisecond, minCount: 1}
		c.ops.Poll++
		cl.op = o
		c.allOps = append(c.allOps, o)
		o.callEv = c.event("call op=%d member=%d (id %d gen %d) n%d poll ns=%v%s", o.id, cl.id, m.ID, m.Gen, home.id, ns, o.args())
		c.startCall(o, c.newAttempt(o), home)
	}
}

// The members' own topic (Config.MemberPartitions).
const (
	stormStream = "storm"
	stormTopic  = "t"
)

// createStormTopic creates the members' own topic through home: its
// stream if missing, then the topic.
func (c *csim) createStormTopic(cl *client, home *cnode) {
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

// memberLease sends member cl's lease renewal through home.
func (c *csim) memberLease(cl *client, home *cnode, l host.MemberLease) {
	m := cl.member
	ch, cancel, err := home.eng.SendLease(l)
	if err != nil {
		c.event("member %d (id %d) lease on n%d: %v", cl.id, m.ID, home.id, err)
		m.lastBeat = time.Time{} // ask again
		return
	}
	c.ops.MemberLeases++
	m.lease, m.leaseCancel, m.leaseUntil = ch, cancel, c.clk.Now().Add(forwardTicks*c.cfg.TickInterval)
	c.event("member %d (id %d gen %d) renews its lease through n%d", cl.id, m.ID, m.Gen, home.id)
}

// leaseDone takes member cl's lease answer, if it came or is given up
// (reported true): an acknowledged renewal renews the member's own lease
// from the renewal's Now, as a Member's does.
func (c *csim) leaseDone(cl *client) bool {
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
	switch {
	case err == nil:
		m.Renewed(m.now)
		if home := c.node(m.home); home != nil && home.meta != nil {
			m.refresh(home.meta)
		}
	case errors.Is(err, metadata.ErrUnknownMember):
		m.ID = 0 // expired or gone: join again
	default:
		m.lastBeat = time.Time{} // refused or lost: ask again
	}
	return true
}

// memberTopic is the topic m's group lives on: the one it used while it
// is committed on its home, else the first topic home knows (with
// Config.MemberPartitions, the members' own topic).
func (c *csim) memberTopic(m *gmember, meta *metadata.Store) (metadata.TopicInfo, bool) {
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
func (c *csim) memberFence(m *gmember, home *cnode, part uint32) error {
	return m.Fence(home.meta, part, c.clk.Now().UnixNano())
}

// memberMeta proposes a member's group command through home.
func (c *csim) memberMeta(cl *client, home *cnode, what string, cmd metadata.Command) {
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
// result renews its lease and generation (or drops its membership), a
// poll's batch is handed to the application through the fence and
// committed after it.
func (c *csim) memberDoneOf(cl *client, o *op) {
	m := cl.member
	home := c.node(m.home)
	if home == nil {
		return
	}
	if o.kind == kindMeta {
		switch {
		case o.outcome == outcomeOK && m.doing == "join":
			// A new Member: its generation is its group's, from its join on.
			m.ID, m.Gen, m.Confirmed, m.lastBeat = o.meta.result.Member, 0, m.now, c.clk.Now()
			c.ops.MemberJoins++
		case o.outcome == outcomeOK && m.doing != "create":
			m.Renewed(m.now)
		case errors.Is(o.err, metadata.ErrUnknownMember):
			m.ID = 0 // expired or gone: join again
		case o.outcome != outcomeOK:
			m.lastBeat = time.Time{} // refused or lost: refresh first
		}
		if o.outcome == outcomeOK && m.ID != 0 {
			m.refresh(home.meta)
		}
		return
	}
	if o.kind == kindPoll && m.ID != 0 {
		c.checkDelivered(deliveryKeyOf(m, m.part))
	}
	if o.kind != kindPoll || o.outcome != outcomeOK || len(o.resp.Messages) == 0 || m.ID == 0 {
		return
	}
	var err error
	if !BreakMemberFence.Load() {
		err = c.memberFence(m, home, m.part)
	}
	if err != nil || !home.reachable() {
		c.ops.MemberFenced++
		c.event("member %d (id %d gen %d) drops %d messages of %d at %d: %v", cl.id, m.ID, m.Gen,
			len(o.resp.Messages), m.part, o.resp.Messages[0].Offset, errString(err))
		return
	}
	committed, node := c.groupCommitted(m, m.part)
	for _, msg := range o.resp.Messages {
		if msg.Offset < committed {
			c.fail(9, "member %d (id %d, generation %d, on n%d) handed its application message %d of partition %d; the group's committed offset is %d (applied on n%d)",
				cl.id, m.ID, m.Gen, m.home, msg.Offset, m.part, committed, node)
			return
		}
	}
	c.ops.MemberDelivered += len(o.resp.Messages)
	offs := make([]uint64, len(o.resp.Messages))
	for i, msg := range o.resp.Messages {
		offs[i] = msg.Offset
	}
	c.noteDelivered(deliveryKeyOf(m, m.part), offs)
	next := o.resp.Messages[len(o.resp.Messages)-1].Offset + 1
	m.now = c.clk.Now().UnixNano()
	c.memberMeta(cl, home, "commit", m.Commit(m.Gen, []metadata.GroupOffset{{Partition: m.part, Offset: next}}, m.now))
}

// refresh is Member.refresh: the member's view of its group on its
// node's committed metadata, after a join, heartbeat or commit of it
// applied, makes the group's generation the member's
// (host.GroupMember.Adopt).
func (m *gmember) refresh(meta *metadata.Store) {
	if v, err := meta.MemberOf(m.Stream, m.Topic, memberGroup, m.ID, m.Gen); err == nil {
		m.Adopt(v)
	}
}

// groupCommitted is the group's committed offset of part as far as any
// node knows (each applies the log at its own pace; what one applied is
// committed), for m's group incarnation, and a node that applied it.
func (c *csim) groupCommitted(m *gmember, part uint32) (uint64, uint64) {
	return c.committedOf(deliveryKeyOf(m, part))
}

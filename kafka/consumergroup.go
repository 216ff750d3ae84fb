package kafka

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat): the
// coordinator, not a member, computes the assignment. A member joins
// with epoch 0 and its subscription, and heartbeats with its member
// epoch and the partitions it owns; every answer may carry its
// assignment. The group has an epoch, bumped whenever its members, their
// subscriptions or the subscribed topics' partitions change, and a
// target assignment computed at that epoch (assignTarget: partitions
// spread evenly and kept where they were). Each member reconciles
// towards its target one heartbeat at a time (reconcile):
//
//   - a partition its target no longer holds is revoked first: the
//     answer drops it, the member's epoch stays, and the member stays its
//     holder until a heartbeat reports it no longer owns it (it commits
//     its offsets meanwhile);
//   - once it revoked everything it had to, the member moves to the
//     target epoch and is given the partitions of its target that no
//     other member holds; the rest follow on later heartbeats, once their
//     holders revoked them.
//
// So a partition is held by at most one member at any time, and a
// partition moves only after its old holder revoked it. A commit is
// fenced per partition: a member commits only a partition it holds, with
// an epoch at least the one it was given the partition at
// (consumerCommitCheck, KIP-1251's rule plus the holding).
//
// A member that sends no heartbeat for the session timeout, or does not
// revoke within its rebalance timeout, is removed; leaving is a
// heartbeat with epoch -1. The group's state — its epochs, the topics
// its target was computed from and every member with its subscription,
// target, held and revoking partitions — is kept in the group log as
// records of its parts (the group's epochs and topics; per member its
// subscription, its target, its epochs and held partitions: cglog.go),
// and each change writes the records of the parts it changed, before the
// heartbeat that made it is answered (consumerapi.go): a coordinator
// that moves loads the group from them and the members heartbeat on with
// their ids and epochs. As the assignor moves only the partitions it
// must, a join writes its member's records, the group's and the targets
// of the members it took partitions from, however large the group.
//
// A group is either classic or consumer while it has members: a
// ConsumerGroupHeartbeat for a classic group with members answers
// GROUP_ID_NOT_FOUND and a JoinGroup for a consumer group with members
// INCONSISTENT_GROUP_PROTOCOL, as Kafka answers with
// group.consumer.migration.policy=disabled (no member of one protocol
// joins a group of the other). A group without members takes either
// (its offsets stay).
//
// Served: topic name subscriptions and the "uniform" assignor. Not
// served: regular expression subscriptions (UNSUPPORTED_VERSION on the
// join, on which franz-go falls back to the classic protocol), the
// "range" assignor (UNSUPPORTED_ASSIGNOR), and static membership (an
// instance id is ignored: the member is dynamic; epoch -2 leaves).

// Defaults of the consumer group protocol's timers (Kafka's
// group.consumer.heartbeat.interval.ms and session.timeout.ms).
const (
	DefaultGroupHeartbeatInterval = 5 * time.Second
	DefaultGroupSessionTimeout    = 45 * time.Second
)

// uniformAssignor is the only server-side assignor served.
const uniformAssignor = "uniform"

// maxSubscribedTopics bounds a member's subscription (each name is
// resolved when the group's view of its topics is read: cgView).
const maxSubscribedTopics = 10_000

// cgTopic is a subscribed topic as a target assignment was computed
// from: its Kafka topic ID and partition count.
type cgTopic struct {
	id    [16]byte
	parts int32
}

// cgMember is a member of a consumer group.
type cgMember struct {
	id, clientID, clientHost string
	rebalanceTimeout         time.Duration
	epoch, prevEpoch         int32
	topics                   []string    // subscribed, sorted
	target                   []topicPart // its share of the target assignment, sorted
	// assigned are the partitions it holds, each with the member epoch it
	// was given the partition at; revoking those it must give up and
	// holds until it reports them gone (with the same epochs).
	assigned map[topicPart]int32
	revoking map[topicPart]int32
	deadline time.Time // the session lapses then
	revokeBy time.Time // set while revoking: removed if still revoking then
}

// cgroup is a consumer group (KIP-848).
type cgroup struct {
	name        string
	part        uint32
	epoch       int32 // the group epoch
	targetEpoch int32 // the epoch the target assignment was computed at
	topics      map[string]cgTopic
	members     map[string]*cgMember
	// subs counts the members subscribing to each topic (subscribe), so
	// a heartbeat reads the group's subscribed topics without a pass
	// over its members.
	subs map[string]int
}

// subscribe sets m's subscription to topics, keeping g.subs.
func (g *cgroup) subscribe(m *cgMember, topics []string) {
	for _, t := range m.topics {
		if g.subs[t]--; g.subs[t] <= 0 {
			delete(g.subs, t)
		}
	}
	m.topics = topics
	if len(topics) > 0 && g.subs == nil {
		g.subs = map[string]int{}
	}
	for _, t := range topics {
		g.subs[t]++
	}
}

// holds reports whether m holds tp (assigned or being revoked).
func (m *cgMember) holds(tp topicPart) bool {
	_, a := m.assigned[tp]
	_, r := m.revoking[tp]
	return a || r
}

// cgState names the group's state as ConsumerGroupDescribe and
// ListGroups answer it.
func (g *cgroup) state() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch || len(m.revoking) > 0 || len(m.assigned) != len(m.target) {
			return "Reconciling"
		}
	}
	return "Stable"
}

// subscribed is the union of the members' subscriptions, sorted.
func (g *cgroup) subscribed() []string {
	return slices.Sorted(maps.Keys(g.subs))
}

// consumerSubscribed lists the topics group's members subscribe to (the
// handler resolves their metadata before the heartbeat is applied).
func (c *coordinator) consumerSubscribed(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.cgroups[name]; ok {
		return g.subscribed()
	}
	return nil
}

// cgAnswer is the outcome of a heartbeat: the response and, when the
// group changed, the records of the change to write before it is sent
// (consumerDelta).
type cgAnswer struct {
	resp    *kmsg.ConsumerGroupHeartbeatResponse
	persist []*logRecord
}

// consumerHeartbeat applies a ConsumerGroupHeartbeat to group r.Group
// of coordinator partition part, loaded in term (else nothing changes:
// NOT_COORDINATOR, so the record is never written in a term the state
// was not loaded in). meta holds the topics the group and the
// request subscribe to that exist (a topic missing from it has no
// partitions to assign). It never waits: the answer is computed now.
func (c *coordinator) consumerHeartbeat(r *kmsg.ConsumerGroupHeartbeatRequest, part uint32, term uint64, meta map[string]cgTopic, clientID, clientHost string, now time.Time) cgAnswer {
	resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.HeartbeatIntervalMillis = int32(c.cgInterval / time.Millisecond)
	fail := func(code int16, msg string) cgAnswer {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return cgAnswer{resp: resp}
	}
	join := r.MemberEpoch == 0
	switch {
	case !validGroupID(r.Group):
		return fail(kerr.InvalidGroupID.Code, "")
	case r.MemberID == "" || len(r.MemberID) > 255:
		return fail(kerr.InvalidRequest.Code, "a member id of 1 to 255 bytes is required")
	case r.MemberEpoch < -2:
		return fail(kerr.InvalidRequest.Code, "a member epoch below -2")
	case r.SubscribedTopicRegex != nil:
		return fail(kerr.UnsupportedVersion.Code, "regular expression subscriptions are not supported: subscribe by topic names")
	case r.ServerAssignor != nil && *r.ServerAssignor != uniformAssignor:
		return fail(kerr.UnsupportedAssignor.Code, "only the uniform assignor is served")
	case join && (r.RebalanceTimeoutMillis < 0 || r.SubscribedTopicNames == nil):
		return fail(kerr.InvalidRequest.Code, "a join carries the rebalance timeout and the subscription")
	case len(r.SubscribedTopicNames) > maxSubscribedTopics:
		return fail(kerr.InvalidRequest.Code, "too many subscribed topics")
	case join && (r.Topics == nil || len(r.Topics) > 0):
		return fail(kerr.InvalidRequest.Code, "TopicPartitions must be empty when (re-)joining.")
	}
	for _, t := range r.SubscribedTopicNames {
		if !validTopicName(t) {
			return fail(kerr.InvalidRequest.Code, "a subscribed topic name is not valid")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp, ok := c.parts[part]; !ok || cp.term != term {
		return fail(kerr.NotCoordinator.Code, "")
	}
	if c.deleting[r.Group] {
		return fail(kerr.CoordinatorLoadInProgress.Code, "")
	}
	if cg, ok := c.groups[r.Group]; ok && (len(cg.members) > 0 || len(cg.pending) > 0) {
		return fail(kerr.GroupIDNotFound.Code, "the group is a classic group with members")
	}
	g, ok := c.cgroups[r.Group]
	if !ok {
		if !join {
			return fail(kerr.UnknownMemberID.Code, "")
		}
		if len(c.cgroups) >= maxGroups {
			return fail(kerr.CoordinatorNotAvailable.Code, "")
		}
		g = &cgroup{name: r.Group, part: part, members: map[string]*cgMember{}, topics: map[string]cgTopic{}}
		if o := c.offsets[r.Group]; o != nil && o.consumer != nil {
			g.epoch, g.targetEpoch = o.consumer.epoch, o.consumer.targetEpoch // epochs only grow
		}
		c.cgroups[r.Group] = g
	}
	dirty, bump := false, false // bump: the group moves to a new epoch
	m := g.members[r.MemberID]
	switch {
	case r.MemberEpoch < 0: // -1 leaves; -2, a static member's leave, too (static membership is not served)
		if m == nil {
			return fail(kerr.UnknownMemberID.Code, "")
		}
		c.removeConsumer(g, m.id)
		resp.MemberID, resp.MemberEpoch = &m.id, r.MemberEpoch
		return cgAnswer{resp: resp, persist: c.consumerChanges(g)}
	case join && m == nil:
		if len(g.members) >= maxGroupMembers {
			return fail(kerr.GroupMaxSizeReached.Code, "")
		}
		m = &cgMember{id: r.MemberID, assigned: map[topicPart]int32{}, revoking: map[topicPart]int32{}}
		g.members[m.id] = m
		bump = true
	case m == nil:
		return fail(kerr.UnknownMemberID.Code, "")
	case !join && r.MemberEpoch != m.epoch:
		// A member that missed the answer moving it on may retry at its
		// previous epoch, owning no more than it holds now.
		if r.MemberEpoch != m.prevEpoch || r.Topics == nil || !c.ownsOnly(g, m, r.Topics) {
			return fail(kerr.FencedMemberEpoch.Code, "")
		}
	}
	m.deadline = now.Add(c.cgSession)
	if join {
		if m.clientID != clientID || m.clientHost != clientHost {
			m.clientID, m.clientHost = clientID, clientHost
			dirty = true
		}
	}
	if r.RebalanceTimeoutMillis >= 0 {
		rt := min(max(time.Duration(r.RebalanceTimeoutMillis)*time.Millisecond, minSessionTimeout), maxSessionTimeout)
		if rt != m.rebalanceTimeout {
			m.rebalanceTimeout, dirty = rt, true
		}
	}
	if r.SubscribedTopicNames != nil {
		subs := slices.Clone(r.SubscribedTopicNames)
		slices.Sort(subs)
		subs = slices.Compact(subs)
		if !slices.Equal(subs, m.topics) {
			g.subscribe(m, subs)
			bump = true
		}
	}
	// The subscribed topics' partitions as the target was computed from:
	// a topic created, deleted or grown moves the group to a new epoch.
	view := map[string]cgTopic{}
	for _, t := range g.subscribed() {
		if tm, ok := meta[t]; ok {
			view[t] = tm
		}
	}
	if !maps.Equal(view, g.topics) {
		g.topics = view
		bump = true
	}
	if bump {
		g.epoch++
		dirty = true
	}
	if g.targetEpoch != g.epoch {
		assignTarget(g)
		dirty = true
	}
	var owned map[topicPart]bool
	if r.Topics != nil {
		owned = c.ownedOf(g, r.Topics)
	}
	changed := reconcile(g, m, owned, now)
	dirty = dirty || changed
	resp.MemberID, resp.MemberEpoch = &m.id, m.epoch
	full := r.Topics != nil && r.SubscribedTopicNames != nil && r.RebalanceTimeoutMillis >= 0
	if join || full || changed {
		resp.Assignment = assignmentOf(g, m)
	}
	a := cgAnswer{resp: resp}
	if dirty {
		a.persist = c.consumerChanges(g)
	}
	return a
}

// ownedOf maps the partitions a heartbeat reports owned to names; a
// topic ID the group's view does not know, or a partition it does not
// have, is not one of its partitions (and takes no memory: the map holds
// at most the view's partitions, however many the request lists).
func (c *coordinator) ownedOf(g *cgroup, topics []kmsg.ConsumerGroupHeartbeatRequestTopic) map[topicPart]bool {
	byID := make(map[[16]byte]string, len(g.topics))
	for name, t := range g.topics {
		byID[t.id] = name
	}
	out := map[topicPart]bool{}
	for _, t := range topics {
		name, ok := byID[t.TopicID]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			if p >= 0 && p < g.topics[name].parts {
				out[topicPart{name, p}] = true
			}
		}
	}
	return out
}

// ownsOnly reports whether every partition reported owned is one m is
// assigned.
func (c *coordinator) ownsOnly(g *cgroup, m *cgMember, topics []kmsg.ConsumerGroupHeartbeatRequestTopic) bool {
	byID := make(map[[16]byte]string, len(g.topics))
	for name, t := range g.topics {
		byID[t.id] = name
	}
	for _, t := range topics {
		name, ok := byID[t.TopicID]
		for _, p := range t.Partitions {
			if _, has := m.assigned[topicPart{name, p}]; !ok || !has {
				return false
			}
		}
	}
	return true
}

// assignmentOf is m's assignment as a heartbeat answers it: the
// partitions it is assigned (not those it is revoking), by topic ID.
func assignmentOf(g *cgroup, m *cgMember) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := new(kmsg.ConsumerGroupHeartbeatResponseAssignment)
	a.Default()
	by := map[string][]int32{}
	for tp := range m.assigned {
		by[tp.topic] = append(by[tp.topic], tp.part)
	}
	for _, name := range slices.Sorted(maps.Keys(by)) {
		t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		t.TopicID = g.topics[name].id
		t.Partitions = by[name]
		slices.Sort(t.Partitions)
		a.Topics = append(a.Topics, t)
	}
	if a.Topics == nil {
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
	}
	return a
}

// removeConsumer removes member id (it left, lapsed or was fenced): its
// partitions are free, and the group moves to a new epoch.
func (c *coordinator) removeConsumer(g *cgroup, id string) {
	if m := g.members[id]; m != nil {
		g.subscribe(m, nil)
	}
	delete(g.members, id)
	g.epoch++
	assignTarget(g)
}

// reconcile moves m one step towards its target (see the top of this
// file). owned are the partitions the member reports it owns, nil when
// the heartbeat did not say (it still owns what it was told). It reports
// whether m's assignment, revocations or epoch changed.
func reconcile(g *cgroup, m *cgMember, owned map[topicPart]bool, now time.Time) bool {
	changed := false
	if owned != nil {
		for tp := range m.revoking {
			if !owned[tp] {
				delete(m.revoking, tp)
				changed = true
			}
		}
	}
	target := make(map[topicPart]bool, len(m.target))
	for _, tp := range m.target {
		target[tp] = true
	}
	for tp, at := range m.assigned {
		if !target[tp] {
			delete(m.assigned, tp)
			m.revoking[tp] = at
			changed = true
		}
	}
	if len(m.revoking) > 0 {
		if m.revokeBy.IsZero() {
			m.revokeBy = now.Add(m.rebalanceTimeout)
		}
		return changed
	}
	m.revokeBy = time.Time{}
	if m.epoch != g.targetEpoch {
		m.prevEpoch, m.epoch = m.epoch, g.targetEpoch
		changed = true
	}
	for _, tp := range m.target {
		if _, has := m.assigned[tp]; has {
			continue
		}
		free := true
		for _, o := range g.members {
			if o != m && o.holds(tp) {
				free = false
				break
			}
		}
		if free {
			m.assigned[tp] = m.epoch
			changed = true
		}
	}
	return changed
}

// assignTarget computes the group's target assignment at its epoch: the
// uniform assignor, sticky. Every partition of the subscribed topics
// goes to one member subscribing to its topic; a partition stays with
// the member whose target held it; the others go to the eligible member
// with the fewest; then partitions move, one at a time, from a member to
// an eligible one holding at least two fewer, until none can: with
// equal subscriptions the members' shares differ by at most one. So a
// join moves only what the balance needs moved (the joiner's share, from
// the members holding the most), and its cost is a pass over the members
// and partitions per partition moved: in a group of more members than
// partitions a join moves nothing.
func assignTarget(g *cgroup) {
	g.targetEpoch = g.epoch
	ids := slices.Sorted(maps.Keys(g.members))
	subscribes := func(id, topic string) bool {
		_, ok := slices.BinarySearch(g.members[id].topics, topic)
		return ok
	}
	owner := map[topicPart]string{}
	count := make(map[string]int, len(ids))
	for _, id := range ids {
		for _, tp := range g.members[id].target {
			t, ok := g.topics[tp.topic]
			if ok && subscribes(id, tp.topic) && tp.part >= 0 && tp.part < t.parts && owner[tp] == "" {
				owner[tp] = id
				count[id]++
			}
		}
	}
	var all []topicPart
	for _, name := range slices.Sorted(maps.Keys(g.topics)) {
		for p := range g.topics[name].parts {
			all = append(all, topicPart{name, p})
		}
	}
	// fewest is the eligible member of topic holding the fewest (the
	// first by id among equals), remembered until the counts change.
	fewestOf := map[string]string{}
	fewest := func(topic string) string {
		if id, ok := fewestOf[topic]; ok {
			return id
		}
		best := ""
		for _, id := range ids {
			if (best == "" || count[id] < count[best]) && subscribes(id, topic) {
				best = id
			}
		}
		fewestOf[topic] = best
		return best
	}
	for _, tp := range all {
		if owner[tp] != "" {
			continue
		}
		if id := fewest(tp.topic); id != "" {
			owner[tp] = id
			count[id]++
			clear(fewestOf)
		}
	}
	// Balance: a partition of the member holding the most moves to the
	// eligible member holding the fewest, while that narrows the gap.
	for {
		lo, hi := -1, 0
		for _, id := range ids {
			if lo < 0 || count[id] < lo {
				lo = count[id]
			}
			hi = max(hi, count[id])
		}
		if hi < lo+2 {
			break // no member holds two more than another: nothing moves
		}
		order := slices.Clone(ids)
		slices.SortStableFunc(order, func(a, b string) int { return count[b] - count[a] })
		moved := false
		for _, from := range order {
			if count[from] < lo+2 {
				break // nor from any member after it
			}
			for _, tp := range all {
				if owner[tp] != from {
					continue
				}
				if to := fewest(tp.topic); to != "" && count[to]+1 < count[from] {
					owner[tp] = to
					count[from]--
					count[to]++
					clear(fewestOf)
					moved = true
					break
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			break
		}
	}
	for _, id := range ids {
		g.members[id].target = nil
	}
	for _, tp := range all {
		if id := owner[tp]; id != "" {
			g.members[id].target = append(g.members[id].target, tp)
		}
	}
	for _, id := range ids {
		slices.SortFunc(g.members[id].target, compareTopicPart)
	}
}

func compareTopicPart(a, b topicPart) int {
	if c := cmp.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.part, b.part)
}

// consumerChanges are the records that write g's changes since what
// the group log holds of it (consumerDelta). The caller holds c.mu.
func (c *coordinator) consumerChanges(g *cgroup) []*logRecord {
	var v *cgLog
	if o := c.offsets[g.name]; o != nil {
		v = o.consumer
	}
	return consumerDelta(g, v)
}

// consumerGroupOf rebuilds a group from what the group log holds of it,
// its sessions running from now.
func (c *coordinator) consumerGroupOf(name string, p uint32, st *cgLog, now time.Time) *cgroup {
	g := &cgroup{name: name, part: p, epoch: st.epoch, targetEpoch: st.targetEpoch, topics: map[string]cgTopic{}, members: map[string]*cgMember{}}
	for _, t := range st.topics {
		g.topics[t.name] = cgTopic{id: t.id, parts: t.parts}
	}
	for _, id := range slices.Sorted(maps.Keys(st.members)) {
		lm := st.members[id]
		m := &cgMember{id: lm.id, clientID: lm.clientID, clientHost: lm.clientHost, epoch: lm.epoch, prevEpoch: lm.prevEpoch,
			rebalanceTimeout: min(max(time.Duration(lm.rebalanceMs)*time.Millisecond, minSessionTimeout), maxSessionTimeout),
			target:           slices.Clone(lm.target),
			assigned:         map[topicPart]int32{}, revoking: map[topicPart]int32{}, deadline: now.Add(c.cgSession)}
		for _, a := range lm.assigned {
			m.assigned[a.tp] = a.epoch
		}
		for _, a := range lm.revoking {
			m.revoking[a.tp] = a.epoch
		}
		if len(m.revoking) > 0 {
			m.revokeBy = now.Add(m.rebalanceTimeout)
		}
		// Sorted and unique, as a heartbeat sets them (the assignor
		// searches them), whatever the record says.
		g.subscribe(m, slices.Compact(slices.Sorted(slices.Values(lm.topics))))
		g.members[m.id] = m
	}
	// A partition held by two members in a record is a corrupt record
	// (the coordinator never writes one): the later member lets it go.
	held := map[topicPart]bool{}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		for tp := range m.assigned {
			if held[tp] {
				delete(m.assigned, tp)
			}
			held[tp] = true
		}
		for tp := range m.revoking {
			if held[tp] {
				delete(m.revoking, tp)
			}
			held[tp] = true
		}
	}
	return g
}

// isConsumer reports whether group is a consumer group with members.
func (c *coordinator) isConsumer(group string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.cgroups[group]
	return ok && len(g.members) > 0
}

// consumerCommitCheck fences one partition of a consumer group member's
// OffsetCommit: the member holds it, at an epoch no older than the one
// it was given it at and no newer than its own. It reports handled =
// false when group is not a consumer group with members (the classic
// fence applies).
func (c *coordinator) consumerCommitCheck(group, memberID string, epoch int32, version int16) (handled bool, code int16, part func(topicPart) int16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.cgroups[group]
	if !ok || len(g.members) == 0 {
		return false, 0, nil
	}
	if epoch < 0 && memberID == "" {
		return true, kerr.UnknownMemberID.Code, nil // an admin commit while the group has members
	}
	if version < 9 {
		return true, kerr.UnsupportedVersion.Code, nil // as Kafka: a consumer group member commits with v9+
	}
	m, ok := g.members[memberID]
	switch {
	case !ok:
		return true, kerr.UnknownMemberID.Code, nil
	case epoch > m.epoch:
		return true, kerr.StaleMemberEpoch.Code, nil
	}
	assigned := maps.Clone(m.assigned)
	revoking := maps.Clone(m.revoking)
	return true, 0, func(tp topicPart) int16 {
		at, ok := assigned[tp]
		if !ok {
			at, ok = revoking[tp]
		}
		if ok && epoch >= at {
			return 0
		}
		return kerr.StaleMemberEpoch.Code
	}
}

// expireConsumers lists the consumer groups with a member whose session
// lapsed or whose revocation is overdue.
func (c *coordinator) expireConsumers(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, g := range c.cgroups {
		for _, m := range g.members {
			if now.After(m.deadline) || !m.revokeBy.IsZero() && now.After(m.revokeBy) {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// expireConsumer removes group's lapsed and overdue members, returning
// the records of the change to write, its partition and that partition's
// term (nil if none was removed or the partition is not loaded).
func (c *coordinator) expireConsumer(name string, now time.Time) ([]*logRecord, uint32, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.cgroups[name]
	if !ok {
		return nil, 0, 0
	}
	cp, loaded := c.parts[g.part]
	removed := false
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		if now.After(m.deadline) || !m.revokeBy.IsZero() && now.After(m.revokeBy) {
			c.removeConsumer(g, id)
			removed = true
		}
	}
	if !removed || !loaded {
		return nil, 0, 0
	}
	return c.consumerChanges(g), g.part, cp.term
}

// describeConsumer fills a ConsumerGroupDescribe group.
func (c *coordinator) describeConsumer(name string, dg *kmsg.ConsumerGroupDescribeResponseGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.cgroups[name]
	if !ok {
		if cg, classic := c.groups[name]; classic && len(cg.members) > 0 {
			msg := "the group is a classic group"
			dg.ErrorCode, dg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
			return
		}
		dg.ErrorCode = kerr.GroupIDNotFound.Code
		return
	}
	dg.State, dg.Epoch, dg.AssignmentEpoch, dg.AssignorName = g.state(), g.epoch, g.targetEpoch, uniformAssignor
	toAssignment := func(tps []topicPart) kmsg.Assignment {
		var a kmsg.Assignment
		by := map[string][]int32{}
		for _, tp := range tps {
			by[tp.topic] = append(by[tp.topic], tp.part)
		}
		for _, name := range slices.Sorted(maps.Keys(by)) {
			t := kmsg.NewAssignmentTopicPartition()
			t.TopicID, t.Topic, t.Partitions = g.topics[name].id, name, by[name]
			a.TopicPartitions = append(a.TopicPartitions, t)
		}
		return a
	}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = id, m.epoch, m.clientID, m.clientHost
		dm.SubscribedTopics = slices.Clone(m.topics)
		dm.Assignment = toAssignment(slices.SortedFunc(maps.Keys(m.assigned), compareTopicPart))
		dm.TargetAssignment = toAssignment(m.target)
		dm.MemberType = 1 // consumer
		dg.Members = append(dg.Members, dm)
	}
}

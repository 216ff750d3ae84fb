package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group coordinator serves Kafka's classic consumer-group protocol
// with client-side assignment: members join, the coordinator picks a
// protocol all of them support and a leader, the leader computes the
// assignment (any assignor the clients share, cooperative-sticky
// included) and the coordinator hands each member its share. The groups
// this listener coordinates — all of them on a single node, in a cluster
// those whose coordinator partition its node leads (cluster.go) — are
// held here, loaded from and written to the group log (grouplog.go,
// groupstate.go): a completed rebalance, a group emptied, every commit
// and every removal is a record of the group's coordinator partition,
// written in the term the partition was loaded in. A coordinator that
// moves or restarts therefore loses no member, generation or committed
// offset: the next one replays the log and serves the members on.

// Group limits.
const (
	minSessionTimeout = time.Second
	maxSessionTimeout = 30 * time.Minute
	maxGroups         = 10_000
	maxGroupMembers   = 1_000
	janitorEvery      = 250 * time.Millisecond
)

type groupState int

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}[s]
}

type member struct {
	id               string
	clientID         string
	clientHost       string
	protocols        []kmsg.JoinGroupRequestProtocol
	session          time.Duration
	rebalanceTimeout time.Duration
	deadline         time.Time // the session lapses then, unless a heartbeat or join renews it
	joined           bool      // rejoined in the rebalance under way
	join             chan *kmsg.JoinGroupResponse
	sync             chan syncAnswer
	assignment       []byte
}

type syncAnswer struct {
	code       int16
	assignment []byte
}

type group struct {
	name         string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []string             // member ids in join order: the first is the leader when one is needed
	pending      map[string]time.Time // ids handed out with MEMBER_ID_REQUIRED, until their join
	deadline     time.Time            // of the rebalance under way
	part         uint32               // its coordinator partition
	// persisting is set while the leader's assignment is written to the
	// group log (SyncGroup waits for it).
	persisting bool
}

// coordPart is a coordinator partition loaded here: in the raft term of
// its leadership in which its log was replayed (0 on a single node).
type coordPart struct {
	term uint64
	// records counts the records of the partition's log since it was
	// loaded or compacted: compaction is due past compactAfter.
	records int
}

// committed is a group's committed offset of one partition, as the group
// log holds it: at is the log offset of the record that wrote it (a
// later record wins, whatever order the writers were answered in).
type committed struct {
	offset   int64
	revision uint64
	metadata string
	at       uint64
}

// groupOffsets are what the group log holds of a group: its committed
// offsets, by topic and partition, and its last group record (nil if
// none), which a compaction writes again.
type groupOffsets struct {
	part  uint32
	by    map[topicPart]committed
	state *logGroupState
	// consumer is what its consumer group records (KIP-848) hold, nil if
	// none; of state and consumer only the later records' is kept.
	consumer *cgLog
}

type coordinator struct {
	mu     sync.Mutex
	groups map[string]*group
	// deleting are the groups a DeleteGroups is removing the committed
	// offsets of: a join or a commit meanwhile is asked to retry
	// (COORDINATOR_LOAD_IN_PROGRESS), so no member's commit lands in the
	// middle of the deletion and is removed by it (deletegroups.go).
	deleting map[string]bool
	// parts are the coordinator partitions loaded here, and offsets the
	// committed offsets of their groups (a group without members keeps
	// its offsets: it is not in groups).
	parts   map[uint32]*coordPart
	offsets map[string]*groupOffsets
	// emptied are the groups that lost their last member since the group
	// log was last told (persistEmptied writes them).
	emptied map[string]*group
	// cgroups are the consumer groups (KIP-848) of the loaded
	// partitions, and cgInterval and cgSession the heartbeat interval
	// they are told and the session timeout they are held to
	// (consumergroup.go).
	cgroups    map[string]*cgroup
	cgInterval time.Duration
	cgSession  time.Duration
}

func newCoordinator(interval, session time.Duration) *coordinator {
	return &coordinator{groups: map[string]*group{}, parts: map[uint32]*coordPart{}, offsets: map[string]*groupOffsets{}, emptied: map[string]*group{},
		cgroups: map[string]*cgroup{}, cgInterval: interval, cgSession: session}
}

func newMemberID(clientID string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	if len(clientID) > 64 {
		clientID = clientID[:64]
	}
	return clientID + "-" + hex.EncodeToString(b[:])
}

// validGroupID: a group id names parkway consumer offsets, so it follows
// parkway's consumer-name rule.
func validGroupID(id string) bool { return validName(id, 255) }

// join handles a JoinGroup: an answer now, or a channel the answer comes
// on once the rebalance completes.
func (c *coordinator) join(r *kmsg.JoinGroupRequest, part uint32, clientID, clientHost string, now time.Time) (*kmsg.JoinGroupResponse, <-chan *kmsg.JoinGroupResponse) {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	fail := func(code int16) (*kmsg.JoinGroupResponse, <-chan *kmsg.JoinGroupResponse) {
		resp.ErrorCode = code
		return resp, nil
	}
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if r.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	switch {
	case !validGroupID(r.Group):
		return fail(kerr.InvalidGroupID.Code)
	case session < minSessionTimeout || session > maxSessionTimeout:
		return fail(kerr.InvalidSessionTimeout.Code)
	case len(r.Protocols) == 0 || r.ProtocolType == "":
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	rebalance = min(rebalance, maxSessionTimeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleting[r.Group] {
		return fail(kerr.CoordinatorLoadInProgress.Code)
	}
	if cg, ok := c.cgroups[r.Group]; ok && len(cg.members) > 0 {
		return fail(kerr.InconsistentGroupProtocol.Code) // a consumer group (KIP-848) with members
	}
	g, ok := c.groups[r.Group]
	if !ok {
		if len(c.groups) >= maxGroups {
			return fail(kerr.CoordinatorNotAvailable.Code)
		}
		g = &group{name: r.Group, part: part, members: map[string]*member{}, pending: map[string]time.Time{}}
		c.groups[r.Group] = g
	}
	if len(g.members) > 0 && g.protocolType != r.ProtocolType {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	id := r.MemberID
	if id == "" {
		if len(g.members)+len(g.pending) >= maxGroupMembers {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		id = newMemberID(clientID)
		if r.Version >= 4 {
			// KIP-394: the client learns its id first and joins with it,
			// so a join whose answer is lost leaves no ghost member.
			g.pending[id] = now.Add(session)
			resp.MemberID = id
			return fail(kerr.MemberIDRequired.Code)
		}
	} else if _, known := g.members[id]; !known {
		if _, pend := g.pending[id]; !pend {
			resp.MemberID = id
			return fail(kerr.UnknownMemberID.Code)
		}
	}
	delete(g.pending, id)
	m, known := g.members[id]
	if !known {
		m = &member{id: id, clientID: clientID, clientHost: clientHost}
		g.members[id] = m
		g.order = append(g.order, id)
	}
	if m.join != nil { // a second join from the same member supersedes the first
		m.join <- &kmsg.JoinGroupResponse{Version: r.Version, ErrorCode: kerr.UnknownMemberID.Code, Generation: -1}
	}
	m.protocols = slices.Clone(r.Protocols)
	m.session, m.rebalanceTimeout = session, rebalance
	m.deadline = now.Add(session)
	answer := make(chan *kmsg.JoinGroupResponse, 1)
	m.join = answer // complete may answer at once and clear m.join
	m.joined = true
	g.protocolType = r.ProtocolType
	if g.state != groupPreparing {
		c.prepare(g, now)
	}
	c.completeIfReady(g, now)
	return nil, answer
}

// prepare starts a rebalance: every member must join again (or is
// removed at the deadline); members waiting for an assignment are told
// to rejoin.
func (c *coordinator) prepare(g *group, now time.Time) {
	g.state = groupPreparing
	longest := time.Duration(0)
	for _, m := range g.members {
		m.joined = m.join != nil
		longest = max(longest, m.rebalanceTimeout)
		if m.sync != nil {
			m.sync <- syncAnswer{code: kerr.RebalanceInProgress.Code}
			m.sync = nil
		}
	}
	g.deadline = now.Add(longest)
}

// completeIfReady completes the rebalance once every member joined.
func (c *coordinator) completeIfReady(g *group, now time.Time) {
	if g.state != groupPreparing {
		return
	}
	for _, m := range g.members {
		if !m.joined {
			return
		}
	}
	c.complete(g, now)
}

// complete ends a rebalance: members that did not join are removed, the
// generation advances, and every joined member gets its answer — the
// leader with the members' metadata to assign from.
func (c *coordinator) complete(g *group, now time.Time) {
	for id, m := range g.members {
		if !m.joined {
			c.remove(g, id)
		}
	}
	g.generation++
	g.persisting = false // a sync of the generation before is answered by now
	if len(g.members) == 0 {
		g.state, g.leader, g.protocol = groupEmpty, "", ""
		c.emptied[g.name] = g
		return
	}
	if _, ok := g.members[g.leader]; !ok {
		g.leader = g.order[0]
	}
	g.protocol = ""
	for _, p := range g.members[g.leader].protocols {
		all := true
		for _, m := range g.members {
			all = all && slices.ContainsFunc(m.protocols, func(q kmsg.JoinGroupRequestProtocol) bool { return q.Name == p.Name })
		}
		if all {
			g.protocol = p.Name
			break
		}
	}
	g.state = groupCompleting
	ids := slices.Clone(g.order)
	for _, id := range ids {
		m := g.members[id]
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.MemberID, resp.LeaderID, resp.Generation = id, g.leader, g.generation
		pt, proto := g.protocolType, g.protocol
		resp.ProtocolType, resp.Protocol = &pt, &proto
		if g.protocol == "" {
			resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		} else if id == g.leader {
			for _, oid := range ids {
				om := g.members[oid]
				jm := kmsg.NewJoinGroupResponseMember()
				jm.MemberID = oid
				for _, p := range om.protocols {
					if p.Name == g.protocol {
						jm.ProtocolMetadata = p.Metadata
					}
				}
				resp.Members = append(resp.Members, jm)
			}
		}
		m.joined = false
		m.deadline = now.Add(m.session)
		if m.join != nil {
			m.join <- resp
			m.join = nil
		}
	}
	if g.protocol == "" {
		for id := range g.members {
			c.remove(g, id)
		}
		g.state = groupEmpty
		c.emptied[g.name] = g
	}
}

func (c *coordinator) remove(g *group, id string) {
	m, ok := g.members[id]
	if !ok {
		return
	}
	if m.join != nil {
		m.join <- &kmsg.JoinGroupResponse{ErrorCode: kerr.UnknownMemberID.Code, Generation: -1}
	}
	if m.sync != nil {
		m.sync <- syncAnswer{code: kerr.UnknownMemberID.Code}
	}
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(o string) bool { return o == id })
	if g.leader == id {
		g.leader = ""
	}
}

// check is the membership fence of SyncGroup, Heartbeat and OffsetCommit.
func (c *coordinator) check(groupID, memberID string, generation int32) (*group, *member, int16) {
	g, ok := c.groups[groupID]
	if !ok {
		return nil, nil, kerr.UnknownMemberID.Code
	}
	m, ok := g.members[memberID]
	if !ok {
		return g, nil, kerr.UnknownMemberID.Code
	}
	if generation != g.generation {
		return g, m, kerr.IllegalGeneration.Code
	}
	return g, m, 0
}

// sync handles a SyncGroup: an answer now, or a channel the answer
// comes on. The leader's assignment must reach the group log before any
// member is answered with it (a coordinator that moves then serves the
// generation on): sync then also returns the group record to write, and
// the caller writes it and calls synced.
func (c *coordinator) sync(r *kmsg.SyncGroupRequest, now time.Time) (syncAnswer, <-chan syncAnswer, *logRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, m, code := c.check(r.Group, r.MemberID, r.Generation)
	if code != 0 {
		return syncAnswer{code: code}, nil, nil
	}
	m.deadline = now.Add(m.session)
	switch g.state {
	case groupPreparing:
		return syncAnswer{code: kerr.RebalanceInProgress.Code}, nil, nil
	case groupStable:
		return syncAnswer{assignment: m.assignment}, nil, nil
	}
	if m.sync != nil {
		m.sync <- syncAnswer{code: kerr.UnknownMemberID.Code}
	}
	m.sync = make(chan syncAnswer, 1)
	if r.MemberID != g.leader || g.persisting {
		return syncAnswer{}, m.sync, nil
	}
	given := map[string][]byte{}
	for _, a := range r.GroupAssignment {
		given[a.MemberID] = a.MemberAssignment
	}
	for id, om := range g.members {
		om.assignment = given[id]
	}
	g.persisting = true
	return syncAnswer{}, m.sync, &logRecord{kind: logGroup, group: groupRecord(g)}
}

// groupRecord is g as the group log keeps it.
func groupRecord(g *group) logGroupState {
	out := logGroupState{generation: g.generation, protocolType: g.protocolType, protocol: g.protocol, leader: g.leader}
	for _, id := range g.order {
		m := g.members[id]
		lm := logMember{id: id, clientID: m.clientID, clientHost: m.clientHost,
			sessionMs: uint32(m.session / time.Millisecond), rebalanceMs: uint32(m.rebalanceTimeout / time.Millisecond), assignment: m.assignment}
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				lm.metadata = p.Metadata
			}
		}
		out.members = append(out.members, lm)
	}
	return out
}

// synced ends a leader's sync of generation once its group record was
// written (code 0: the group is stable and every member waiting gets its
// assignment) or refused (every member waiting gets code and the group
// waits for its members to rejoin).
func (c *coordinator) synced(name string, generation int32, code int16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[name]
	if !ok || g.generation != generation {
		return // dropped or moved on meanwhile: its members were answered
	}
	g.persisting = false
	if g.state != groupCompleting {
		return
	}
	for _, m := range g.members {
		if m.sync == nil {
			continue
		}
		if code != 0 {
			m.sync <- syncAnswer{code: code}
		} else {
			m.sync <- syncAnswer{assignment: m.assignment}
		}
		m.sync = nil
	}
	if code == 0 {
		g.state = groupStable
	}
}

func (c *coordinator) heartbeat(r *kmsg.HeartbeatRequest, now time.Time) int16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, m, code := c.check(r.Group, r.MemberID, r.Generation)
	if m != nil {
		m.deadline = now.Add(m.session)
	}
	if code != 0 {
		return code
	}
	if g.state == groupPreparing {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

func (c *coordinator) leave(groupID string, ids []string, now time.Time) []int16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	codes := make([]int16, len(ids))
	g, ok := c.groups[groupID]
	for i, id := range ids {
		if !ok || g.members[id] == nil {
			codes[i] = kerr.UnknownMemberID.Code
			continue
		}
		c.remove(g, id)
	}
	if ok {
		c.membershipChanged(g, now)
	}
	return codes
}

// membershipChanged rebalances after members left or lapsed.
func (c *coordinator) membershipChanged(g *group, now time.Time) {
	switch {
	case len(g.members) == 0 && g.state != groupEmpty:
		g.state, g.leader, g.protocol = groupEmpty, "", ""
		g.generation++
		c.emptied[g.name] = g
	case g.state == groupStable || g.state == groupCompleting:
		c.prepare(g, now)
	case g.state == groupPreparing:
		c.completeIfReady(g, now)
	}
}

// commitCheck fences an OffsetCommit: a member's commit must carry its
// current generation; a commit without one (generation -1, no member, as
// an admin tool sends) is taken only by a group without members.
func (c *coordinator) commitCheck(groupID, memberID string, generation int32) int16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleting[groupID] {
		return kerr.CoordinatorLoadInProgress.Code
	}
	if generation < 0 && memberID == "" {
		if g, ok := c.groups[groupID]; ok && len(g.members) > 0 {
			return kerr.UnknownMemberID.Code
		}
		return 0
	}
	g, _, code := c.check(groupID, memberID, generation)
	if code == 0 && g.state == groupCompleting {
		return kerr.RebalanceInProgress.Code
	}
	return code
}

// release drops group's membership: this listener no longer coordinates
// it, and the members waiting for a join or sync answer are told
// NOT_COORDINATOR, so they find the new coordinator.
func (c *coordinator) release(groupID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.groups[groupID]; ok {
		c.drop(g)
	}
}

func (c *coordinator) drop(g *group) {
	for _, m := range g.members {
		if m.join != nil {
			m.join <- &kmsg.JoinGroupResponse{ErrorCode: kerr.NotCoordinator.Code, Generation: -1}
			m.join = nil
		}
		if m.sync != nil {
			m.sync <- syncAnswer{code: kerr.NotCoordinator.Code}
			m.sync = nil
		}
	}
	delete(c.groups, g.name)
}

// tick expires lapsed sessions and ends rebalances past their deadline.
func (c *coordinator) tick(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, g := range c.groups {
		for id, at := range g.pending {
			if now.After(at) {
				delete(g.pending, id)
			}
		}
		lapsed := false
		for id, m := range g.members {
			if m.join == nil && now.After(m.deadline) {
				c.remove(g, id)
				lapsed = true
			}
		}
		if lapsed {
			c.membershipChanged(g, now)
		}
		if g.state == groupPreparing && now.After(g.deadline) {
			c.complete(g, now)
		}
		if g.state == groupEmpty && len(g.pending) == 0 {
			delete(c.groups, name) // its offsets stay (c.offsets, and the group log)
		}
	}
	for name, g := range c.cgroups {
		if len(g.members) == 0 {
			delete(c.cgroups, name) // its record and offsets stay
		}
	}
}

func (c *coordinator) list() []kmsg.ListGroupsResponseGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []kmsg.ListGroupsResponseGroup
	for _, g := range c.groups {
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.name, g.protocolType, g.state.String(), "classic"
		out = append(out, lg)
	}
	for _, g := range c.cgroups {
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.name, "consumer", g.state(), "consumer"
		out = append(out, lg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// runJanitor, until ctx ends, reads which nodes are live
// (readLiveness), removes the consumer group members that lapsed
// (expireConsumers), ticks the coordinator, writes the groups emptied by
// lapsed sessions to the group log, in a cluster lets go of the
// coordinator partitions that moved (sweepGroups), and compacts the
// group log partitions that grew long (compactDue).
func (s *Server) runJanitor(ctx context.Context) {
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.readLiveness(ctx)
			s.expireConsumers(ctx, now)
			s.groups.tick(now)
			s.persistEmptied(ctx)
			s.sweepGroups(ctx)
			s.compactDue(ctx)
		}
	}
}

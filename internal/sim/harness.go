package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// The harness's mechanisms that both engine kinds run through, one
// method each. Where a node's engine kind changes what a mechanism does
// (a replicated node has a bus, a metadata group and raft groups; a
// single node has local partitions and its lying disk), the method asks
// the node (node.replicated) or the run (a network or none: sim.net).

// sim is one run, of one node or many: the simulator's one harness.
// Everything runs on the caller's goroutine. A single-node run is a run
// of one node of the single-node engine kind, without a network: the
// fields below that only a cluster uses stay empty.
type sim struct {
	base
	ctx context.Context
	// net is a cluster's network (nil: a single node, which has none).
	net *transport.Network
	// fwds are the forwarded attempts by their forward's request on the
	// bus (the forwarding node, the request id: every attempt forwarded
	// under it, in order, by any life of the node); delivering, those of
	// them a request a node is taking from the bus may be.
	fwds       map[fwdKey][]*attempt
	delivering []*attempt
	fromBus    bool
	// barriers are the read barriers in flight (cbarrier.go).
	barriers    []*barrier
	nextBarrier int
	// wrongDisk is set while a node is started on another's data
	// directory (startOnWrongDisk): the refusal is the expected outcome.
	wrongDisk bool
	// peers are every node that ever ran, founders first, then the nodes
	// that joined (cjoin.go), in the order they started: node i+1 was the
	// i-th to start. The members (sim.nodes) are in id order: every node
	// that ran but those removed (cremove.go), which are in gone.
	peers    []uint64
	founders []uint64
	gone     []*node

	nextSeq  uint64
	metaDone []metaAnswer

	// oldMetrics are the counters of node incarnations that ended (a
	// crash, a single node's restart, a removal), in that order.
	oldMetrics []*metrics.Metrics
	// builds counts how often each replica was built (opened);
	// applyFailed marks the replicas an append failed on.
	builds      map[buildKey]int
	applyFailed map[buildKey]bool
	// storeFailed marks the replicas a consumer offset write failed on;
	// storeOutcomes collects how each consumer offset write was applied.
	storeFailed   map[buildKey]bool
	storeOutcomes map[storeKey]uint8
	// metaLog holds, per metadata raft index, a fingerprint of the store
	// the first node to apply it held after it: every other node must hold
	// the same. metaDup records whether that node's metaHandler found the
	// command a duplicate.
	metaLog map[uint64]string
	metaDup map[uint64]bool
	// placed records, for each incarnation built somewhere, every set of
	// voters its group may have had: its replicas as the metadata of the
	// first node to build it placed them, and the configurations of its
	// moves since (notePlacement).
	placed map[incKey][][]uint64

	netf netState
	// compactEntries is the partitions' raft log compaction interval
	// (shard.Replication.CompactEntries), picked per seed: mostly small,
	// so snapshots and catch-up happen.
	compactEntries uint64
	// actions counts the ends of scheduler actions: raft's random draws
	// during one action are a function of it (see seededReader).
	actions uint64

	// storm is what a join storm's run measures (Config.MemberPartitions,
	// cmembers.go).
	storm stormState
	// delivered are the offsets the group members handed to their
	// applications (invariant 12, invariant_delivered.go).
	delivered map[deliveryKey]*deliveredSet

	// Membership and failover (cjoin.go, cfailover.go): the node being
	// added, how many were, the failover to check after a quiesced
	// leader's crash, and the end of the calm that crash imposed.
	join   *joining
	joins  int
	remove *removing
	// earlySettles are BreakEarlySettle's settles to propose.
	earlySettles []earlySettle
	failover     *failoverCheck
	deafWait     *deafWait
	calmUntil    time.Time

	// peerf is the misbehaving member's spells (cpeer.go).
	peerf peerState
	// raftStateLost is set when the liar removed its copy of a committed
	// incarnation it is a replica of after a lie on that copy's
	// incarnation file (knownReplicaIncarnationDamage), even one holding
	// no message: its raft term, vote and log went with it.
	raftStateLost bool

	// lies are the liar's lies (lie.go, clie.go): a single node's always,
	// a cluster's nil when FaultRates.Lie is 0. liar is the node they
	// hit.
	lies *lies
	liar uint64

	// A single node's inbox bursts (workload.go) and restarts at
	// quiescence (fenced partitions: restartFenced).
	bursts   int
	restarts int
}

// run is the whole simulation: open the nodes, the active phase,
// quiescence and the final checks.
func (s *sim) run() {
	if s.net == nil {
		s.event("start seed=%d shards=%d clients=%d inbox=%d steps=%d",
			s.cfg.Seed, s.cfg.Shards, s.cfg.Clients, s.cfg.InboxSize, s.cfg.Steps)
		s.nodes[0] = s.openNode(1, nil, s.nodes[0].mem, s.nodes[0])
		if s.viol != nil {
			return
		}
	} else if !s.openFounders() {
		return
	}
	// A join storm's run goes on past its steps until it settles.
	s.drive(s.stormRunning)
}

// openFounders opens a cluster's founding members, each on an empty
// disk, and lets them apply what their metadata group holds.
func (s *sim) openFounders() bool {
	s.event("start cluster seed=%d nodes=%d shards=%d clients=%d steps=%d tick=%v compact=%d",
		s.cfg.Seed, s.cfg.Nodes, s.cfg.Shards, s.cfg.Clients, s.cfg.Steps, s.cfg.TickInterval, s.compactEntries)
	// Every endpoint exists before any node sends.
	eps := make([]transport.Bus, len(s.peers))
	for i, id := range s.peers {
		eps[i] = s.net.Endpoint(transport.NodeID(id))
	}
	for i, id := range s.peers {
		n := s.openNode(id, eps[i], vfs.NewMem(), nil)
		if s.viol != nil {
			return false
		}
		s.nodes = append(s.nodes, n)
	}
	for _, n := range s.nodes {
		s.processMeta(n)
	}
	s.afterAction()
	return true
}

// openNode builds node id on disk mem with host.New, as parkway.Open
// builds a node, in manual mode: a cluster member (ep, its network
// endpoint, set) or the single-node engine (ep nil). prev, when set, is
// the node's previous incarnation, whose record it carries over (for a
// single node, the node not yet opened at the start). Faults are held
// off while it opens.
func (s *sim) openNode(id uint64, ep transport.Bus, mem *vfs.MemFS, prev *node) *node {
	n := &node{b: s, id: id, mem: mem, ep: ep, m: metrics.New(), incs: newTimeline(),
		lastServe: make(map[metadata.Namespace]uint64)}
	n.member = ep != nil
	if prev != nil {
		// The node's view of incarnations and what served it carry over:
		// they are the simulator's record of it, not the node's memory;
		// so do its configuration and its clock.
		n.incs, n.lastServe, n.gen = prev.incs, prev.lastServe, prev.gen
		n.peers, n.join, n.joined = prev.peers, prev.join, prev.joined
		n.clk = prev.clk
	} else if slices.Contains(s.founders, id) {
		n.peers, n.joined = s.founders, true
	} else {
		n.peers, n.join = append(s.memberIDs(), id), true
	}
	if n.clk == nil {
		n.clk = s.newNodeClock()
	}
	n.gen++
	n.inj = newInjector(n)
	switch {
	case !n.replicated():
		// Single-node metadata faults are not part of the simulated
		// fault model.
		n.inj.spare = metaDir + "/"
	case s.cfg.Faults.SpareMetadataLog:
		n.inj.spare = path.Dir(metaRaftLog) + "/"
	}
	if s.isLiar(n) {
		n.inj.lies, n.inj.lied = s.lies, s.lies.lieFired
	}
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	n.shadow = make([][]*attempt, s.cfg.Shards)
	n.busy = make([]bool, s.cfg.Shards)
	wrap := func(st partition.Store) partition.Store { return &store{n: n, o: s, inner: st} }
	if !n.replicated() {
		eng, err := host.New(n.hostConfig(errorfs.New(n.mem, n.inj), snapshotEvery, wrap))
		if err != nil {
			s.fail(0, "open node (gen %d): %v", n.gen, err)
			return n
		}
		n.opened(eng)
		s.event("node open gen=%d revision=%d", n.gen, n.meta.Revision())
		return n
	}
	peers := make([]transport.NodeID, len(n.peers))
	for i, p := range n.peers {
		peers[i] = transport.NodeID(p)
	}
	hc := n.hostConfig(s.nodeFS(n), metaSnapshotEvery, wrap)
	hc.Cluster = &host.Cluster{ID: transport.NodeID(id), Peers: peers, Join: n.join, Bus: &outboxBus{n: n},
		TickInterval: s.cfg.TickInterval, CompactEntries: s.compactEntries,
		MaxForwardedBytes: simForwardedBytes, MaxForwardedPeerBytes: simForwardedPeerBytes}
	hc.Events = host.Events{
		MetadataOpened:            func(meta *metadata.Store) { n.meta = meta },
		MetadataApplied:           n.metaApplied,
		MetadataSnapshotInstalled: n.metaSnapshotInstalled,
		MetadataLeaderChanged:     n.metaLeaderChanged,
		MetadataCompacted: func(index uint64, err error) {
			s.event("n%d meta compact at %d err=%v", n.id, index, errString(err))
		},
		MetadataReopened: func(index uint64) {
			s.faults.MetaReopens++
			s.event("n%d meta reopened applied=%d", n.id, index)
		},
	}
	eng, err := host.New(hc)
	if err != nil && s.wrongDisk && errors.Is(err, host.ErrWrongDataDir) {
		s.event("n%d refused the wrong data directory: %v", id, err)
		return n
	}
	if err != nil {
		s.fail(0, "n%d open: %v", id, err)
		return n
	}
	n.opened(eng)
	n.metaTickAt = n.clk.monoNow().Add(s.cfg.TickInterval)
	n.metaRev = n.meta.Revision()
	st := eng.MetadataStatus()
	s.event("n%d open gen=%d shards=%d revision=%d applied=%d snapshot=%d join=%v",
		id, n.gen, s.cfg.Shards, n.meta.Revision(), st.Applied, st.SnapshotIndex, n.join)
	return n
}

// stepFaults ends the faults whose time is up and rolls new ones. A
// single node's crash, or a lie made while it is down, ends the step: the
// node reopened. A cluster's faults last a while (a member down, a
// partition of the network) and are rolled in the cluster's own order;
// its membership changes step here too.
func (s *sim) stepFaults() bool {
	if s.net != nil {
		s.expireFaults()
		s.startFaults()
		s.stormCheck()
		s.joinAct()
		s.removeAct()
		return false
	}
	n := s.nodes[0]
	n.expireDiskFull()
	s.expireClockFaults(n.clk, "node")
	s.startClockFaults(&s.faults, func() (*nodeClock, string) { return n.clk, "node" })
	f := s.cfg.Faults
	if s.depth == 0 && s.roll(f.Crash) {
		s.crash(n)
		return true
	}
	if s.depth == 0 && s.roll(f.Lie) {
		if s.lie() {
			return true // it crashed the node
		}
	}
	if !n.inj.enospc.On() && s.roll(f.DiskFull) {
		s.startDiskFull()
	}
	if n.inj.eio == nil && s.roll(f.DiskError) {
		s.armDiskError(n)
	}
	if s.roll(f.InboxBurst) {
		s.burst()
	}
	return false
}

// membersAct lets the group members act: one in eight of them, at least
// one, so that each of many members (a join storm) still heartbeats
// within its session. Only a cluster has members (Config.validate).
func (s *sim) membersAct() {
	ms := s.members()
	for range max(1, len(ms)/8) {
		cl := ms[s.rng.IntN(len(ms))]
		s.cutMember(cl)
		s.clientAct(cl)
	}
}

// advance moves the virtual clock, and every node's clock with it, and
// releases the delayed messages now due on a cluster's network.
func (s *sim) advance(d time.Duration) {
	s.advanceClocks(d)
	if s.net == nil {
		s.event("clock +%v", d)
		return
	}
	released := s.net.Pump()
	s.event("clock +%v released=%d", d, released)
}

// afterAction ends every action: what the engines sent goes out (a
// cluster member's outbox, the answers its metadata member and forwards
// owe), the per-action invariants are checked, answers are collected, and
// the steppable drivers (forwards, read barriers, metadata proposals)
// take theirs. A single node sends nothing and drives none of them.
func (s *sim) afterAction() {
	s.actions++
	if len(s.earlySettles) > 0 {
		s.proposeEarlySettles()
	}
	for _, n := range s.nodes {
		if n.eng != nil && !n.down {
			n.eng.PumpReplies()
		}
		n.flushOutbox()
		n.collectMeta()
	}
	stepChecks(s)
	s.collect()
	s.stepForwards()
	s.stepBarriers()
	for _, n := range s.nodes {
		n.stored = n.stored[:0]
	}
	for len(s.metaDone) > 0 && s.viol == nil {
		d := s.metaDone[0]
		s.metaDone = s.metaDone[1:]
		s.onMetaResult(d)
		for _, n := range s.nodes {
			n.flushOutbox()
		}
		s.collect()
	}
}

// reconcile runs one pass of shard i's reconciler on n (node.pass). A
// single node's pass must not fail, and what it answered is collected at
// once; a replicated partition's raft log a faulty disk refused fails a
// cluster member's pass, which is counted.
func (s *sim) reconcile(n *node, i int) {
	err := n.pass(s.ctx, i)
	switch {
	case err != nil && n.replicated():
		s.event("n%d pass shard=%d failed: %v", n.id, i, err)
		s.faults.FailedPasses++
	case err != nil:
		s.fail(0, "reconcile shard %d: %v", i, err)
	case !n.replicated():
		s.collect()
	}
}

// crash crashes n: a power loss two times in three, else a process
// crash. A single node is rebuilt from its disk at once; a cluster member
// stays down for up to a second.
func (s *sim) crash(n *node) {
	power := s.powerLoss()
	if n.replicated() {
		s.crashHow(n, power, 0, time.Second)
		return
	}
	s.crashWith(power, nil)
}

// armDiskError arms a one-shot EIO on one of the next few fsyncs, or a
// torn write on one of the next few writes, on n's disk: anywhere on a
// single node, under one partition's directory on a cluster member (one
// that holds partitions and runs).
func (s *sim) armDiskError(n *node) {
	under := ""
	if n.replicated() {
		parts := n.meta.Snapshot().Partitions
		if n.inj.eio != nil || len(parts) == 0 || n.down {
			return
		}
		ns := parts[s.rng.IntN(len(parts))].NS
		n.inj.eioPrefix = partitionDir(ns) + "/"
		under = fmt.Sprintf(" under %v", ns)
	}
	k := n.armDiskError()
	s.event("%sdisk error armed: %s #%d%s", n.tag(), n.inj.eioKind, k, under)
}

// lie injects one lying fault of a kind chosen at random on the liar's
// disk, if it runs, and reports whether that crashed a single node (to
// damage its disk while down: it reopened). A cluster's liar is taken
// down for it only while no other member is down, and comes back later.
func (s *sim) lie() bool {
	n := s.node(s.liar)
	if n == nil || n.down || n.eng == nil {
		return false
	}
	kind, name, ok := s.lies.pick(s.cfg.Faults.LieKinds)
	if !ok {
		return false
	}
	if !lieWhileDown(kind) {
		s.lies.arm(kind, name)
		return false
	}
	if !n.replicated() {
		s.crashWith(true, func() { s.lies.lieDown(kind, name) })
		return true
	}
	if slices.ContainsFunc(s.nodes, func(m *node) bool { return m.down }) {
		return false
	}
	s.crashHow(n, true, 0, time.Second)
	s.lies.lieDown(kind, name)
	return false
}

// faultsOff ends every fault for quiescence: a cluster's network and
// peer spells and its pending failover check end, its members down
// restart, and every node's disk faults and the liar's running lies end.
func (s *sim) faultsOff() {
	released := 0
	if s.net != nil {
		if f := s.failover; f != nil {
			// The crashed node restarts now: its failover goes unchecked.
			s.event("failover of n%d not checked: quiescence", f.node)
			s.failover = nil
		}
		s.deafWait = nil
		s.netf = netState{}
		s.peerFaultsOff()
		s.setWeather()
		released = s.net.Flush() + s.net.UnclogAll()
		for _, n := range s.nodes {
			if n.down {
				s.restart(n)
			}
		}
	}
	for _, n := range s.nodes {
		n.stopped = false
		n.faultsOff()
	}
	if s.lies != nil {
		s.lies.stopRunning()
	}
	if s.net != nil {
		s.applyCuts()
		s.event("faults off: released=%d", released)
	}
}

// clientAct lets cl act: retry or re-propose its operation if that is
// due, or start a new one through a node it can reach (a member client
// acts as its member).
func (s *sim) clientAct(cl *client) {
	if o := cl.op; o != nil {
		retryIfDue(o, s.clk.Now(), s.retry, s.metaTimeout)
		return
	}
	if cl.member != nil {
		s.memberAct(cl)
		return
	}
	if cl.extra || s.quiescing || s.calming() {
		return
	}
	n := s.pickNode()
	if n == nil {
		return
	}
	var lookup func() bool
	if n.replicated() {
		lookup = func() bool {
			if s.rng.IntN(100) < 5 && len(s.barriers) < maxBarriers {
				// A lookup by name through n: its read barrier.
				s.startBarrier(n)
				return true
			}
			return false
		}
	}
	s.act(cl, n, func(group bool) {
		switch {
		case n.replicated():
			s.metaOpStart(cl, n, group)
		case group:
			s.groupOp()
		default:
			s.metaOp(cl)
		}
	}, lookup, func(ns metadata.Namespace, kind opKind) { s.dataOp(cl, n, ns, kind) })
}

// dataOp starts a data operation of cl's on ns through n. A produce
// through a cluster member notes the links up as it starts: its
// acknowledgement needs a quorum it could reach (checkAckQuorum).
func (s *sim) dataOp(cl *client, n *node, ns metadata.Namespace, kind opKind) *op {
	return s.callData(cl, n, ns, kind, func(o *op, a *attempt) {
		if n.replicated() && (kind == kindProduce || kind == kindBatch) {
			o.reach = s.links()
		}
		s.startCall(o, a, n)
	})
}

// retry tries o again, through its home node if the client can reach it
// (else it waits, within its deadline); a metadata operation in a cluster
// is proposed again.
func (s *sim) retry(o *op) {
	o.waiting = false
	home := s.cur(o.home)
	if !home.reachable() {
		// The client cannot reach its node: it waits, within its deadline.
		s.scheduleRetry(o, errUnreachable)
		return
	}
	if o.kind == kindMeta {
		s.propose(o)
		return
	}
	s.retryCall(o, home)
}

// follow takes the step the client call decided on after an answer: a
// cluster's forward to the leader its "not leader" hint names is made
// here, through the home node (at most maxHops in a row); every other
// step is callStep's.
func (s *sim) follow(o *op, _ *attempt, st host.CallStep, cause error) {
	if st.Op == host.CallForward {
		home, lead := s.cur(o.home), s.node(st.To)
		if lead != nil && lead.id != home.id && home.reachable() && o.hops < maxHops {
			o.hops++
			s.ops.Redirects++
			s.forward(s.newAttempt(o), home, lead)
			return
		}
		o.hops = 0
		st = s.callOf(o).Answer(s.clk.Now(), shard.Response{}, forwardFailed(st.To, cause))
	}
	s.callStep(o, st, cause)
}

// onSuccess checks an ok answer and ends its operation. A produce's
// acknowledgement is checked against where its messages went: the node's
// one copy (checkSoleAck), or the replicated log (checkReplicaAck); a
// consumer offset store's against the cluster member's application.
func (s *sim) onSuccess(a *attempt, r shard.Response) {
	o := a.op
	switch {
	case (o.kind == kindProduce || o.kind == kindBatch) && !a.node.replicated():
		if !s.checkSoleAck(a, r) {
			return
		}
	case o.kind == kindProduce || o.kind == kindBatch:
		if !s.checkReplicaAck(a, r) {
			return
		}
	case o.kind == kindStore && a.node.replicated():
		if !s.checkStoreApplied(a, r) {
			return
		}
	}
	s.finish(o, outcomeOK, r, nil)
}

// checkSoleAck checks a single node's acknowledgement of a produce: its
// messages were appended, in order, at the offsets acknowledged, and the
// incarnation still holds them there. It reports false after recording
// a violation.
func (s *sim) checkSoleAck(a *attempt, r shard.Response) bool {
	var key incKey
	for i, id := range a.ids {
		info := s.msgs[id]
		if !info.appended {
			s.fail(3, "attempt %d acknowledged at offset %d, but its message %d was never appended", a.id, r.Offset, id)
			return false
		}
		if i == 0 {
			key = info.key
		}
		if info.key != key || info.off != r.Offset+uint64(i) {
			s.fail(3, "attempt %d acknowledged at offset %d, but its message %d landed at %v/%d",
				a.id, r.Offset, id, info.key, info.off)
			return false
		}
	}
	if log := s.oracle[key]; log != nil {
		for i, id := range a.ids {
			off := r.Offset + uint64(i)
			if off >= uint64(len(log.ids)) || log.ids[off] != id {
				s.fail(3, "attempt %d acknowledged message %d at %v/%d, which no longer holds it", a.id, id, key, off)
				return false
			}
			log.acked[off] = true
		}
	}
	s.ops.Acked++
	return true
}

// checkReplicaAck checks a cluster's acknowledgement of a produce: one of
// the operation's tries was applied at the offset acknowledged, in the
// incarnation that acknowledged, and a quorum could have acknowledged
// it. It reports false after recording a violation.
func (s *sim) checkReplicaAck(a *attempt, r shard.Response) bool {
	o := a.op
	tries, ok := s.appliedTries(o)
	if !ok {
		return false
	}
	// The incarnation that acknowledged: where this try's messages
	// went, or else the one its frame was stamped with.
	var applied *attempt
	if len(a.ids) > 0 && s.msgs[a.ids[0]].appended {
		applied = a
	} else {
		for key, x := range tries {
			if (a.stamp == 0 || key.epoch == a.stamp) && s.oracle[key] != nil &&
				r.Offset < uint64(len(s.oracle[key].ids)) && s.oracle[key].ids[r.Offset] == x.ids[0] {
				applied = x
			}
		}
	}
	if applied == nil {
		s.fail(3, "attempt %d (op %d) acknowledged at offset %d, but no try of the op is there", a.id, o.id, r.Offset)
		return false
	}
	key := s.msgs[applied.ids[0]].key
	rl := s.oracle[key]
	for i, id := range applied.ids {
		info := s.msgs[id]
		off := r.Offset + uint64(i)
		if !info.appended || info.key != key || info.off != off || rl == nil || rl.ids[off] != id {
			s.fail(3, "attempt %d (op %d) acknowledged at offset %d, but message %d of attempt %d landed at %v/%d",
				a.id, o.id, r.Offset, id, applied.id, info.key, info.off)
			return false
		}
		rl.acked[off] = true
		rl.ackedEnd = max(rl.ackedEnd, off+1)
	}
	o.acked = applied
	s.ops.Acked++
	s.checkAckQuorum(a, key)
	return true
}

// checkStoreApplied checks a cluster member's ok answer to a consumer
// offset store: the leader answers it when it applies it, in the action
// that produced this answer. It reports false after recording a
// violation.
func (s *sim) checkStoreApplied(a *attempt, r shard.Response) bool {
	o := a.op
	// A forwarded store's record was taken when its node answered.
	rec := a.fwdStored
	if a.fwd == nil {
		i := slices.IndexFunc(a.node.stored, func(st storeRecord) bool {
			return st.ns == o.ns && st.consumer == o.consumer && st.offset == o.offset && st.err == nil
		})
		if i >= 0 {
			st := a.node.stored[i]
			rec = &st
			a.node.stored = slices.Delete(a.node.stored, i, i+1) // one answer per application
		}
	}
	if r.Offset != o.offset || rec == nil {
		s.fail(5, "attempt %d (op %d) storing %s=%d was answered ok (offset %d), but n%d stored no such offset then",
			a.id, o.id, o.consumer, o.offset, r.Offset, a.node.id)
		return false
	}
	a.served = rec.epoch
	return true
}

// damageAnswered checks an answer against the lies: damage where no lie
// explains it is a false alarm (invariant 3). A single node's damage may
// be an incarnation's that was replaced while the request waited (a
// parked frame answered with its build's failure); a cluster member's
// log damage must be the liar's, for a partition a lie touched. It
// reports false after recording the violation.
func (s *sim) damageAnswered(a *attempt, err error) bool {
	o := a.op
	if a.node.replicated() {
		if isCorruptLog(err) && !s.damageExplained(a) {
			s.fail(3, "attempt %d (op %d %v %v) answered by n%d with damage no lie explains: %v", a.id, o.id, o.kind, o.ns, a.node.id, err)
			return false
		}
		return true
	}
	if err == nil || !isCorrupt(err) {
		return true
	}
	for _, epoch := range a.node.incs.during(o.ns, o.callEv, s.tr.n) {
		if s.lies.damageOK(incKey{o.ns, epoch}) {
			return true
		}
	}
	s.fail(3, "attempt %d (op %d %v %v) answered with damage no lie explains: %v", a.id, o.id, o.kind, o.ns, err)
	return false
}

// settle runs rounds until the run is calm — nothing in flight, no client
// waiting, every node idle; in a cluster also every replica converged
// and leadership balanced, for raftCalmRounds more rounds — or reports
// what kept it busy past quiesceLimit.
func (s *sim) settle() bool {
	converged := false
	return s.settleLoop(func() (bool, int) {
		s.settleRound()
		if s.net == nil {
			return s.idle(), calmRounds
		}
		converged = s.converged() == ""
		return converged && s.idle() && s.unbalanced() == "", raftCalmRounds + calmRounds
	}, s.notQuiescent, func(calm int) {
		// A cluster's first calm rounds still move the clock one raft
		// tick at a time: the message logs agree, but a write that adds
		// no message (a consumer offset) may not have reached every
		// replica yet, and a group may still be electing.
		s.advanceQuiet(s.net == nil || converged && (calm == 0 || calm > raftCalmRounds))
	})
}

// settleRound is one round of quiescence: the engine work that is ready
// runs (stepAll on a single node, drain in a cluster), due retries and
// membership changes step, and every reconciler passes (a cluster
// member's when its pass is due).
func (s *sim) settleRound() {
	if s.net == nil {
		s.stepAll()
		s.retryDue(s.retry, nil)
		s.stepAll()
		for i := range s.nodes[0].shards {
			s.reconcile(s.nodes[0], i)
		}
		s.stepAll()
		return
	}
	s.drain()
	s.retryDue(s.retry, s.metaTimeout)
	s.joinAct()
	s.removeAct()
	s.afterAction()
	s.drain()
	for _, n := range s.nodes {
		for i := range n.shards {
			if n.passDue(i, n.clk.monoNow()) {
				s.reconcile(n, i)
				s.afterAction()
			}
		}
	}
	s.drain()
}

// advanceQuiet moves the clock on at quiescence, never past a due retry:
// by one raft tick while a cluster's replicas converge; once they have
// (always, on a single node), by a whole pass period, so parked frames
// age and backoffs run out in few rounds — by a tenth of one while a
// cluster's requests are still out (raft sees one tick per round, enough
// to elect a leader in a second or two).
func (s *sim) advanceQuiet(converged bool) {
	now := s.clk.Now()
	next := now.Add(s.cfg.TickInterval)
	if converged {
		next = now.Add(passPeriod)
		if s.net != nil && (len(s.inflight) > 0 || slices.ContainsFunc(s.clients, func(cl *client) bool { return cl.op != nil })) {
			next = now.Add(passPeriod / 10)
		}
	}
	for _, o := range s.waitingOps() {
		if o.retryAt.Before(next) {
			next = o.retryAt
		}
	}
	s.advance(max(next.Sub(now), time.Microsecond))
}

// advanceSettling moves the clock on while a final read waits
// (advanceQuiet): by one raft tick while a cluster's replicas may still
// converge.
func (s *sim) advanceSettling() { s.advanceQuiet(s.net == nil) }

// idle reports whether nothing is in flight or waiting and every node is
// idle: no request, no operation retrying; in a cluster also no client
// operation, final read, read barrier, membership change or replica
// move under way.
func (s *sim) idle() bool {
	if len(s.inflight) > 0 {
		return false
	}
	if s.net == nil {
		return len(s.waitingOps()) == 0 && s.nodesIdle()
	}
	if len(s.barriers) > 0 || s.join != nil || s.remove != nil || s.moving() != "" {
		return false
	}
	for _, cl := range s.clients {
		if cl.op != nil {
			return false
		}
	}
	for _, o := range s.finalOps {
		if !o.done {
			return false
		}
	}
	return s.nodesIdle()
}

// notQuiescent reports what kept the run busy past quiesceLimit: requests
// never answered, park buffers not empty, a cluster's replicas not
// converged, membership changes or moves not done, leadership not back
// where it belongs, operations still retrying.
func (s *sim) notQuiescent() {
	if s.net == nil {
		s.notQuiescentNode()
		return
	}
	limit := fmt.Sprintf("%v after work and faults stopped", quiesceLimit)
	// deadDamage: every parked frame waits on the liar for a partition
	// whose directory a lie left with a dead incarnation's damaged
	// incarnation file (knownDeadIncarnationDamage).
	deadDamage := true
	parked, ok := s.parked(s.ctx, func(n *node, pn shard.ParkedNamespace) {
		deadDamage = deadDamage && s.deadIncarnationDamaged(n, pn.NS)
	})
	if !ok {
		return
	}
	unanswered := s.unanswered()
	switch diff := s.converged(); {
	case len(unanswered) > 0:
		s.fail(1, "requests never answered (%s): %s", limit, strings.Join(unanswered, "; "))
		switch {
		case s.silencedByOldProposal(s.inflight):
		case s.silencedByApplyError(s.inflight):
		}
	case len(parked) > 0:
		known := ""
		if deadDamage {
			known = knownDeadIncarnationDamage
		}
		s.failKnown(known, 4, "park buffers not empty %s: %s", limit, strings.Join(parked, "; "))
	case diff != "":
		known := ""
		if s.lies != nil && s.convergedExcept(s.unownedSoleLog) == "" {
			known = knownUnownedSoleLog
		}
		s.failKnown(known, 3, "replicas never converged (%s): %s", limit, diff)
	case s.join != nil:
		s.fail(8, "the addition of n%d never completed (%s)", s.join.id, limit)
	case s.remove != nil:
		s.fail(8, "the removal of n%d never completed (%s, %d calls): %s", s.remove.id, limit, s.remove.calls, s.heldBy(s.remove.id))
	case s.moving() != "":
		known := ""
		if s.twoVoterReseeds() {
			known = knownTwoVoterReseed
		}
		s.failKnown(known, 7, "replica moves never settled (%s): %s", limit, s.moving())
	case s.unbalanced() != "":
		s.fail(7, "leadership never went back to the preferred leaders (%s): %s", limit, s.unbalanced())
	default:
		var busy []string
		for _, cl := range s.clients {
			if cl.op != nil {
				busy = append(busy, fmt.Sprintf("op %d (%v)", cl.op.id, cl.op.kind))
			}
		}
		s.fail(1, "operations never finished (%s): %s", limit, strings.Join(busy, ", "))
	}
}

// notQuiescentNode is notQuiescent's report for a single node, which has
// no replicas to converge nor membership to change.
func (s *sim) notQuiescentNode() {
	parked, ok := s.parked(s.ctx, nil)
	if !ok {
		return
	}
	unanswered := s.unanswered()
	limit := fmt.Sprintf("%v after work stopped", quiesceLimit)
	switch {
	case len(parked) > 0:
		s.fail(4, "park buffers not empty %s: %s; %d requests unanswered", limit, strings.Join(parked, "; "), len(unanswered))
	case len(unanswered) > 0:
		s.fail(1, "requests never answered (%s): %s", limit, strings.Join(unanswered, "; "))
	default:
		s.fail(4, "the node did not quiesce %s: %d operations still retrying", limit, len(s.waitingOps()))
	}
}

// unanswered describes the requests in flight, for a violation's text.
func (s *sim) unanswered() []string {
	var out []string
	for _, a := range s.inflight {
		on := ""
		if a.node.replicated() {
			on = fmt.Sprintf(" on n%d", a.node.id)
		}
		out = append(out, fmt.Sprintf("attempt %d (op %d %v %v%s, sent at event %d)", a.id, a.op.id, a.op.kind, a.op.ns, on, a.sendEv))
	}
	return out
}

// restartFenced restarts a single node whose final read met a partition
// fenced after a failed fsync, as an operator would: the process, not the
// machine (the page cache survives). A cluster's replica rebuilds from
// its group instead, and its final reads never report one.
func (s *sim) restartFenced() {
	s.restarts++
	old := s.nodes[0]
	old.inj.dead = true
	s.event("RESTART gen=%d inflight=%d", old.gen, len(s.inflight))
	s.abandon(old)
	old.close()
	s.oldMetrics = append(s.oldMetrics, old.m)
	s.nodes[0] = s.openNode(old.id, nil, old.mem, old)
}

// finalReadDamaged reads key offset by offset if a lie damaged a single
// node's copy (done), reporting fenced as finalReads does. A cluster's
// copy the liar damaged is read as every other is, and damageReported
// excuses its answer.
func (s *sim) finalReadDamaged(key incKey) (fenced, done bool) {
	if s.net != nil || !s.lies.damageOK(key) {
		return false, false
	}
	return s.readDamaged(key), true
}

// damageReported reports whether o's failure, the answer of a final read
// of key through n, is damage the liar reports for its copy (counted as
// detected): the liar answered it (n itself, or the replica n's "not
// leader" hint sent the read to). A single node's damaged partitions are
// read by finalReadDamaged, and no other answer is excused.
func (s *sim) damageReported(n *node, o *op, key incKey) bool {
	if !n.replicated() || len(o.attempts) == 0 || !isLogDamage(o.err) || !s.liedTo(o.attempts[len(o.attempts)-1].node, key) {
		return false
	}
	s.faults.Detected++
	s.event("final read of %v through n%d: damage reported by the liar: %v", key, n.id, o.err)
	return true
}

// history places every operation in its partition incarnation's history
// (invariant 5). A cluster's produce may have been applied by several
// tries (linearizeProduce), and a consumer offset store in incarnations
// besides the one that served it (storeElsewhere).
func (s *sim) history() histories {
	hist := make(histories)
	for _, o := range s.allOps {
		if s.net != nil && (o.kind == kindProduce || o.kind == kindBatch) {
			s.linearizeProduce(o, hist.add)
			if s.viol != nil {
				return nil
			}
			continue
		}
		key, in, out, ok := s.linearizeOp(o)
		if s.viol != nil {
			return nil
		}
		if ok {
			hist.add(o, key, in, out)
		}
		if s.net != nil && o.kind == kindStore {
			except := uint64(0)
			if ok {
				except = key.epoch
			}
			s.storeElsewhere(o, except, hist.add)
		}
	}
	return hist
}

// linearizeOp places o in its incarnation's history: a read where the
// try that served it was served; a single node's produce where its one
// applied try went; a cluster's store of unknown outcome in the
// incarnation a leader took its last stamped try against.
func (s *sim) linearizeOp(o *op) (incKey, linIn, linOut, bool) {
	if s.net == nil && (o.kind == kindProduce || o.kind == kindBatch) {
		return s.linearizeSoleProduce(o)
	}
	in, out, ok := linearizeRead(o)
	if !ok {
		return incKey{}, in, out, false
	}
	if out.unknown && s.net != nil {
		// A store whose outcome is unknown was proposed by a leader that
		// took one of its tries against the incarnation it was stamped
		// with; a try no leader took did nothing.
		for _, a := range slices.Backward(o.attempts) {
			if a.handles > 0 && a.stamp != 0 {
				return incKey{o.ns, a.stamp}, in, out, true
			}
		}
		return incKey{}, in, out, false
	}
	// The incarnation that served the final attempt (the tap saw it),
	// which was committed at that moment (the tap checked the fence), so
	// at some point while the operation ran. In flight at a single
	// node's crash, no shard served it (answers are collected after
	// every engine action, crashes fall between them): it had no effect.
	last := o.attempts[len(o.attempts)-1].node
	whose := ""
	if last.replicated() {
		whose = fmt.Sprintf("n%d's ", last.id)
	}
	key, ok := s.placeServed(o, last.incs, whose, out)
	return key, in, out, ok
}

// linearizeSoleProduce places a single node's produce: at most one of its
// tries was appended, where its messages went.
func (s *sim) linearizeSoleProduce(o *op) (incKey, linIn, linOut, bool) {
	in := linIn{kind: o.kind}
	var out linOut
	var applied *attempt
	for _, a := range o.attempts {
		if len(a.ids) > 0 && s.msgs[a.ids[0]].appended {
			if applied != nil {
				s.fail(5, "op %d applied twice: attempts %d and %d", o.id, applied.id, a.id)
				return incKey{}, in, out, false
			}
			applied = a
		}
	}
	switch o.outcome {
	case outcomeOK:
		out.offset = o.resp.Offset
	case outcomeUnknown:
		out.unknown = true
	default:
		if applied != nil {
			s.fail(5, "op %d ended %v (%v), yet attempt %d was appended", o.id, o.outcome, o.err, applied.id)
		}
		return incKey{}, in, out, false
	}
	if applied == nil {
		return incKey{}, in, out, false // unknown and never appended
	}
	in.ids = applied.ids
	return s.msgs[applied.ids[0]].key, in, out, true
}

// dropOK says whether an injected fault or convergence explains a frame
// drop (invariant 4): dropGates on a single node, clusterDropOK in a
// cluster, by variant.
func (s *sim) dropOK(variant, reason string) bool {
	if s.net != nil {
		return s.clusterDropOK(variant, reason)
	}
	gate, ok := dropGates[reason]
	return ok && gate(s)
}

// dropCounters lists the metrics of every node incarnation, the crashed
// ones first. A single node's are its generations, in order, named so in
// a violation's text.
func (s *sim) dropCounters() []dropCounter {
	ms := slices.Concat(s.oldMetrics, nodeMetrics(s.nodes))
	out := make([]dropCounter, 0, len(ms))
	for i, m := range ms {
		c := dropCounter{m: m}
		if s.net == nil {
			c.who, c.label = fmt.Sprintf("node gen %d ", i+1), fmt.Sprintf("gen=%d ", i+1)
		}
		out = append(out, c)
	}
	return out
}

// The storage tap's reports (tapOracle). A single node's copy of an
// incarnation is its log: the oracle is that copy (onAppend, onRead,
// verifyReopen). A cluster's log is raft's, and each replica holds a
// prefix of it: the oracle is the log, with each replica's length
// (onReplicaAppend, onReplicaRead, verifyReplicaReopen).

// tapBuilt checks a build of key on n that succeeded — a reopen holds
// what the oracle says that copy held, a fresh build nothing — and
// records it.
func (s *sim) tapBuilt(n *node, key incKey, p partition.Partition) {
	rl := s.oracle[key]
	var have uint64
	reopen := rl != nil
	if n.replicated() {
		s.checkPlacedBuild(n, key)
		if info, ok := n.meta.Partition(key.ns); ok && info.CreatedRevision == key.epoch {
			s.notePlacement(info)
		}
		s.builds[buildKey{n.id, key}]++
		if rl == nil {
			rl = &incLog{lens: make(map[uint64]uint64)}
			s.oracle[key] = rl
		}
		have, reopen = rl.lens[n.id]
	}
	switch {
	case reopen && n.replicated():
		s.verifyReplicaReopen(n, key, rl, have, p)
	case reopen:
		s.verifyReopen(n, key, rl, p)
		return
	case p.NextOffset() != 0 || p.StartOffset() != 0:
		on := ""
		if n.replicated() {
			on = fmt.Sprintf(" on n%d", n.id)
		}
		s.fail(2, "a fresh build of %v%s holds offsets [%d, %d): data of another incarnation",
			key, on, p.StartOffset(), p.NextOffset())
	}
	if n.replicated() {
		rl.lens[n.id] = p.NextOffset()
	} else {
		s.oracle[key] = &incLog{}
	}
}

// tapBuildFailed judges a build of key on n that failed with err: on a
// single node damage may fail it only where a lie left it (invariant 3),
// and counts as detected. A cluster's replica rebuilds from its group.
func (s *sim) tapBuildFailed(n *node, key incKey, err error) {
	if n.replicated() || !isDamageError(err) {
		return
	}
	if isCorrupt(err) && !s.lies.damageOK(key) {
		s.fail(3, "build of %v failed with damage no lie explains: %v", key, err)
	}
	s.faults.Detected++
}

// tapAppended checks and records an append to key on n: msgs at first,
// or err (a cluster's replica whose append failed is marked).
func (s *sim) tapAppended(n *node, key incKey, first uint64, msgs []partition.Message, err error) {
	switch {
	case n.replicated() && err != nil:
		s.applyFailed[buildKey{n.id, key}] = true
	case n.replicated():
		s.onReplicaAppend(n, key, first, msgs)
	default:
		n.lastServe[key.ns] = key.epoch
		if err == nil {
			s.onAppend(key, first, msgs)
		}
	}
}

// tapRead checks a read of key on n from from, for a client unless a
// peer's catch-up fetch made it.
func (s *sim) tapRead(n *node, key incKey, from uint64, msgs []partition.Message, client bool) {
	if n.replicated() {
		s.onReplicaRead(n, key, from, msgs, client)
		return
	}
	s.onRead(key, from, msgs)
}

// tapStoreOffset stores a consumer offset in t, as the node's engine
// asked. A single node's store is a serve of the incarnation; a cluster
// member's is an application of the replicated write, recorded for the
// answer's check (checkStoreApplied) and the replicas' agreement.
func (s *sim) tapStoreOffset(t *tap, consumer string, offset uint64) error {
	n := t.n
	if !n.replicated() {
		t.serving("store offset")
		return t.Partition.StoreConsumerOffset(consumer, offset)
	}
	err := t.Partition.StoreConsumerOffset(consumer, offset)
	if !n.inj.dead {
		if err != nil && !errors.Is(err, partition.ErrOffsetOutOfRange) {
			s.storeFailed[buildKey{n.id, t.key}] = true
			s.event("n%d store offset %v %s=%d err=%v", n.id, t.key, consumer, offset, err)
		}
		sk := storeKey{t.key, consumer, offset}
		s.storeOutcomes[sk] |= storeOutcome(err)
		n.lastServe[t.key.ns] = t.key.epoch
		n.stored = append(n.stored, storeRecord{ns: t.key.ns, consumer: consumer, offset: offset, epoch: t.key.epoch, err: err})
	}
	return err
}

// tapRemoved checks and records the removal of ns's data on n.
func (s *sim) tapRemoved(n *node, ns metadata.Namespace) {
	if !n.replicated() {
		s.removedSole(n, ns)
		return
	}
	// member: this node's metadata commits the incarnation rev and names
	// the node one of its group's members.
	info, committed := n.meta.Partition(ns)
	rev, member := info.CreatedRevision, committed && info.Holds(n.id)
	for _, k := range slices.SortedFunc(maps.Keys(s.oracle), incKey.compare) {
		if k.ns != ns {
			continue
		}
		rl := s.oracle[k]
		incDamage := s.liedTo(n, k) && s.lies.touched(k, "incarnation")
		if member && k.epoch == rev && incDamage {
			s.raftStateLost = true
			s.event("n%d removes its copy of %v, raft state included (known limit: its incarnation file was damaged)", n.id, k)
		}
		if member && k.epoch == rev && rl.lens[n.id] > 0 {
			known := ""
			if incDamage {
				known = knownReplicaIncarnationDamage
			}
			s.failKnown(known, 3, "n%d removed the committed incarnation %v with %d messages, whose replicas %v (leaving %v) it is one of",
				n.id, k, rl.lens[n.id], info.Replicas, info.Leaving)
		}
		delete(rl.lens, n.id)
	}
}

// removedSole checks and records the removal of ns's data on a single
// node, whose copy is the log: the oracle forgets it.
func (s *sim) removedSole(n *node, ns metadata.Namespace) {
	rev, committed := n.meta.CreatedRevision(ns)
	listed, ok := n.listed[ns]
	delete(n.listed, ns)
	// The orphan sweep removing a directory listed at another
	// incarnation leaves the committed one's data where it is: a
	// partition built deferred has no directory, its records are in the
	// journal (DESIGN behaviour 32). Its next build is checked as a
	// reopen: every acknowledged message there, or its loss reported.
	keep := committed && ok && listed != rev
	for _, k := range slices.SortedFunc(maps.Keys(s.oracle), incKey.compare) {
		if k.ns != ns || keep && k.epoch == rev {
			continue
		}
		// After a power loss the committed incarnation's directory may be
		// removed as half-built (its layout is made durable by its first
		// sync, before any ack): only unacknowledged messages may go with it.
		if committed && k.epoch == rev && slices.Contains(s.oracle[k].acked, true) {
			known := ""
			if s.lies.touched(k, "incarnation") && s.lies.all {
				known = knownIncarnationDamage
			}
			s.failKnown(known, 3, "the committed incarnation %v was removed with %d messages, some acknowledged", k, len(s.oracle[k].ids))
		}
		delete(s.oracle, k)
	}
}

// unlinearized says whether an incarnation's history is left out of the
// linearizability check: a single node's damage a lie left (invariant 3
// checks it offset by offset). A cluster checks every incarnation's (a
// replica's damage is the liar's, and the log is raft's).
func (s *sim) unlinearized(k incKey) bool { return s.net == nil && s.lies.damageOK(k) }

package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/inbound"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// A member that misbehaves within the protocol (FaultRates.Peer). The
// transport authenticates it, so everything it sends reaches the
// engines, and everything it sends is well formed; what it says is
// false, or too much. The engine is driven as always: the misbehaving
// node runs the real engine, and the simulator adds to what that engine
// sends, in the transport wrapper (flushOutbox) or from the node's
// endpoint, so no production code has a path for it. Three kinds, and a
// fourth that an honest member's congested link shares with a
// misbehaving one:
//
//   - Forged terms (PeerFaultRates.Terms): besides some of its raft
//     messages — heartbeats, heartbeat and append answers, votes and
//     pre-votes, of partition groups (alone or batched) and of the
//     metadata group — the member sends a copy under another term. An
//     extreme term (2^62, 2^62−1, 2^62+1, 2^64−1) must be refused by the
//     receiver's bound (replica.MaxTermStep relative to its own term, and
//     the absolute cap): one accepted used to leave its group unable to
//     elect for good (issue 26). A jump ahead of the real term (up to
//     2^28) is within the bound: raft adopts it — a follower takes the
//     sender for its leader in that term, a leader that hears of a
//     higher term steps down — and the group must elect again. The copy
//     forges only the message's term, never its entries, log position or
//     commit, and never claims leadership with data: raft's safety holds
//     against a term claimed by a heartbeat or a vote (no entry, and no
//     lease read: reads go through ReadIndex), while a forged append could
//     break it, which the README's security model leaves to the member's
//     trust. A run forges jumps of termJumpBudget in all at most: a
//     member more than replica.MaxTermStep behind its group is refused
//     for good by design (a crashed replica would never rejoin), which a
//     misbehaving member could otherwise reach with two messages.
//   - A flood of forwarded requests (PeerFaultRates.Flood): bursts of
//     large produce requests (host.KindRequest) for a partition the
//     member's metadata knows, under an incarnation that never exists
//     (floodEpoch, so no replica ever appends one), and probes for them
//     (host.KindProbe). The receiver holds each from receipt until it is
//     answered (served by its shard; parked until its partition is built
//     or its park expires), within its forwarded-request budgets, which
//     the simulator sets small (simForwardedPeerBytes,
//     simForwardedBytes); over them a request is answered at once with a
//     retriable error. Invariant 10 checks the budget never passes and is
//     all given back at quiescence; the others — no acknowledged loss,
//     every group led again, every replica whole — that the flood starves
//     nothing for good.
//   - Stalled frames (PeerFaultRates.Stall): every node takes each
//     message off the network as a frame through the transport's own
//     inbound budget (internal/inbound: the core transport.TCPBus runs,
//     with the deadlines it returns enforced here on the receiver's
//     monotonic clock rather than as socket deadlines): charged at its
//     length field and header, given back once the engine took it. The
//     member opens frames on connections of their own that claim a
//     large size and never end (stopped after the header, or dribbled
//     short of the last byte); the receiver's read deadlines close them
//     (sweepStalls). Invariant 13 checks the bounds, the deadlines
//     against the simulator's own account of each frame, that a closed
//     connection holds nothing, and that no other member's frame is
//     refused.
//   - Slow links (PeerFaultRates.SlowLink, cslow.go; on in the default
//     cluster faults): one member's regular connection to another is a byte
//     stream whose frames arrive in dribbles or stop; the sender's later
//     frames to that receiver wait behind the one being read until it
//     is whole, or until the receiver's read deadline closes the
//     connection and loses them; the sender's next frame opens a new
//     connection. Invariant 13 as above; the liveness invariants, that
//     the lost frames take nothing for good.
//
// A fifth, connection floods (PeerFaultRates.ConnFlood, cconns.go; on in
// the default cluster faults), drives the transport's connection slots
// (internal/slots) rather than its frame budget. Not modelled: the TLS
// handshake's bytes and CPU (TestBehaviour26PeerShareKeepsOtherPeersServed
// and TestTCPHandshakeLimit cover the sockets).

// The forwarded-request budgets of the simulated nodes: small, so that a
// flood meets them (a request is charged its bytes and 8 KiB).
const (
	simForwardedBytes     = 512 << 10
	simForwardedPeerBytes = 192 << 10
)

// The flood's requests: floodProducer marks them (shard.Request.Producer;
// the inbox mirror knows them by it), floodEpoch is an incarnation no
// partition ever has (a metadata revision, which a run never comes near),
// and their request ids start at floodIDBase, above every id an engine
// draws (it counts up from a random base below 2^63, replica.IDBase, and
// would need 2^62 requests to reach it), so no answer is taken for
// another's.
const (
	floodProducer = 0xf100df100df100d1
	floodEpoch    = 1 << 62
	floodIDBase   = 1<<63 | 1<<62
)

// Forged jumps: each at most maxTermJump, termJumpBudget in all per run
// (well below replica.MaxTermStep, 2^32).
const (
	maxTermJump    = 1 << 28
	termJumpBudget = 1 << 31
)

// peerState is the misbehaving member's spells.
type peerState struct {
	// termNode forges terms until termEnd (0: no spell); jumped is what
	// the run's forged jumps add up to.
	termNode uint64
	termEnd  time.Time
	jumped   uint64
	// floodNode floods until floodEnd (0: no spell); floodID is the
	// flood's last request id, floodTo the member its last burst went to.
	floodNode uint64
	floodEnd  time.Time
	floodID   uint64
	floodTo   uint64
	// refusedGone are the forwarded requests refused by engines that
	// have since crashed.
	refusedGone uint64
	// stallNode opens stalled frames until stallEnd (0: no spell);
	// stalled are the frames it holds open, which outlive the spell
	// until their read deadlines; inb are the nodes' inbound budgets.
	stallNode uint64
	stallEnd  time.Time
	stalled   []*stalledFrame
	inb       map[uint64]*nodeInbound
	// slowFrom's link to slowTo is slow until slowEnd (0: no spell);
	// heads are the frames being read slowly, which outlive the spell
	// until they are whole or their connection closes (cslow.go).
	slowFrom, slowTo uint64
	slowEnd          time.Time
	heads            []*slowHead
	// conns is the connection flood and every node's connection slots
	// (cconns.go).
	conns connFlood
}

// startPeerFaults starts a spell of forged terms, of a flood or of
// stalled frames (each from a member, for 100 ms – 2 s), sends the
// flood's next burst and opens the next stalled frame.
func (c *sim) startPeerFaults() {
	p, rates := &c.peerf, c.cfg.Faults.Peer
	c.startSpell(rates.Terms, &p.termNode, &p.termEnd, &c.faults.TermSpells, "forges terms")
	c.startSpell(rates.Flood, &p.floodNode, &p.floodEnd, &c.faults.FloodSpells, "floods forwarded requests")
	if p.floodNode != 0 && c.rng.IntN(32) == 0 {
		c.floodBurst()
	}
	// One staller at a time, and not before the last one's frames are
	// released: two members stalling together can fill the total budget,
	// which the transport does not promise to prevent.
	if len(p.stalled) == 0 {
		c.startSpell(rates.Stall, &p.stallNode, &p.stallEnd, &c.faults.StallSpells, "stalls frames")
	}
	if p.stallNode != 0 && c.rng.IntN(16) == 0 {
		c.stallOpen()
	}
	c.startSlowLink(rates.SlowLink)
	c.startConnFlood(rates.ConnFlood)
}

// startSpell starts, with chance rate, a spell of one kind when none is
// on (*node 0): a member picked at random misbehaves until *end, 100 ms –
// 2 s from now; count counts the spells.
func (c *sim) startSpell(rate float64, node *uint64, end *time.Time, count *int, what string) {
	if *node != 0 || !c.roll(rate) {
		return
	}
	n := c.nodes[c.rng.IntN(len(c.nodes))]
	*node, *end = n.id, c.clk.Now().Add(c.randDuration(100*time.Millisecond, 2*time.Second))
	*count++
	c.event("n%d %s until %v", n.id, what, end.Sub(epoch0))
}

// expirePeerFaults ends the spells whose time is up.
func (c *sim) expirePeerFaults() {
	p := &c.peerf
	now := c.clk.Now()
	if p.termNode != 0 && !now.Before(p.termEnd) {
		c.event("n%d forges no more terms", p.termNode)
		p.termNode = 0
	}
	if p.floodNode != 0 && !now.Before(p.floodEnd) {
		c.event("n%d floods no more", p.floodNode)
		p.floodNode = 0
	}
	if p.stallNode != 0 && !now.Before(p.stallEnd) {
		c.event("n%d opens no more stalled frames", p.stallNode)
		p.stallNode = 0
	}
	if p.slowFrom != 0 && !now.Before(p.slowEnd) {
		c.event("n%d's link to n%d is slow no more", p.slowFrom, p.slowTo)
		p.slowFrom, p.slowTo = 0, 0
	}
	if len(p.stalled) > 0 {
		c.sweepStalls()
	}
	if len(p.heads) > 0 && c.viol == nil {
		c.sweepSlow()
		c.markSwept()
	}
	if c.viol == nil {
		c.expireConnFlood()
	}
}

// peerFaultsOff ends every spell (quiescence, calms); the stalling
// member closes its stalled frames' connections, and the receivers of
// slow frames their connections.
func (c *sim) peerFaultsOff() {
	c.peerf.termNode, c.peerf.floodNode, c.peerf.stallNode = 0, 0, 0
	c.stallsOff()
	c.slowOff()
	c.connsOff()
}

// forging reports whether n forges terms now.
func (c *sim) forging(n *node) bool {
	return c.peerf.termNode == n.id && !c.quiescing && !c.calming()
}

// forgeable reports whether a forged term on m is safe to send (see the
// top of this file): no entries, no snapshot, no leadership transfer.
func forgeable(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp, raftpb.MsgAppResp, raftpb.MsgVote, raftpb.MsgPreVote:
		return m.GetTerm() > 0
	}
	return false
}

// forgeTerms sends, one time in four, a copy of o — a raft message n's
// engine sent — under a forged term, if o carries a forgeable message.
func (c *sim) forgeTerms(n *node, o transport.Message) {
	if c.rng.IntN(4) != 0 {
		return
	}
	p := &c.peerf
	extreme := p.jumped >= termJumpBudget || c.rng.IntN(2) == 0
	var term, jump uint64
	if extreme {
		// The forged terms no group may adopt: at and around the absolute
		// cap (2^62), and the largest a message can carry.
		extremes := [...]uint64{1 << 62, 1<<62 - 1, 1<<62 + 1, math.MaxUint64}
		term = extremes[c.rng.IntN(len(extremes))]
	} else {
		jump = 1 + c.rng.Uint64N(min(maxTermJump, termJumpBudget-p.jumped))
	}
	f, ok := forgedCopy(o, func(t uint64) uint64 {
		if extreme {
			return term
		}
		return t + jump
	})
	if !ok {
		return
	}
	c.faults.ForgedTerms++
	what := fmt.Sprintf("+%d", jump)
	if extreme {
		c.faults.ForgedExtreme++
		what = fmt.Sprintf("=%d", term)
	} else {
		p.jumped += jump
	}
	err := n.ep.Send(f)
	c.event("n%d send %s to=n%d with a forged term %s err=%v", n.id, describeMsg(o), f.To, what, errString(err))
}

// forgedCopy is a copy of o — a metadata or partition raft message,
// alone or batched — whose forgeable raft messages carry the term forge
// makes of theirs; a batch's copy holds only those. It reports false when
// o carries none (or does not decode).
func forgedCopy(o transport.Message, forge func(term uint64) uint64) (transport.Message, bool) {
	one := func(b []byte) ([]byte, bool) {
		m := &raftpb.Message{}
		if proto.Unmarshal(b, m) != nil || !forgeable(m) {
			return nil, false
		}
		t := forge(m.GetTerm())
		m.Term = &t
		out, err := proto.Marshal(m)
		return out, err == nil
	}
	f := transport.Message{To: o.To, From: o.From, Kind: o.Kind, Group: o.Group}
	switch o.Kind {
	case host.KindMetaRaft:
		b, ok := one(o.Payload)
		if !ok {
			return f, false
		}
		f.Payload = b
	case host.KindPartitionRaft:
		if len(o.Payload) < 8 {
			return f, false
		}
		b, ok := one(o.Payload[8:])
		if !ok {
			return f, false
		}
		f.Payload = append(append([]byte(nil), o.Payload[:8]...), b...)
	case host.KindPartitionRaftBatch:
		// count u32, then records: namespace u64, epoch u64, size u32,
		// message.
		b := o.Payload
		out, count := []byte{0, 0, 0, 0}, uint32(0)
		for i := 4; i+20 <= len(b); {
			size := int(binary.LittleEndian.Uint32(b[i+16:]))
			if size > len(b)-i-20 {
				return f, false
			}
			if m, ok := one(b[i+20 : i+20+size]); ok {
				out = append(out, b[i:i+16]...)
				out = binary.LittleEndian.AppendUint32(out, uint32(len(m)))
				out = append(out, m...)
				count++
			}
			i += 20 + size
		}
		if count == 0 {
			return f, false
		}
		binary.LittleEndian.PutUint32(out, count)
		f.Payload = out
	default:
		return f, false
	}
	return f, true
}

// floodBurst sends 4–24 forwarded produce requests of 16–64 KiB from the
// flooding member to one other member, for one partition its metadata
// knows, and one time in two probes the member its last burst went to
// for the last requests of that burst.
func (c *sim) floodBurst() {
	p := &c.peerf
	n := c.node(p.floodNode)
	if n == nil || !n.reachable() || c.quiescing || c.calming() || n.meta == nil {
		return
	}
	parts := n.meta.Snapshot().Partitions
	if len(parts) == 0 || len(c.nodes) < 2 {
		return
	}
	to := c.nodes[c.rng.IntN(len(c.nodes))]
	if to == n {
		return
	}
	ns := parts[c.rng.IntN(len(parts))].NS
	if p.floodID == 0 {
		p.floodID = floodIDBase
	}
	if c.rng.IntN(2) == 0 && p.floodID > floodIDBase {
		// Probes for the last burst's ids: the receiver answers whether
		// it still holds each (a probe costs it nothing to hold).
		for id := max(floodIDBase+1, p.floodID-3); id <= p.floodID; id++ {
			err := n.ep.Send(transport.Message{To: transport.NodeID(p.floodTo), From: transport.NodeID(n.id), Kind: host.KindProbe, Group: id})
			c.faults.FloodProbes++
			c.event("n%d flood probe %d to=n%d err=%v", n.id, id, p.floodTo, errString(err))
		}
	}
	p.floodTo = to.id
	k := 4 + c.rng.IntN(21)
	size := (16 + c.rng.IntN(49)) << 10
	now := n.clk.Now()
	sent := 0
	for range k {
		p.floodID++
		req := &shard.Request{Op: shard.OpProduce, NS: ns, Epoch: floodEpoch, Producer: floodProducer, Seq: p.floodID,
			Messages: []partition.Message{{Payload: make([]byte, size)}}, Deadline: now.Add(2 * time.Second)}
		payload, err := host.EncodeRequest(req, now)
		if err != nil {
			c.fail(0, "n%d encode a flood request: %v", n.id, err)
			return
		}
		if n.ep.Send(transport.Message{To: transport.NodeID(to.id), From: transport.NodeID(n.id), Kind: host.KindRequest, Group: p.floodID, Payload: payload}) == nil {
			sent++
		}
		c.faults.FloodRequests++
	}
	c.event("n%d flood %d requests of %d KiB for %v to=n%d sent=%d", n.id, k, size>>10, ns, to.id, sent)
}

// isFlood reports whether r is one of the flood's requests.
func isFlood(r *shard.Request) bool {
	return r.Producer == floodProducer && r.Epoch == floodEpoch
}

// checkForwardBudget checks invariant 10 after every action: no running
// node ever held more bytes of forwarded requests than its budget
// (host.ForwardStats.PeakHeldBytes); at quiescence (final), none holds
// any.
func (c *sim) checkForwardBudget(final bool) {
	for _, n := range c.nodes {
		if n.eng == nil || n.down {
			continue
		}
		st := n.eng.ForwardStats()
		c.faults.FloodPeakBytes = max(c.faults.FloodPeakBytes, int(st.PeakHeldBytes))
		if st.PeakHeldBytes > simForwardedBytes {
			c.fail(10, "n%d held %d bytes of forwarded requests, its budget is %d", n.id, st.PeakHeldBytes, simForwardedBytes)
			return
		}
		if final && st.HeldBytes != 0 {
			c.fail(10, "n%d still holds %d bytes of forwarded requests at quiescence", n.id, st.HeldBytes)
			return
		}
	}
}

// noteForwardRefusals keeps the forwarded requests n's engine refused
// before it goes down or is removed (its counters go with it).
func (c *sim) noteForwardRefusals(n *node) {
	if n.eng != nil {
		c.peerf.refusedGone += n.eng.ForwardStats().Refused
	}
}

// peerCounts fills in the counts read from the engines: forwarded
// requests refused over a budget, raft messages refused for their term.
func (c *sim) peerCounts(f *FaultCounts) {
	refused := c.peerf.refusedGone
	ms := append([]*metrics.Metrics(nil), c.oldMetrics...)
	for _, n := range c.nodes {
		if n.eng != nil && !n.down {
			refused += n.eng.ForwardStats().Refused
			ms = append(ms, n.m)
		}
	}
	f.FloodRefused = int(refused)
	for _, m := range ms {
		f.TermsRefused += int(sumDrops(m, metrics.ReasonOutOfReach, metrics.ReasonInvalidRaft))
	}
}

// sumDrops is the frames m counted dropped for any of reasons.
func sumDrops(m *metrics.Metrics, reasons ...string) float64 {
	reg := prometheus.NewRegistry()
	if reg.Register(m) != nil {
		return 0
	}
	fams, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != "parkway_frame_drops_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" {
					for _, r := range reasons {
						if l.GetValue() == r {
							sum += mt.GetCounter().GetValue()
						}
					}
				}
			}
		}
	}
	return sum
}

// The inbound frame budget of the simulated nodes (internal/inbound, the
// core transport.TCPBus runs): the TCP defaults' proportions for the
// largest frame (a connection 2×, a peer 2×, the total 4×), and
// timeouts short next to a run (the TCP defaults are 5 s and 30 s).
const (
	simMaxFrame     = transport.DefaultMaxFrame
	simStallTimeout = 250 * time.Millisecond
	simFrameTimeout = 2 * time.Second
	// frameHeader is a frame's header after its length field (from, to,
	// kind, group), charged with the payload.
	frameHeader = 8 + 8 + 1 + 8
)

var simInboundLimits = inbound.Limits{
	MaxConn: 2 * simMaxFrame, MaxPeer: 2 * simMaxFrame, MaxTotal: 4 * simMaxFrame,
	FrameTimeout: simFrameTimeout, StallTimeout: simStallTimeout,
}

// nodeInbound is one running node's inbound budget: what its bus would
// hold. A node that restarts gets a new one, as a new bus would.
type nodeInbound struct {
	n *node
	b *inbound.Budget
	// conns are the connections the other members' own traffic arrives
	// on, one per sender.
	conns map[uint64]*inbound.Conn
	// sweptAt is the node's monotonic time when its read deadlines were
	// last checked (sweepStalls): a frame due by then must be released.
	sweptAt time.Time
}

// stalledFrame is a frame the stalling member opened and never finishes.
type stalledFrame struct {
	from, to *node
	conn     *inbound.Conn
	claimed  int64
	// got is the bytes of the payload sent; dribble says whether more
	// come now and then (never the last byte).
	got     int64
	dribble bool
	// begun is when its length field arrived, last when its last whole
	// StallChunk did (the receiver's monotonic clock).
	begun, last time.Time
}

// inboundOf is n's inbound budget, made for n's current incarnation.
func (c *sim) inboundOf(n *node) *nodeInbound {
	p := &c.peerf
	if p.inb == nil {
		p.inb = make(map[uint64]*nodeInbound)
	}
	in := p.inb[n.id]
	if in == nil || in.n != n {
		in = &nodeInbound{n: n, b: inbound.New(simInboundLimits), conns: make(map[uint64]*inbound.Conn), sweptAt: n.clk.monoNow()}
		p.inb[n.id] = in
	}
	return in
}

// frameIn runs m, taken off n's endpoint, through n's inbound budget as
// one frame arriving whole: its length field, its charge, each chunk, its
// end. It returns the message's charge (frameOut gives it back once the
// engine took the message), or false when the message is not to be
// handed over now: the budget refused the frame (its connection closes
// and the message is lost, which only the stalling member's own traffic
// may suffer: invariant 13), or the frame waits behind a slow one on its
// connection, or is read slowly itself (cslow.go).
func (c *sim) frameIn(n *node, m transport.Message) (inbound.Charge, bool) {
	in := c.inboundOf(n)
	from := uint64(m.From)
	if from == n.id {
		// TCPBus puts a message to itself straight into its inbox: no
		// frame, no charge.
		return inbound.Charge{}, true
	}
	if len(c.peerf.heads) > 0 {
		if h := c.headOn(n, from); h != nil {
			// Its bytes are behind the slow frame's on the connection.
			h.behind = append(h.behind, m)
			c.faults.SlowQueued++
			c.event("n%d: n%d's frame waits behind its slow one (%d behind)", n.id, from, len(h.behind))
			return inbound.Charge{}, false
		}
	}
	conn := in.conns[from]
	if conn == nil {
		conn = in.b.Open(from)
		in.conns[from] = conn
	}
	now := n.clk.monoNow()
	conn.Begin(now)
	size := int64(frameHeader + len(m.Payload))
	if !conn.Admit(size) {
		conn.Close()
		delete(in.conns, from)
		if c.stalling(from) {
			c.faults.StallerRefused++
			c.event("n%d refuses n%d's frame of %d bytes over budget (it stalls frames): connection closed", n.id, from, size)
			return inbound.Charge{}, false
		}
		c.fail(13, "n%d refused n%d's frame of %d bytes over its inbound budget (holding %d, n%d's share %d): another member's stalls starve it",
			n.id, from, size, in.b.Used(), from, in.b.PeerUsed(from))
		return inbound.Charge{}, false
	}
	if c.slowLink(from, n.id) {
		c.beginSlow(n, conn, m, now)
		return inbound.Charge{}, false
	}
	for k := int64(inbound.StallChunk); k < int64(len(m.Payload)); k += inbound.StallChunk {
		conn.Next(now)
	}
	return conn.Complete(), true
}

// frameOut gives back the charge of a message n's engine took.
func (c *sim) frameOut(n *node, ch inbound.Charge) {
	c.inboundOf(n).b.Release(ch)
}

// stalling reports whether node id stalls frames now or holds stalled
// frames still.
func (c *sim) stalling(id uint64) bool {
	p := &c.peerf
	if p.stallNode == id {
		return true
	}
	for _, f := range p.stalled {
		if f.from.id == id {
			return true
		}
	}
	return false
}

// stallOpen makes the stalling member open a connection to another
// running member and send it the length field and header of a frame
// claiming MaxFrame/4 to MaxFrame bytes, and then, for one frame in two,
// some of its payload now and then (dribbleStalls), never its end.
func (c *sim) stallOpen() {
	p := &c.peerf
	n := c.node(p.stallNode)
	if n == nil || !n.reachable() || c.quiescing || c.calming() || len(c.nodes) < 2 {
		return
	}
	to := c.nodes[c.rng.IntN(len(c.nodes))]
	if to == n || to.down || to.stopped || !c.net.Linked(transport.NodeID(n.id), transport.NodeID(to.id)) {
		return
	}
	in := c.inboundOf(to)
	claimed := simMaxFrame/4 + c.rng.Int64N(simMaxFrame*3/4+1)
	dribble := c.rng.IntN(2) == 0
	now := to.clk.monoNow()
	conn := in.b.Open(n.id)
	conn.Begin(now)
	c.faults.StalledFrames++
	if !conn.Admit(claimed) {
		conn.Close()
		c.faults.StallRefused++
		c.event("n%d stalls a frame of %d bytes to n%d: refused over budget (n%d's share %d, total %d)", n.id, claimed, to.id, n.id, in.b.PeerUsed(n.id), in.b.Used())
		return
	}
	p.stalled = append(p.stalled, &stalledFrame{from: n, to: to, conn: conn, claimed: claimed, dribble: dribble, begun: now, last: now})
	c.faults.StallPeakBytes = max(c.faults.StallPeakBytes, int(in.b.Peak()))
	c.event("n%d stalls a frame of %d bytes to n%d (dribble=%v): charged, n%d's share %d", n.id, claimed, to.id, dribble, n.id, in.b.PeerUsed(n.id))
}

// sweepStalls moves the stalled frames on: one in four dribbling frames
// whose link is not cut sends up to a StallChunk more (each whole chunk restarts its stall
// deadline), and every node's due read deadlines close their
// connections, releasing their frames, as TCPBus's read deadlines do. A
// frame whose receiver went down went with its bus; one whose sender
// went down is closed.
func (c *sim) sweepStalls() {
	p := &c.peerf
	kept := p.stalled[:0]
	for _, f := range p.stalled {
		to := f.to
		switch {
		case c.node(to.id) != to || to.down:
			continue // the receiver's bus is gone, and its budget with it
		case c.node(f.from.id) != f.from || f.from.down:
			f.conn.Close()
			c.event("n%d's stalled frame to n%d closed: its sender went down", f.from.id, to.id)
			continue
		case to.stopped:
			kept = append(kept, f) // a stopped node's deadlines fire when it resumes
			continue
		}
		now := to.clk.monoNow()
		if f.dribble && !f.from.stopped && f.got < f.claimed-frameHeader-1 &&
			c.net.Linked(transport.NodeID(f.from.id), transport.NodeID(to.id)) && c.rng.IntN(4) == 0 {
			before := f.got / inbound.StallChunk
			f.got = min(f.got+1+c.rng.Int64N(inbound.StallChunk), f.claimed-frameHeader-1)
			if f.got/inbound.StallChunk > before {
				f.conn.Next(now)
				f.last = now
			}
		}
		if f.conn.Due(now) {
			f.conn.Close()
			c.faults.StallTimeouts++
			c.event("n%d closes n%d's stalled frame of %d bytes (%d sent) at its read deadline", to.id, f.from.id, f.claimed, f.got)
			c.checkClosed(to, f.from.id, f.conn)
			continue
		}
		kept = append(kept, f)
	}
	clear(p.stalled[len(kept):])
	p.stalled = kept
	c.markSwept()
}

// markSwept records that every running node's read deadlines were
// checked now (invariant 13 judges the frames still charged against it).
func (c *sim) markSwept() {
	for _, n := range c.nodes {
		if !n.down && !n.stopped {
			c.inboundOf(n).sweptAt = n.clk.monoNow()
		}
	}
}

// stallsOff closes the stalling member's connections (quiescence, calms).
func (c *sim) stallsOff() {
	p := &c.peerf
	if len(p.stalled) > 0 {
		c.event("n%d closes its %d stalled frames", p.stalled[0].from.id, len(p.stalled))
	}
	for _, f := range p.stalled {
		f.conn.Close()
	}
	p.stalled = nil
}

// checkInbound checks invariant 13 after every action: no running node's
// inbound budget holds more than its bounds (per connection, per peer, in
// total), and no stalled frame is still charged once the receiver's
// last sweep passed its deadline — the simulator's own account of it:
// simStallTimeout after its last whole chunk, simFrameTimeout after its
// length field. At quiescence (final) no node holds any inbound bytes.
// (frameIn checks the third part: the other members' frames are never
// refused.)
func (c *sim) checkInbound(final bool) {
	lim := simInboundLimits
	for _, n := range c.nodes {
		if n.down || c.peerf.inb[n.id] == nil || c.peerf.inb[n.id].n != n {
			continue
		}
		in := c.peerf.inb[n.id]
		b := in.b
		if b.Peak() > lim.MaxTotal {
			c.fail(13, "n%d's inbound budget held %d bytes, its total is %d", n.id, b.Peak(), lim.MaxTotal)
			return
		}
		for _, id := range c.memberIDs() {
			if u := b.PeerUsed(id); u > lim.MaxPeer {
				c.fail(13, "n%d holds %d inbound bytes of n%d, a peer's share is %d", n.id, u, id, lim.MaxPeer)
				return
			}
		}
		if final && b.Used() != 0 {
			c.fail(13, "n%d still holds %d inbound bytes at quiescence", n.id, b.Used())
			return
		}
	}
	for _, f := range c.peerf.stalled {
		if f.conn.Used() > lim.MaxConn {
			c.fail(13, "n%d holds %d bytes on a connection of n%d, a connection's budget is %d", f.to.id, f.conn.Used(), f.from.id, lim.MaxConn)
			return
		}
		in := c.peerf.inb[f.to.id]
		if in == nil || in.n != f.to || f.to.down || f.conn.Used() == 0 {
			continue
		}
		if c.overdue(in, f.begun, f.last) {
			c.fail(13, "n%d still holds n%d's stalled frame of %d bytes %v past its read deadline (%d bytes sent, the last whole chunk %v ago)",
				f.to.id, f.from.id, f.claimed, in.sweptAt.Sub(readDeadline(f.begun, f.last)), f.got, in.sweptAt.Sub(f.last))
			return
		}
	}
	c.checkSlow()
}

// readDeadline is the simulator's own account of when a frame being read
// must be closed: simStallTimeout after its last whole chunk (last),
// simFrameTimeout after its length field (begun), whichever is first.
func readDeadline(begun, last time.Time) time.Time {
	due := last.Add(simStallTimeout)
	if end := begun.Add(simFrameTimeout); end.Before(due) {
		due = end
	}
	return due
}

// overdue reports whether the receiver's last sweep of its read
// deadlines (in) passed a frame's deadline.
func (c *sim) overdue(in *nodeInbound, begun, last time.Time) bool {
	return !in.sweptAt.Before(readDeadline(begun, last))
}

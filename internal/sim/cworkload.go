package sim

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Cluster clients. A client talks to one node per operation (its home,
// picked among the running nodes), as a host calls its local Node:
// partition requests go through the home node's router; a "not leader"
// answer is followed to the hinted leader, forwarded there over the bus
// by the home node's engine as the Node's call does (cforward.go), and a
// "retry here" answer brings the operation back home after a pause.
// A produce keeps its (producer, sequence) pair over every try, so the
// partition deduplicates a retry of a batch that was applied after all.
// Metadata commands are proposed to the home node's metadata group member
// (which forwards to the leader) and are proposed again after
// forwardTicks ticks without a commit, with the same deduplication key.

// regrouped reports whether the raft group member that answered a — the
// partition replica on a's node for the incarnation a was stamped with —
// was started more than once (the node restarted, or the partition was
// rebuilt after a failed fsync), so that it reissued proposal ids
// (knownProposalIDs).
func (c *sim) regrouped(a *attempt) bool {
	return c.builds[buildKey{a.node.id, incKey{a.op.ns, a.stamp}}] > 1
}

// buildKey names a replica: a node and an incarnation.
type buildKey struct {
	node uint64
	key  incKey
}

// BreakNoProducerIDs, when set, makes the simulated clients produce
// without a (producer, sequence) pair and send a produce whose outcome
// was unknown again all the same (the Node's call does not: without the
// pair it ends with the unknown outcome, host.RetriesUnknown), so a
// partition cannot deduplicate the retry: a broken client, for the proof
// that the simulator catches double applies. Only tests set it.
var BreakNoProducerIDs atomic.Bool

// maxBrokenRetries bounds the tries of one produce under
// BreakNoProducerIDs, whose retries of unknown outcomes no deadline ends.
const maxBrokenRetries = 20

// metaProducer is the producer id of every metadata proposal the clients
// make; sequences are unique within a run.
const metaProducer = 0x5eed

// metaOp is a metadata operation: one to three commands, each computed
// from the previous one's result.
type metaOp struct {
	desc  string
	steps []func(prev metadata.Result) metadata.Command
	step  int
	// The command in flight: its key and encoded proposal.
	key      host.MetadataKey
	cmd      metadata.Command
	proposed bool
	// ask paces the command's proposals as the engine's metadata
	// apply-and-retry does (host.AskDriver); a proposal not committed by
	// until is given up and made again after a pause.
	ask     host.AskDriver
	until   time.Time
	created []metadata.PartitionInfo
	result  metadata.Result // the last command's
}

// running lists the nodes clients can reach: those running, once they
// are members (a node joining serves clients once its addition applied,
// when AddNode returns).
func (c *sim) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.reachable() && n.joined {
			out = append(out, n)
		}
	}
	return out
}

// pickNode picks a running node (nil if none): a single node's clients
// reach the one node there is, without a draw.
func (c *sim) pickNode() *node {
	if c.net == nil {
		return c.nodes[0]
	}
	r := c.running()
	if len(r) == 0 {
		return nil
	}
	return r[c.rng.IntN(len(r))]
}

// appliedTries maps each incarnation to the try of o whose messages were
// appended to it. A produce retried after an unknown outcome carries the
// same (producer, sequence) pair, so the partition applies it at most
// once per incarnation; a retry that lands in a recreated incarnation of
// the namespace is applied there as well (deduplication is per
// incarnation, and the old one is on its way out). It reports false after
// recording a violation: two tries applied to one incarnation.
func (c *sim) appliedTries(o *op) (map[incKey]*attempt, bool) {
	out := make(map[incKey]*attempt)
	for _, x := range o.attempts {
		if len(x.ids) == 0 || !c.msgs[x.ids[0]].appended {
			continue
		}
		key := c.msgs[x.ids[0]].key
		if prev := out[key]; prev != nil {
			c.fail(5, "op %d applied twice to %v: attempts %d and %d are both in the log (deduplication failed)", o.id, key, prev.id, x.id)
			return nil, false
		}
		out[key] = x
	}
	return out, true
}

// callOf is o's client call driver, a call of its home node's engine
// (startCall).
func (c *sim) callOf(o *op) *host.CallDriver { return &o.call }

// scheduleRetry retries o in place after a pause (doubling, clamped),
// until its deadline: a metadata operation here, a data operation
// through its client call (the home node cannot be reached: a retry).
func (c *sim) scheduleRetry(o *op, err error) {
	now := c.clk.Now()
	if o.kind != kindMeta {
		c.follow(o, nil, c.callOf(o).Answer(now, shard.Response{}, fmt.Errorf("%w: %v", shard.ErrRetry, err)), err)
		return
	}
	c.metaAnswer(o, fmt.Errorf("%w: %v", shard.ErrRetry, err))
}

// metaTimeout gives up on o's proposal, not committed in time: the
// engine's apply-and-retry proposes it again after a pause.
func (c *sim) metaTimeout(o *op) {
	c.ops.MetaRetries++
	c.event("op=%d meta not committed after %d ticks: propose again", o.id, forwardTicks)
	c.metaAnswer(o, fmt.Errorf("%w: not committed yet", shard.ErrRetry))
}

// metaAnswer takes the outcome err of o's proposal as the engine's
// metadata apply-and-retry does (host.AskDriver): a "retry" pauses and
// proposes again, within the operation's deadline (the caller's context,
// for the engine), anything else ends the operation.
func (c *sim) metaAnswer(o *op, err error) {
	o.meta.proposed = false
	now := c.clk.Now()
	st := o.meta.ask.Answer(now, err)
	if st.Op == host.AskDone {
		c.finish(o, outcomeError, shard.Response{}, err)
		return
	}
	if o.deadline.IsZero() {
		o.deadline = now.Add(requestTimeout)
	}
	if !now.Before(o.deadline) {
		c.finish(o, outcomeNotApplied, shard.Response{}, fmt.Errorf("deadline passed while retrying: %w", err))
		return
	}
	o.waiting, o.retryAt = true, st.At
	if st.At.After(o.deadline) {
		o.retryAt = o.deadline
	}
}

// metaOpStart starts a metadata operation for cl through n, computed from
// n's view of the metadata. Names are few, so deletes and recreates reuse
// slab ids and namespaces.
func (c *sim) metaOpStart(cl *client, n *node, group bool) {
	meta := n.meta
	streams := meta.Streams()
	if c.cfg.MemberPartitions > 0 {
		// A join storm's stream and topic are the members' own: deleted
		// or recreated by the random workload, they took the group with
		// them, every member joined again, and the storm never settled.
		var rest []metadata.StreamInfo
		for _, st := range streams {
			if st.Name != stormStream {
				rest = append(rest, st)
			}
		}
		streams = rest
	}
	var topics []metadata.TopicInfo
	for _, st := range streams {
		topics = append(topics, meta.Topics(st.ID)...)
	}
	m := &metaOp{}
	createTopic := func(name string, parts int) func(metadata.Result) metadata.Command {
		cfg := c.topicConfig(n)
		return func(prev metadata.Result) metadata.Command {
			return metadata.CreateTopic{Stream: prev.Stream, Name: name, Partitions: max(parts, 1), Config: cfg}
		}
	}
	createStream := func(name string) {
		m.desc = "create stream " + name
		m.steps = append(m.steps, func(metadata.Result) metadata.Command { return metadata.CreateStream{Name: name} },
			createTopic("t0", 1+c.rng.IntN(3)))
	}
	if group {
		// A consumer group command (see groupCommand).
		if desc, cmd := groupCommand(c.rng, meta, topics, n.clk.Now()); cmd != nil {
			m.desc = desc
			m.steps = append(m.steps, func(metadata.Result) metadata.Command { return cmd })
		}
	}
	switch w := c.rng.IntN(21); {
	case group:
	case w == 20 && len(topics) > 0:
		// Spread replicas and preferred leaders evenly (after a node
		// joined, onto it): partitions move while the workload goes on.
		m.desc = "rebalance"
		c.ops.Rebalances++
		m.steps = append(m.steps, func(metadata.Result) metadata.Command { return metadata.Rebalance{} })
	case len(streams) == 0 || (w < 2 && len(streams) < maxStreams):
		for i := range maxStreams {
			name := fmt.Sprintf("s%d", i)
			if _, ok := meta.StreamByName(name); !ok {
				createStream(name)
				break
			}
		}
	case w < 3:
		st := streams[c.rng.IntN(len(streams))]
		m.desc = "delete stream " + st.Name
		m.steps = append(m.steps, func(metadata.Result) metadata.Command { return metadata.DeleteStream{Stream: st.ID} })
	case w < 5:
		st := streams[c.rng.IntN(len(streams))]
		m.desc = "recreate stream " + st.Name
		m.steps = append(m.steps, func(metadata.Result) metadata.Command { return metadata.DeleteStream{Stream: st.ID} },
			func(metadata.Result) metadata.Command { return metadata.CreateStream{Name: st.Name} },
			createTopic("t0", 1+c.rng.IntN(3)))
	case w < 8 && len(topics) > 0:
		t := topics[c.rng.IntN(len(topics))]
		m.desc = fmt.Sprintf("delete topic %d/%s", t.Stream, t.Name)
		m.steps = append(m.steps, func(metadata.Result) metadata.Command {
			return metadata.DeleteTopic{Stream: t.Stream, Topic: t.ID}
		})
	case w < 13 && len(topics) > 0:
		// Recreate, preferring the newest topic.
		t := topics[c.rng.IntN(len(topics))]
		if c.rng.IntN(2) == 0 {
			for _, x := range topics {
				if x.CreatedRevision > t.CreatedRevision {
					t = x
				}
			}
		}
		m.desc = fmt.Sprintf("recreate topic %d/%s", t.Stream, t.Name)
		m.steps = append(m.steps, func(metadata.Result) metadata.Command {
			return metadata.DeleteTopic{Stream: t.Stream, Topic: t.ID}
		}, func(metadata.Result) metadata.Command {
			// Mostly with the factor it had, sometimes another one.
			cfg := metadata.TopicConfig{Fsync: metadata.FsyncAlways, Replicas: t.Config.Replicas}
			if c.rng.IntN(4) == 0 {
				cfg = c.topicConfig(n)
			}
			return metadata.CreateTopic{Stream: t.Stream, Name: t.Name, Partitions: max(t.Partitions, 1), Config: cfg}
		})
	case w < 15 && len(topics) > 0:
		t := topics[c.rng.IntN(len(topics))]
		if t.Partitions < maxPartitions {
			m.desc = fmt.Sprintf("add partition %d/%s", t.Stream, t.Name)
			m.steps = append(m.steps, func(metadata.Result) metadata.Command {
				return metadata.CreatePartitions{Stream: t.Stream, Topic: t.ID, Count: 1}
			})
		}
	default:
		st := streams[c.rng.IntN(len(streams))]
		if st.Topics < maxTopics {
			name := freeTopicName(meta, st.ID)
			parts := 1 + c.rng.IntN(3)
			cfg := c.topicConfig(n)
			m.desc = fmt.Sprintf("create topic %d/%s r=%d", st.ID, name, cfg.Replicas)
			m.steps = append(m.steps, func(metadata.Result) metadata.Command {
				return metadata.CreateTopic{Stream: st.ID, Name: name, Partitions: parts, Config: cfg}
			})
		}
	}
	if len(m.steps) == 0 {
		return
	}
	c.nextOp++
	o := &op{id: c.nextOp, client: cl, kind: kindMeta, home: n, meta: m}
	cl.op = o
	c.metaOps = append(c.metaOps, o)
	c.ops.Metadata++
	o.callEv = c.event("call op=%d client=%d n%d meta %s", o.id, cl.id, n.id, m.desc)
	c.nextCommand(o, metadata.Result{})
}

// topicConfig is the configuration of a topic the workload creates
// through n: FsyncAlways, and half the time the default replication
// factor (min(3, nodes)), otherwise one from 1 to the node count n's
// metadata knows (nodes that joined included), so that on
// every cluster size some nodes hold no replica of some partitions and
// requests through them are sent on to one that does.
func (c *sim) topicConfig(n *node) metadata.TopicConfig {
	cfg := metadata.TopicConfig{Fsync: metadata.FsyncAlways}
	if c.rng.IntN(2) == 0 {
		cfg.Replicas = 1 + c.rng.IntN(max(len(n.meta.Nodes()), 1))
	}
	return cfg
}

func freeTopicName(meta *metadata.Store, stream uint32) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("t%d", i)
		if _, ok := meta.TopicByName(stream, name); !ok {
			return name
		}
	}
}

// nextCommand encodes o's next command (from the previous result) and
// proposes it.
func (c *sim) nextCommand(o *op, prev metadata.Result) {
	m := o.meta
	cmd := m.steps[m.step](prev)
	m.step++
	c.nextSeq++
	m.key, m.cmd = host.MetadataKey{Producer: metaProducer, Seq: c.nextSeq}, cmd
	o.deadline = time.Time{}
	m.ask = host.NewAskDriver(forwardTicks*c.cfg.TickInterval, retryMin, retryMax, func(err error) bool { return errors.Is(err, shard.ErrRetry) })
	c.event("op=%d command %T%+v seq=%d", o.id, cmd, cmd, m.key.Seq)
	c.propose(o)
}

// propose proposes o's command through its home node.
func (c *sim) propose(o *op) {
	m := o.meta
	n := c.cur(o.home)
	o.waiting, m.proposed = false, false
	if !n.reachable() {
		c.scheduleRetry(o, errUnreachable)
		return
	}
	ch, err := n.eng.ProposeMetadata(m.key, m.cmd)
	if err != nil {
		c.event("op=%d propose on n%d: %v", o.id, n.id, err)
		c.scheduleRetry(o, err)
		return
	}
	n.waits = append(n.waits, metaWait{o: o, key: m.key, ch: ch})
	m.proposed, m.until = true, m.ask.Fired(c.clk.Now()).At
	o.maybeApplied = true
	c.event("op=%d proposed on n%d", o.id, n.id)
}

// onMetaResult handles the commit of a command a client waited for: the
// next command goes out, or the operation ends — and data operations on
// the partitions it created are issued at once, through random nodes
// whose metadata may not have applied the commit yet.
func (c *sim) onMetaResult(d metaAnswer) {
	o := d.w.o
	m := o.meta
	if o.done || d.w.key != m.key {
		return // an earlier proposal of a command the op is past
	}
	m.proposed = false
	c.event("op=%d committed seq=%d rev=%d err=%v", o.id, m.key.Seq, d.r.Result.Revision, errString(d.r.Err))
	if d.r.Err != nil {
		c.metaAnswer(o, d.r.Err)
		return
	}
	m.created = append(m.created, d.r.Result.Created...)
	m.result = d.r.Result
	if m.step < len(m.steps) {
		o.maybeApplied = false
		c.nextCommand(o, d.r.Result)
		return
	}
	cl := o.client
	c.finish(o, outcomeOK, shard.Response{}, nil)
	created := m.created
	if len(created) == 0 || c.quiescing || c.calming() {
		return
	}
	c.dataAfterCommit(cl, created)
}

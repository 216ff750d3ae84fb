package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

type opKind uint8

const (
	kindProduce opKind = iota + 1
	kindBatch
	kindPoll
	kindStore
	kindGet
	kindMeta // cluster mode: a metadata command (or two) through the metadata group
)

var kindNames = [...]string{kindProduce: "produce", kindBatch: "batch", kindPoll: "poll", kindStore: "store", kindGet: "get", kindMeta: "meta"}

func (k opKind) String() string { return kindNames[k] }

// outcome is how a client operation ended, as the client knows it.
type outcome uint8

const (
	// The zero value: the operation has not ended yet.
	_ outcome = iota
	// outcomeOK: answered with a result.
	outcomeOK
	// outcomeNotApplied: nothing happened — every try was answered "retry
	// here" until the deadline, or the partition went away.
	outcomeNotApplied
	// outcomeError: a definite error with a known meaning (a consumer
	// offset past the end of the log), or a failed read.
	outcomeError
	// outcomeUnknown: a crash or an I/O error; it may or may not have
	// taken effect.
	outcomeUnknown
)

var outcomeNames = [...]string{"pending", "ok", "not-applied", "error", "unknown"}

func (o outcome) String() string { return outcomeNames[o] }

// client issues one operation at a time. Extra clients exist only for
// bursts: they never start operations of their own.
type client struct {
	id    int
	extra bool
	op    *op
	// member makes the client a consumer group member (cmembers.go).
	member *gmember
}

// op is one client operation, over one or more tries (attempts).
type op struct {
	id     uint64
	client *client // nil for the final reads
	kind   opKind
	ns     metadata.Namespace
	// Inputs.
	n     int // messages of a produce
	from  uint64
	count int
	// wait and minCount make a poll a waiting (long) poll.
	wait        time.Duration
	minCount    int
	consumer    string
	useConsumer bool
	offset      uint64
	// local: a cluster poll of the home node's own replica (Start.Local),
	// not the leader's.
	local bool
	// Progress.
	attempts []*attempt
	waiting  bool // for retryAt
	retryAt  time.Time
	deadline time.Time
	// End.
	callEv, retEv int64
	done          bool
	outcome       outcome
	resp          shard.Response
	err           error

	// Cluster mode.
	home *node // the node the client talks to
	// hops counts "not leader" hints followed since the last other answer.
	hops int
	// call decides a data operation's retries and forwards: the driver
	// of the Node's client call, from its home node's engine (startCall).
	call host.CallDriver
	// fwdDeadline is the deadline its forwarded requests carry (cluster
	// mode), set at the first forward.
	fwdDeadline time.Time
	// producer and seq identify a produce across its tries, as the Node's
	// do: the partition deduplicates a batch applied before.
	producer, seq uint64
	// maybeApplied: an earlier try's outcome is unknown, so "not applied"
	// can no longer be concluded.
	maybeApplied bool
	meta         *metaOp
	// acked is the try whose application an acknowledgement reported.
	acked *attempt
	// reach, for a cluster produce, is every link between running nodes
	// that existed at some moment while the op ran (see quorumReached).
	reach links
}

// attempt is one try of an operation: one frame sent through the router.
type attempt struct {
	id    uint64
	op    *op
	req   *shard.Request
	reply chan shard.Response
	ids   []uint64 // message ids of a produce
	// stamp is the committed created_revision of the namespace when a
	// shard last took the frame from its inbox; handles counts how often.
	stamp   uint64
	handles int
	sendEv  int64
	ansEv   int64
	// answered: the engine (or the router) answered; crashed: the node
	// crashed with the frame in flight.
	answered bool
	crashed  bool
	resp     shard.Response
	// served is the incarnation that served the request, when its answer
	// says it was served (a result, or an error from the partition).
	served uint64
	// node is the node it was sent to (cluster mode).
	node *node
	// A forwarded attempt (cluster mode): its home node's engine sent it
	// to node over the bus (host.Forwarding, via the node forwarding).
	// What node's shard answered is captured when node sends the reply
	// (fwdServed, the consumer offset it stored in fwdStored), as the
	// forward may end before the reply arrives, or without it.
	via       *node
	fwd       *host.Forwarding
	fwdServed uint64
	fwdStored *storeRecord
}

// Data operations weigh: produce 34, batch 16, poll 28, store 12, get 10.
func (b *sim) pickKind() opKind {
	switch w := b.rng.IntN(100); {
	case w < 34:
		return kindProduce
	case w < 50:
		return kindBatch
	case w < 78:
		return kindPoll
	case w < 90:
		return kindStore
	default:
		return kindGet
	}
}

// act is the next action of client cl, through node n, when it has no
// operation under way: a metadata command (one in six, and always while
// nothing is committed) or a consumer group command (one in five of the
// rest), which meta issues; the harness's lookup, if it takes its turn
// (the cluster's lookups by name, with their read barrier); a data
// operation, issued by data, on a partition n has seen deleted (one in
// twenty, a client whose view lags: its request parks unstamped, ages
// out, and the retry finds it gone) or else on a committed one.
func (b *sim) act(cl *client, n *node, meta func(group bool), lookup func() bool, data func(metadata.Namespace, opKind)) {
	snap := n.meta.Snapshot()
	if len(snap.Partitions) == 0 || b.rng.IntN(100) < 16 {
		meta(false)
		return
	}
	if b.rng.IntN(100) < 20 {
		meta(true)
		return
	}
	if lookup != nil && lookup() {
		return
	}
	if b.rng.IntN(100) < 5 {
		if gone := n.incs.gone(n.meta); len(gone) > 0 {
			data(gone[b.rng.IntN(len(gone))], b.pickKind())
			return
		}
	}
	p := snap.Partitions[b.rng.IntN(len(snap.Partitions))]
	data(p.NS, b.pickKind())
}

// callData starts a data operation of kind on ns by client cl through its
// home node n: the operation and its first try, recorded, are handed to
// start, the harness's start of the Node's client call.
func (b *sim) callData(cl *client, n *node, ns metadata.Namespace, kind opKind, start func(*op, *attempt)) *op {
	o := b.newDataOp(cl, n, ns, kind, func() uint64 { return b.knownLen(n.meta, ns) })
	a := b.newAttempt(o)
	o.callEv = b.event("call op=%d client=%d %s%v ns=%v%s", o.id, clientID(cl), n.tag(), kind, ns, o.args())
	start(o, a)
	return o
}

// knownLen is the length of the log of ns's incarnation committed in
// meta (a node's view) as the oracle knows it, to pick plausible offsets.
func (b *sim) knownLen(meta *metadata.Store, ns metadata.Namespace) uint64 {
	rev, ok := meta.CreatedRevision(ns)
	if !ok {
		return 0
	}
	if log := b.oracle[incKey{ns, rev}]; log != nil {
		return uint64(len(log.ids))
	}
	return 0
}

// newDataOp draws a partition operation of kind on ns for cl (nil for
// none), through home in a cluster (nil on one node), and records it;
// known is the length of ns's log as the oracle knows it, to pick
// plausible offsets. In a cluster a poll may read the home node's own
// replica (Local), and a produce carries a (producer, sequence) pair over
// all its tries, so the partition deduplicates a retry of a batch that
// was applied after all.
func (b *sim) newDataOp(cl *client, home *node, ns metadata.Namespace, kind opKind, known func() uint64) *op {
	b.nextOp++
	o := &op{id: b.nextOp, client: cl, kind: kind, ns: ns, home: home}
	consumers := [...]string{"c0", "c1"}
	switch kind {
	case kindProduce:
		o.n = 1
		b.ops.Produce++
	case kindBatch:
		o.n = 2 + b.rng.IntN(4)
		b.ops.ProduceBatch++
	case kindPoll:
		if b.rng.IntN(10) < 4 {
			o.from = 0
		} else {
			o.from = uint64(b.rng.IntN(int(known()) + 3))
		}
		o.count = 1 + b.rng.IntN(8)
		if b.rng.IntN(4) == 0 {
			o.useConsumer, o.consumer = true, consumers[b.rng.IntN(2)]
		}
		if home.replicated() {
			o.local = b.rng.IntN(5) == 0
		}
		// A waiting poll from a consumer's stored offset resolves its start
		// when it registers and reads when it is answered: two points in
		// time, which the single-point linearizability model cannot place
		// (it flagged correct answers on cluster seeds 6491 and 7618). Waiting
		// polls here start at an offset; the shard tests cover the rest.
		if !o.useConsumer && b.rng.IntN(4) == 0 {
			// A waiting poll (behaviour 22): answered when enough messages
			// are there (woken at the leader's apply or, local, at this
			// replica's), at its wait's end, or when its partition goes.
			o.wait = time.Duration(1+b.rng.IntN(300)) * time.Millisecond
			o.minCount = 1 + b.rng.IntN(3)
		}
		b.ops.Poll++
	case kindStore:
		o.consumer = consumers[b.rng.IntN(2)]
		o.offset = uint64(b.rng.IntN(int(known()) + 2))
		b.ops.StoreOffset++
	case kindGet:
		o.consumer = consumers[b.rng.IntN(2)]
		b.ops.GetOffset++
	}
	if home.replicated() && (kind == kindProduce || kind == kindBatch) && !BreakNoProducerIDs.Load() {
		o.producer = 1 + uint64(clientID(cl)+1)
		o.seq = o.id
	}
	if cl != nil {
		cl.op = o
	}
	b.allOps = append(b.allOps, o)
	return o
}

func clientID(c *client) int {
	if c == nil {
		return -1
	}
	return c.id
}

func (o *op) args() string {
	switch o.kind {
	case kindProduce, kindBatch:
		return fmt.Sprintf(" n=%d", o.n)
	case kindPoll:
		w := ""
		if o.wait > 0 {
			w = fmt.Sprintf(" wait=%v min=%d", o.wait, o.minCount)
		}
		if o.useConsumer {
			return fmt.Sprintf(" consumer=%s count=%d%s", o.consumer, o.count, w)
		}
		return fmt.Sprintf(" from=%d count=%d%s", o.from, o.count, w)
	case kindStore:
		return fmt.Sprintf(" consumer=%s offset=%d", o.consumer, o.offset)
	case kindGet:
		return " consumer=" + o.consumer
	}
	return ""
}

// sendTo sends a through node n's router, as the Node's client call
// sends a try: a full inbox (router.ErrFull) is an answer (onAnswer);
// any other refusal is a violation.
func (b *sim) sendTo(a *attempt, n *node) {
	a.node = n
	a.sendEv = b.event("send a=%d op=%d%s", a.id, a.op.id, n.suffix())
	if _, err := n.rt.Send(a.op.ns, shard.Frame{Req: a.req, Reply: a.reply}); err != nil {
		if !errors.Is(err, router.ErrFull) {
			b.fail(0, "%srouter refused attempt %d with %v", n.tag(), a.id, err)
			return
		}
		b.onAnswer(a, shard.Response{Err: err})
		return
	}
	b.inflight = append(b.inflight, a)
}

// retryable is the Node's retry-in-place rule (host.RetryInPlace): "retry
// here" answers and full inboxes.
func retryable(err error) bool { return host.RetryInPlace(err) }

// servedAnswer reports whether an answer comes from the request's
// partition (a result, or an error the partition returned), as opposed to
// a shard or router refusing it.
func servedAnswer(err error) bool {
	return err == nil || !retryable(err) && !errors.Is(err, shard.ErrPartitionFailed) && !errors.Is(err, shard.ErrClosed)
}

// onAnswer handles an attempt's answer, from a node of either kind. The
// checks on the answer are the simulator's; what the client does next is
// the Node's client call (host.CallDriver) deciding.
func (b *sim) onAnswer(a *attempt, r shard.Response) {
	o, n := a.op, a.node
	if a.answered {
		b.fail(1, "attempt %d answered twice", a.id)
		return
	}
	a.answered, a.resp = true, r
	// An unknown outcome in a cluster is the leader's, not the
	// incarnation's answer; the client call retries it or ends with it
	// (host.RetriesUnknown).
	unknown := n.replicated() && errors.Is(r.Err, shard.ErrOutcomeUnknown)
	switch {
	case a.fwd != nil:
		a.served = a.fwdServed // captured when the node sent its answer
	case servedAnswer(r.Err) && !errors.Is(r.Err, shard.ErrNotLeader) && !unknown:
		a.served = n.lastServe[o.ns]
	}
	a.ansEv = b.event("answer a=%d op=%d %s%s", a.id, o.id, n.tag(), describe(r))
	var nl *shard.NotLeaderError
	switch {
	case r.Err == nil:
		o.hops = 0
		b.onSuccess(a, r)
		return
	case errors.As(r.Err, &nl):
		b.ops.NotLeader++
		if info, ok := n.meta.Partition(o.ns); ok && !info.Holds(n.id) {
			b.ops.NotHeld++
		}
		if !b.checkNotApplied(a, r.Err) {
			return
		}
		b.follow(o, a, o.call.Answer(b.clk.Now(), r, nil), r.Err)
		return
	case unknown:
		// The Node retries an unknown outcome in a cluster when sending
		// the request again is safe: a produce's retry carries the same
		// (producer, sequence) pair, a read changes nothing. A consumer
		// offset store is not sent again (stored again after another
		// client's later store, it would undo that one): its call ends
		// with the unknown outcome.
		b.ops.UnknownAnswers++
		o.maybeApplied, o.hops = true, 0
		b.follow(o, a, o.call.Answer(b.clk.Now(), r, nil), r.Err)
		return
	case retryable(r.Err):
		o.hops = 0
		if !b.checkNotApplied(a, r.Err) {
			return
		}
		b.follow(o, a, o.call.Answer(b.clk.Now(), r, nil), r.Err)
		return
	}
	if !b.damageAnswered(a, r.Err) {
		return
	}
	if o.kind == kindStore && a.fwd == nil && errors.Is(r.Err, partition.ErrOffsetOutOfRange) && r.Offset != o.offset {
		// (A forwarded answer's error carries no offset on the wire.)
		// A refused consumer offset is answered with the offset refused.
		b.fail(5, "attempt %d (op %d) storing %s=%d was answered for offset %d: the answer of another write (%v)",
			a.id, o.id, o.consumer, o.offset, r.Offset, r.Err)
		return
	}
	oc := outcomeError
	switch {
	case (o.kind == kindProduce || o.kind == kindBatch) && errors.Is(r.Err, partition.ErrRolledBack):
		// Not appended, definitely: the failed group commit took
		// its messages back out of the log (checked below and by
		// the rebuild's reopen check).
		b.rolledBack(a)
	case o.kind == kindProduce || o.kind == kindBatch:
		oc = outcomeUnknown
	case o.kind == kindStore && !errors.Is(r.Err, partition.ErrOffsetOutOfRange):
		oc = outcomeUnknown
	}
	if !n.replicated() && !servedAnswer(r.Err) && oc == outcomeUnknown {
		// Refused before reaching the partition: no effect. (A
		// replicated proposal may commit after its proposer answered an
		// error: a partition fenced, evicted or closed with it pending.)
		oc = outcomeError
	}
	b.finish(o, oc, r, r.Err)
}

// checkNotApplied: an answer that means "not applied, try again" (here or
// elsewhere) must not come for a produce whose messages were appended
// (invariant 5).
func (b *sim) checkNotApplied(a *attempt, err error) bool {
	for _, id := range a.ids {
		if info := b.msgs[id]; info.appended {
			b.fail(5, "attempt %d (op %d) was answered %q (not applied) but its message %d was appended to %v at %d",
				a.id, a.op.id, err, id, info.key, info.off)
			return false
		}
	}
	return true
}

// rolledBack records that a's messages were taken back out of their log
// by a failed group commit (partition.ErrRolledBack): the oracle drops
// them and whatever follows them in their incarnation's log (the rest of
// the failed group), none of which may have been acknowledged, so the
// reopen after the partition's rebuild, and any later append, must find
// the log ending where theirs began.
func (b *sim) rolledBack(a *attempt) {
	for _, id := range a.ids {
		info := b.msgs[id]
		if info == nil || !info.appended {
			continue
		}
		log := b.oracle[info.key]
		if log == nil || info.off >= uint64(len(log.ids)) || log.ids[info.off] != id {
			continue
		}
		for off := info.off; off < uint64(len(log.ids)); off++ {
			if log.acked[off] {
				b.fail(3, "attempt %d was answered %q, but acknowledged message %d at %v/%d follows it",
					a.id, a.resp.Err, log.ids[off], info.key, off)
				return
			}
			b.msgs[log.ids[off]].appended = false
		}
		b.event("rolled back %v to %d (a=%d)", info.key, info.off, a.id)
		log.ids, log.acked = log.ids[:info.off], log.acked[:info.off]
		return
	}
}

func describe(r shard.Response) string {
	if r.Err != nil {
		return "err=" + r.Err.Error()
	}
	if len(r.Messages) == 0 {
		return fmt.Sprintf("ok offset=%d found=%v", r.Offset, r.Found)
	}
	first, last := r.Messages[0], r.Messages[len(r.Messages)-1]
	idf, _ := decodePayload(first.Payload)
	idl, _ := decodePayload(last.Payload)
	return fmt.Sprintf("ok offset=%d msgs=%d [%d:%d .. %d:%d]", r.Offset, len(r.Messages), first.Offset, idf, last.Offset, idl)
}

// callStep carries out the client call's step st after o's try was
// answered cause (host.CallDriver, the Node's client call): a wait is a
// retry in place at its time, and the end of the call (its deadline
// passed while retrying) an operation not applied. A forward is the
// harness's to make first (a cluster's follow).
func (b *sim) callStep(o *op, st host.CallStep, cause error) {
	if BreakNoProducerIDs.Load() && st.Op == host.CallDone && errors.Is(st.Err, shard.ErrOutcomeUnknown) &&
		(o.kind == kindProduce || o.kind == kindBatch) && len(o.attempts) < maxBrokenRetries {
		// The broken client sends its produce again, without the pair
		// that would let the partition apply it once.
		st = host.CallStep{Op: host.CallWait, At: b.clk.Now().Add(time.Millisecond), Err: st.Err}
	}
	switch st.Op {
	case host.CallWait:
		o.waiting, o.retryAt = true, st.At
	case host.CallDone:
		if st.Err == nil {
			b.fail(0, "op %d: the client call ended without an answer after %v", o.id, cause)
			return
		}
		b.finish(o, outcomeNotApplied, shard.Response{}, st.Err)
	default:
		b.fail(0, "op %d: the client call asked for %v after %v", o.id, st.Op, cause)
	}
}

// startCall makes a, o's first try, through its home n as the Node's
// client call does: the engine's call driver (host.Engine.NewCall)
// decides it — to n's owner shard, or in a cluster, for a partition n
// holds no replica of, straight to a live replica, forwarded over the
// bus; its deadline is fixed at its first retry.
func (b *sim) startCall(o *op, a *attempt, n *node) {
	var st host.CallStep
	o.call, st = n.eng.NewCall(a.req)
	switch {
	case st.Op == host.CallForward && n.replicated():
		if to := n.b.node(st.To); to != nil && to.id != n.id {
			o.hops++
			n.b.forward(a, n, to)
			return
		}
		// A replica the simulator does not know (removed): the request
		// goes to the owner shard, which names a live one.
	case st.Op != host.CallSend && !n.replicated():
		b.fail(0, "op %d: the client call asked for %v first", o.id, st.Op)
		return
	}
	b.sendTo(a, n)
}

var errGone = errors.New("sim: partition no longer committed")

// retryCall makes the client call's retry in place of o through node n:
// the Node re-resolves the name there first (a partition no longer
// committed ends the operation), and the call's wake must ask for a
// send, made through n.
func (b *sim) retryCall(o *op, n *node) {
	var gone error
	if _, ok := n.meta.Partition(o.ns); !ok {
		gone = errGone
	}
	st := o.call.Resolved(gone)
	if st.Op == host.CallDone {
		// The driver's decision, as the Node's call takes it: a name
		// that no longer resolves ends the call.
		b.event("retry op=%d: ns=%v no longer committed%s", o.id, o.ns, n.on())
		b.finish(o, outcomeNotApplied, shard.Response{}, st.Err)
		return
	}
	if st.Op != host.CallSend {
		b.fail(0, "op %d: the client call asked for %v at its retry", o.id, st.Op)
		return
	}
	b.ops.Retries++
	b.sendTo(b.newAttempt(o), n)
}

// newAttempt builds the next try of o: a fresh request, and for a produce
// fresh message ids (so the storage tap and the oracle can tell tries
// apart) under the op's one (producer, sequence) pair (none on a single
// node). A cluster read asks the leader unless it is Local.
func (b *sim) newAttempt(o *op) *attempt {
	b.nextAttempt++
	a := &attempt{id: b.nextAttempt, op: o, reply: make(chan shard.Response, 1)}
	req := &shard.Request{NS: o.ns}
	switch o.kind {
	case kindProduce, kindBatch:
		req.Op, req.Producer, req.Seq = shard.OpProduce, o.producer, o.seq
		ts := b.clk.Now().UnixMicro()
		for range o.n {
			b.nextMsg++
			id := b.nextMsg
			a.ids = append(a.ids, id)
			b.msgs[id] = &msgInfo{a: a}
			req.Messages = append(req.Messages, partition.Message{Timestamp: ts, Payload: b.payload(id)})
		}
	case kindPoll:
		req.Op, req.Offset, req.Count = shard.OpPoll, o.from, o.count
		req.Consumer, req.UseConsumer, req.FromLeader = o.consumer, o.useConsumer, o.home.replicated() && !o.local
		req.MaxWait, req.MinCount = o.wait, o.minCount
	case kindStore:
		req.Op, req.Consumer, req.Offset = shard.OpStoreOffset, o.consumer, o.offset
	case kindGet:
		req.Op, req.Consumer, req.FromLeader = shard.OpGetOffset, o.consumer, o.home.replicated() && !o.local
	}
	a.req = req
	b.attempts[req] = a
	b.allAttempts = append(b.allAttempts, a)
	o.attempts = append(o.attempts, a)
	b.ops.Attempts++
	return a
}

// collect takes every answer waiting on an in-flight attempt's reply
// channel, in send order, and hands it to onAnswer. After a violation
// nothing more is taken.
func (b *sim) collect() {
	pending := append([]*attempt(nil), b.inflight...)
	b.inflight = b.inflight[:0]
	for _, a := range pending {
		if b.viol != nil {
			b.inflight = append(b.inflight, a)
			continue
		}
		select {
		case r := <-a.reply:
			b.onAnswer(a, r)
		default:
			b.inflight = append(b.inflight, a)
		}
	}
}

// finish ends o. "Not applied" becomes "unknown" once a try's outcome was
// unknown (cluster mode); a member's operation ends in memberDoneOf.
func (b *sim) finish(o *op, oc outcome, r shard.Response, err error) {
	if oc == outcomeNotApplied && o.maybeApplied {
		oc = outcomeUnknown
	}
	o.done, o.outcome, o.resp, o.err, o.waiting = true, oc, r, err, false
	o.retEv = b.event("done op=%d %v", o.id, oc)
	if oc == outcomeUnknown {
		b.ops.Unknown++
	}
	if o.client != nil {
		o.client.op = nil
		if o.client.member != nil {
			b.memberDoneOf(o.client, o)
		}
	}
}

// waitingOps lists the operations waiting for their retry, in client
// order, then the final reads.
func (b *sim) waitingOps() []*op {
	var out []*op
	for _, c := range b.clients {
		if c.op != nil && c.op.waiting {
			out = append(out, c.op)
		}
	}
	for _, o := range b.finalOps {
		if !o.done && o.waiting {
			out = append(out, o)
		}
	}
	return out
}

// retryDue retries every operation whose pause is over, in client order,
// then the final reads, through the mode's retry (and, a cluster's
// metadata operation whose proposal was not committed in time, its
// metaTimeout).
func (b *sim) retryDue(retry, metaTimeout func(*op)) {
	now := b.clk.Now()
	for _, cl := range b.clients {
		if o := cl.op; o != nil {
			retryIfDue(o, now, retry, metaTimeout)
		}
	}
	for _, o := range b.finalOps {
		if !o.done && o.waiting && !now.Before(o.retryAt) {
			retry(o)
		}
	}
}

// retryIfDue retries o if its pause is over, or gives up on its metadata
// proposal if that is overdue (cluster mode).
func retryIfDue(o *op, now time.Time, retry, metaTimeout func(*op)) {
	switch {
	case o.waiting && !now.Before(o.retryAt):
		retry(o)
	case o.kind == kindMeta && o.meta.proposed && !now.Before(o.meta.until):
		metaTimeout(o)
	}
}

// maxBurstClients bounds the clients added for bursts, so at most
// Clients+maxBurstClients operations are ever in flight: the
// linearizability check is exponential in concurrency.
const maxBurstClients = 8

// burst makes several idle clients send to one partition at once, so
// its shard's small inbox overflows.
func (s *sim) burst() {
	snap := s.nodes[0].meta.Snapshot()
	if len(snap.Partitions) == 0 {
		return
	}
	s.bursts++
	ns := snap.Partitions[s.rng.IntN(len(snap.Partitions))].NS
	k := 4 + s.rng.IntN(7)
	s.event("burst ns=%v requests=%d", ns, k)
	for range k {
		var c *client
		for _, x := range s.clients {
			if x.op == nil {
				c = x
				break
			}
		}
		if c == nil {
			if len(s.clients) >= s.cfg.Clients+maxBurstClients {
				break // every client is busy: concurrency stays bounded
			}
			c = &client{id: len(s.clients), extra: true}
			s.clients = append(s.clients, c)
		}
		kind := kindProduce
		if s.rng.IntN(3) == 0 {
			kind = kindPoll
		}
		s.dataOp(c, s.nodes[0], ns, kind)
	}
}

// Metadata commands. Names are few so that deletes and recreates reuse
// slab ids and namespaces.
const (
	maxStreams    = 2
	maxTopics     = 3
	maxPartitions = 4
)

// metaOp commits one metadata command (or a delete and recreate) for c,
// then issues data operations against the partitions it created at once,
// before any reconciler has seen the commit.
func (s *sim) metaOp(c *client) {
	meta := s.nodes[0].meta
	streams := meta.Streams()
	var topics []metadata.TopicInfo
	for _, st := range streams {
		topics = append(topics, meta.Topics(st.ID)...)
	}
	var created []metadata.PartitionInfo
	switch w := s.rng.IntN(20); {
	case len(streams) == 0 || (w < 2 && len(streams) < maxStreams):
		created = s.createStream()
	case w < 3:
		st := streams[s.rng.IntN(len(streams))]
		s.commit(metadata.DeleteStream{Stream: st.ID})
	case w < 5:
		st := streams[s.rng.IntN(len(streams))]
		if _, err := s.commit(metadata.DeleteStream{Stream: st.ID}); err == nil {
			created = s.createStreamNamed(st.Name)
		}
	case w < 8 && len(topics) > 0:
		t := topics[s.rng.IntN(len(topics))]
		s.commit(metadata.DeleteTopic{Stream: t.Stream, Topic: t.ID})
	case w < 13 && len(topics) > 0:
		// Recreate, preferring the newest topic: the one most likely to
		// have frames parked for an incarnation not built yet.
		t := topics[s.rng.IntN(len(topics))]
		if s.rng.IntN(2) == 0 {
			for _, x := range topics {
				if x.CreatedRevision > t.CreatedRevision {
					t = x
				}
			}
		}
		if _, err := s.commit(metadata.DeleteTopic{Stream: t.Stream, Topic: t.ID}); err == nil {
			created = s.createTopic(t.Stream, t.Name, t.Partitions)
		}
	case w < 15 && len(topics) > 0:
		t := topics[s.rng.IntN(len(topics))]
		if t.Partitions < maxPartitions {
			res, err := s.commit(metadata.CreatePartitions{Stream: t.Stream, Topic: t.ID, Count: 1})
			if err == nil {
				created = res.Created
			}
		}
	default:
		st := streams[s.rng.IntN(len(streams))]
		if st.Topics < maxTopics {
			created = s.createTopic(st.ID, freeTopicName(s.nodes[0].meta, st.ID), 1+s.rng.IntN(3))
		}
	}
	if len(created) == 0 {
		return
	}
	s.dataAfterCommit(c, created)
}

// dataAfterCommit starts data operations right after a metadata command
// created partitions: cl's and up to two idle other clients' (not a
// burst's extra clients nor group members), each through a node it can
// reach (pickNode).
func (s *sim) dataAfterCommit(cl *client, created []metadata.PartitionInfo) {
	if n := s.pickNode(); n != nil {
		s.dataOp(cl, n, created[s.rng.IntN(len(created))].NS, s.pickKind())
	}
	for i, k := 0, s.rng.IntN(3); i < len(s.clients) && k > 0; i++ {
		if x := s.clients[i]; x.op == nil && !x.extra && x.member == nil {
			if n := s.pickNode(); n != nil {
				s.dataOp(x, n, created[s.rng.IntN(len(created))].NS, s.pickKind())
			}
			k--
		}
	}
}

// groupOp commits one consumer group command (see groupCommand).
func (s *sim) groupOp() {
	var topics []metadata.TopicInfo
	for _, st := range s.nodes[0].meta.Streams() {
		topics = append(topics, s.nodes[0].meta.Topics(st.ID)...)
	}
	if _, cmd := groupCommand(s.rng, s.nodes[0].meta, topics, s.nodes[0].clk.Now()); cmd != nil {
		s.commit(cmd) //nolint:errcheck // refusals are part of the workload
	}
}

func (s *sim) createStream() []metadata.PartitionInfo {
	for i := range maxStreams {
		name := fmt.Sprintf("s%d", i)
		if _, ok := s.nodes[0].meta.StreamByName(name); !ok {
			return s.createStreamNamed(name)
		}
	}
	return nil
}

// createStreamNamed creates a stream and one topic in it.
func (s *sim) createStreamNamed(name string) []metadata.PartitionInfo {
	res, err := s.commit(metadata.CreateStream{Name: name})
	if err != nil {
		return nil
	}
	return s.createTopic(res.Stream, "t0", 1+s.rng.IntN(3))
}

func (s *sim) createTopic(stream uint32, name string, partitions int) []metadata.PartitionInfo {
	res, err := s.commit(metadata.CreateTopic{Stream: stream, Name: name, Partitions: max(partitions, 1),
		Config: metadata.TopicConfig{Fsync: metadata.FsyncAlways}})
	if err != nil {
		return nil
	}
	return res.Created
}

// commit applies a metadata command through the durable log, as a
// single node's Node.apply does, and records the incarnations it creates
// and ends.
func (s *sim) commit(cmd metadata.Command) (metadata.Result, error) {
	res, err := s.nodes[0].eng.ApplyMetadata(s.ctx, cmd)
	if err != nil {
		s.event("commit %T%+v err=%v", cmd, cmd, err)
		return res, err
	}
	s.ops.Metadata++
	ev := s.event("commit %T%+v rev=%d created=%d removed=%d", cmd, cmd, res.Revision, len(res.Created), len(res.Removed))
	s.nodes[0].incs.apply(res, ev)
	return res, nil
}

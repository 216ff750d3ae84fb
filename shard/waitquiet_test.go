package shard

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
)

// quietRig is a three-replica partition whose group has quiesced on every
// node after one committed message, its leader's waiting polls on a
// manual clock, and every raft message sent counted.
type quietRig struct {
	n    *replNet
	ns   metadata.Namespace
	lead uint64
	s    *Shard
	clk  *clock.Manual
	sent []raftpb.MessageType
}

func newQuietRig(t *testing.T) *quietRig {
	n, nss, epochs := newQuiescedReplNet(t, 1)
	r := &quietRig{n: n, ns: nss[0]}
	for id := uint64(1); id <= 3; id++ {
		n.materialise(id, r.ns, epochs[0])
	}
	if r.lead = n.tickUntilLeader(r.ns); r.lead == 0 {
		t.Fatal("no leader")
	}
	r.s = n.shard(r.lead)
	c := produce(r.ns, "a")
	r.s.handle(c.f)
	n.settle()
	if a := c.answered(t); a.Err != nil {
		t.Fatal(a.Err)
	}
	n.tick(40) // until the group quiesces everywhere
	if n.awake(1)+n.awake(2)+n.awake(3) != 0 {
		t.Fatal("the group did not quiesce")
	}
	r.clk = clock.NewManual(time.Unix(1000, 0))
	r.s.polls.clock = r.clk
	n.onSend = func(_ uint64, _ metadata.Namespace, m *raftpb.Message) { r.sent = append(r.sent, m.GetType()) }
	return r
}

// poll sends the leader a leader read waiting from offset from.
func (r *quietRig) poll(from uint64, minCount int) call {
	c := poll(r.ns, Request{Offset: from, MaxWait: MaxPollWait, MinCount: minCount, FromLeader: true})
	r.s.handle(c.f)
	r.n.settle()
	return c
}

// expire runs the leader's wait timer past every deadline.
func (r *quietRig) expire() {
	r.clk.Advance(MaxPollWait)
	r.s.waitTimerFired()
	r.n.settle()
}

// An idle consumer's waiting poll at the leader of a quiesced group, from
// the partition's end, costs the group nothing: no read index, no raft
// message, no wake, neither when it registers nor when it is answered
// empty at its deadline, with its own offset as the next one (an empty
// answer serves no data: wait.go says why it needs no confirmation).
// Before, the poll's read index woke the group for a heartbeat round
// every MaxPollWait.
func TestExpiredEmptyWaitingPollOfQuiescedGroupCostsNoRound(t *testing.T) {
	r := newQuietRig(t)
	wakes := testutil.ToFloat64(r.s.m.RaftWakes)
	for round := range 3 { // a consumer re-polling, MaxPollWait after MaxPollWait
		c := r.poll(1, 0)
		c.pending(t)
		r.expire()
		wantBatch(t, c.answered(t), "", 1)
		if len(r.sent) != 0 || r.n.awake(1)+r.n.awake(2)+r.n.awake(3) != 0 {
			t.Fatalf("re-poll %d: sent %v, awake groups %d/%d/%d; want no raft message and the group quiesced",
				round, r.sent, r.n.awake(1), r.n.awake(2), r.n.awake(3))
		}
	}
	if got := testutil.ToFloat64(r.s.m.RaftWakes) - wakes; got != 0 {
		t.Fatalf("%v raft wakes, want none", got)
	}
	// A poll the leader cannot answer from its own end — past it — is
	// confirmed first, as every other leader read: it wakes the group.
	c := r.poll(5, 0)
	c.pending(t)
	if len(r.sent) == 0 {
		t.Fatal("a waiting poll past the end registered without its leader's confirmation")
	}
}

// A waiting poll registered unconfirmed is answered with messages only
// once its leader is confirmed: woken by a message, or holding a partial
// batch at its deadline, it becomes a leader read. A leader cut off from
// its followers therefore never answers it with messages; healed, it
// does.
func TestUnconfirmedWaitingPollServesMessagesOnlyConfirmed(t *testing.T) {
	r := newQuietRig(t)
	woken := r.poll(1, 0)
	partial := r.poll(1, 2)
	p := produce(r.ns, "b")
	r.s.handle(p.f)
	r.n.settle()
	if a := p.answered(t); a.Err != nil {
		t.Fatal(a.Err)
	}
	wantBatch(t, woken.answered(t), "b", 2) // confirmed: the network is whole
	partial.pending(t)
	// The followers are cut off; the deadline passes with one message of
	// the two asked for.
	for id := uint64(1); id <= 3; id++ {
		if id != r.lead {
			r.n.cut[id] = true
		}
	}
	r.expire()
	partial.pending(t) // no confirmation: no messages
	for id := uint64(1); id <= 3; id++ {
		r.n.cut[id] = false
	}
	r.n.tick(3)
	wantBatch(t, partial.answered(t), "b", 2)
}

// A quiesced group's replicas hold nothing for proposals in flight: the
// leader's map of pending proposals and the frame buffer its applied
// entry left are let go as the group quiesces (issue 33: memory per idle
// replica), and the next produce makes them again and is answered.
func TestQuiescedGroupShedsItsProposalState(t *testing.T) {
	r := newQuietRig(t)
	shed := func(when string) {
		t.Helper()
		for id := uint64(1); id <= 3; id++ {
			if o := r.n.shard(id).owned[r.ns]; o.rep.pending != nil || cap(o.rep.proposeBuf) != 0 {
				t.Fatalf("%s: node %d keeps a pending map %v and a frame buffer of %d", when, id, o.rep.pending != nil, cap(o.rep.proposeBuf))
			}
		}
	}
	shed("quiesced")
	c := produce(r.ns, "b")
	r.s.handle(c.f)
	r.n.settle()
	if a := c.answered(t); a.Err != nil {
		t.Fatal(a.Err)
	}
	r.n.tick(40)
	if r.n.awake(1)+r.n.awake(2)+r.n.awake(3) != 0 {
		t.Fatal("the group did not quiesce again")
	}
	shed("quiesced again")
}

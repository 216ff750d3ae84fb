package groups_test

import (
	"errors"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metrics"
)

// member is a groups.Member that records what Step and Process report,
// and keeps the messages its group sends for the test to deliver.
type member struct {
	g        *replica.Group
	accept   bool
	applyErr error
	out      []*raftpb.Message

	quiesced, stepped int
	refused           []string
	failed            error
}

func (h *member) Send(m *raftpb.Message)             { h.out = append(h.out, proto.Clone(m).(*raftpb.Message)) }
func (h *member) Apply(uint64, uint64, []byte) error { return h.applyErr }
func (h *member) LeaderChanged(uint64)               {}
func (h *member) ApplySnapshot(uint64, []byte) error { return nil }
func (h *member) AcceptsQuiesce() bool               { return h.accept }
func (h *member) Quiesced()                          { h.quiesced++ }
func (h *member) Refused(reason string, _ error)     { h.refused = append(h.refused, reason) }
func (h *member) Stepped()                           { h.stepped++ }
func (h *member) Failed(err error)                   { h.failed = err }
func (h *member) process(t *testing.T, r *groups.Reads[int]) (again bool) {
	t.Helper()
	again, err := groups.Process(h.g, h, r)
	if err != nil {
		t.Fatal(err)
	}
	return again
}

// pair is a group of two voters, nodes 1 and 2, where 1 leads and 2
// holds its whole log.
func pair(t *testing.T) (lead, follow *member) {
	t.Helper()
	ms := make([]*member, 2)
	for i := range ms {
		g, err := replica.New(replica.Config{Group: 1, Node: uint64(i + 1), Peers: []uint64{1, 2}, ForwardProposals: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		ms[i] = &member{g: g}
	}
	if err := ms[0].g.Campaign(); err != nil {
		t.Fatal(err)
	}
	var none groups.Reads[int]
	for range 20 { // deliver until quiet
		moved := false
		for _, h := range ms {
			h.process(t, &none)
			out := h.out
			h.out = nil
			for _, m := range out {
				groups.Step(ms[m.GetTo()-1].g, m, ms[m.GetTo()-1])
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	if !ms[0].g.IsLeader() || ms[1].g.Leader() != 1 {
		t.Fatalf("leaders %d and %d, want 1", ms[0].g.Leader(), ms[1].g.Leader())
	}
	for _, h := range ms {
		h.quiesced, h.stepped, h.refused = 0, 0, nil
	}
	return ms[0], ms[1]
}

// A quiesce heartbeat that matches the follower's state quiesces it only
// if its host accepts; refused, it is stepped as the heartbeat it stands
// for.
func TestStepQuiesceOnlyWhenAccepted(t *testing.T) {
	lead, follow := pair(t)
	live := func(uint64) bool { return true }
	if !lead.g.CanQuiesce(live) {
		t.Fatal("a leader whose follower holds its whole log cannot quiesce")
	}
	msgs := lead.g.QuiesceMessages()
	if len(msgs) != 1 {
		t.Fatalf("%d quiesce heartbeats, want 1", len(msgs))
	}
	m := proto.Clone(msgs[0]).(*raftpb.Message)
	groups.Step(follow.g, m, follow)
	if follow.quiesced != 0 || follow.stepped != 1 || replica.IsQuiesce(m) {
		t.Fatalf("a busy follower: quiesced %d stepped %d (quiesce heartbeat left: %v), want 0 1 false",
			follow.quiesced, follow.stepped, replica.IsQuiesce(m))
	}
	var none groups.Reads[int]
	follow.process(t, &none) // its answer is lost
	follow.accept = true
	groups.Step(follow.g, proto.Clone(msgs[0]).(*raftpb.Message), follow)
	if follow.quiesced != 1 || follow.stepped != 1 {
		t.Fatalf("an idle follower: quiesced %d stepped %d, want 1 1", follow.quiesced, follow.stepped)
	}
	if len(follow.refused) != 0 || follow.failed != nil {
		t.Fatalf("refused %v, failed %v", follow.refused, follow.failed)
	}
}

// A message no correct member sends is refused with the reason it is
// counted under, one whose term is out of reach apart (it changes
// nothing: the follower's term stays), and a message raft refuses itself
// with none; the group has work after each.
func TestStepRefusals(t *testing.T) {
	lead, follow := pair(t)
	term := follow.g.Term()
	far := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Term: new(term + replica.MaxTermStep + 1)}
	groups.Step(follow.g, far, follow)
	stranger := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(9)), To: new(uint64(2)), Term: new(term)}
	groups.Step(follow.g, stranger, follow)
	if want := []string{metrics.ReasonOutOfReach, metrics.ReasonInvalidRaft}; !slices.Equal(follow.refused, want) {
		t.Fatalf("refused %q, want %q", follow.refused, want)
	}
	if follow.g.Term() != term || follow.stepped != 2 {
		t.Fatalf("term %d (was %d), stepped %d, want 2", follow.g.Term(), term, follow.stepped)
	}
	// A proposal forwarded while the leader transfers its leadership is
	// dropped by raft: refused, but not as invalid.
	if err := lead.g.TransferLeader(2); err != nil {
		t.Fatal(err)
	}
	prop := &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Entries: []*raftpb.Entry{{Data: make([]byte, 8)}}}
	groups.Step(lead.g, prop, lead)
	if !slices.Equal(lead.refused, []string{""}) || lead.stepped != 1 {
		t.Fatalf("refused %q stepped %d, want [\"\"] and 1", lead.refused, lead.stepped)
	}
}

// A group that failed (here its Ready: the application refused an entry)
// is reported by Process and then by Step, which steps nothing more.
func TestStepAfterFailure(t *testing.T) {
	lead, _ := pair(t)
	if _, err := lead.g.Propose([]byte("x")); err != nil {
		t.Fatal(err)
	}
	lead.applyErr = errors.New("refused")
	var none groups.Reads[int]
	lead.out = nil
	// The entry commits once the follower acknowledges it; the lone
	// Process below only persists and sends it, so commit it by hand.
	if _, err := groups.Process(lead.g, lead, &none); err != nil {
		t.Fatal(err)
	}
	ack := &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Term: new(lead.g.Term()), Index: new(lead.g.Committed() + 1)}
	groups.Step(lead.g, ack, lead)
	if _, err := groups.Process(lead.g, lead, &none); !errors.Is(err, replica.ErrGroupFailed) {
		t.Fatalf("Process = %v, want ErrGroupFailed", err)
	}
	stepped := lead.stepped
	groups.Step(lead.g, ack, lead)
	if !errors.Is(lead.failed, replica.ErrGroupFailed) || lead.stepped != stepped {
		t.Fatalf("failed %v, stepped %d more", lead.failed, lead.stepped-stepped)
	}
	if _, err := groups.Process(lead.g, lead, &none); !errors.Is(err, replica.ErrGroupFailed) {
		t.Fatalf("Process of a failed group = %v, want ErrGroupFailed", err)
	}
}

// Process handles everything ready; with leader reads waiting for a
// confirmation when the voters changed, it asks them again and reports
// the new work, and not otherwise; it takes the confirmations raft
// gives.
func TestProcessReasksReads(t *testing.T) {
	lead, follow := pair(t)
	var r groups.Reads[int]
	if err := r.Ask(lead.g, 10); err != nil {
		t.Fatal(err)
	}
	if lead.process(t, &r) || lead.g.HasReady() {
		t.Fatal("work left, or reported, with the voters unchanged")
	}
	lead.out = nil
	r.VotersChanged()
	if !lead.process(t, &r) || r.ReaskDue() || r.Asked() != 1 {
		t.Fatalf("after a voter change: reask due %v, asked %d", r.ReaskDue(), r.Asked())
	}
	if !lead.g.HasReady() {
		t.Fatal("the read asked again has nothing to send")
	}
	// The heartbeat round confirms it: Process takes the confirmation.
	var none groups.Reads[int]
	lead.process(t, &r)
	for _, m := range lead.out {
		groups.Step(follow.g, m, follow)
	}
	follow.process(t, &none)
	for _, m := range follow.out {
		groups.Step(lead.g, m, lead)
	}
	lead.process(t, &r)
	if r.Asked() != 0 || r.Waiting() != 1 {
		t.Fatalf("after the heartbeat round: asked %d waiting %d, want 0 and 1", r.Asked(), r.Waiting())
	}
}

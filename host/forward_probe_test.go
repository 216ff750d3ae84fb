package host_test

import (
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// TestForwardProbeAnswersWhatIsHeld: a node asked whether it holds a
// forwarded request (KindProbe) answers 1 from its receipt until its
// answer is sent, 0 before and after and for a request it never got; the
// answer goes before the 0, so a sender that hears "not held" has its
// answer already. A malformed probe answer is refused.
func TestForwardProbeAnswersWhatIsHeld(t *testing.T) {
	r := newForwardRig(t)
	clk, e, peer := r.clk, r.e, r.peer
	deliver := func(kind uint8, id uint64, payload []byte) {
		t.Helper()
		r.deliver(t, kind, id, payload)
	}
	// answers are the replies and probe answers the peer got, in order.
	answers := func() (got []string) {
		for len(peer.Recv()) > 0 {
			switch m := <-peer.Recv(); m.Kind {
			case host.KindReply:
				got = append(got, "reply")
			case host.KindProbeReply:
				got = append(got, map[byte]string{0: "lacks", 1: "holds"}[m.Payload[0]])
			}
		}
		return got
	}
	same := func(got []string, want ...string) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
	deliver(host.KindProbe, 7, nil)
	if got := answers(); !same(got, "lacks") {
		t.Fatalf("a probe for a request never sent: %v", got)
	}
	// A poll of a partition the node does not know parks at its shard:
	// held until its deadline answers it.
	req, err := host.EncodeRequest(&shard.Request{Op: shard.OpPoll, NS: metadata.Namespace(1 << 20), Count: 1,
		Deadline: t0.Add(time.Second)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	deliver(host.KindRequest, 8, req)
	deliver(host.KindProbe, 8, nil)
	if got := answers(); !same(got, "holds") {
		t.Fatalf("a probe for a request being served: %v", got)
	}
	for e.Shards()[0].Step() {
	}
	e.PumpReplies()
	deliver(host.KindProbe, 8, nil)
	if got := answers(); !same(got, "holds") {
		t.Fatalf("a probe for a parked request: %v", got)
	}
	clk.Advance(2 * time.Second)
	for e.Shards()[0].Step() {
	}
	e.PumpReplies()
	deliver(host.KindProbe, 8, nil)
	if got := answers(); !same(got, "reply", "lacks") {
		t.Fatalf("a probe after the answer: %v", got)
	}
	err = e.Deliver(transport.Message{From: 2, To: 1, Kind: host.KindProbeReply, Group: 8, Payload: []byte{1, 1}})
	if !errors.Is(err, host.ErrMalformed) {
		t.Fatalf("a two-byte probe answer: %v, want ErrMalformed", err)
	}
}

package host_test

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// TestForwardDuplicateServedOnce: a forwarded request the network
// delivers twice — while the first copy is held, or after it was answered
// — is served and answered once. Served twice, a produce was appended by
// one copy while the other answered "not ready, retry" (parked behind a
// slow build, it met no leader yet), and the sender, which takes the
// first answer, told its caller the write was not applied (cluster
// simulator seed 104). Another request under the same id (other bytes: a
// sender reusing an id, which parkway's do not across restarts since
// they start from a random base) is served.
func TestForwardDuplicateServedOnce(t *testing.T) {
	r := newForwardRig(t)
	clk, e, peer := r.clk, r.e, r.peer
	deliver := func(id uint64, payload []byte) {
		t.Helper()
		r.deliver(t, host.KindRequest, id, payload)
	}
	// serve runs the shard until it answers what it holds past their
	// deadline and returns how many replies the peer got.
	serve := func() (replies int) {
		t.Helper()
		for e.Shards()[0].Step() {
		}
		clk.Advance(2 * time.Second)
		for e.Shards()[0].Step() {
		}
		e.PumpReplies()
		for len(peer.Recv()) > 0 {
			if m := <-peer.Recv(); m.Kind == host.KindReply {
				replies++
			}
		}
		return replies
	}
	// A poll of a partition the node does not know parks at its shard
	// until its deadline answers it: held meanwhile.
	poll := func(offset uint64) []byte {
		t.Helper()
		b, err := host.EncodeRequest(&shard.Request{Op: shard.OpPoll, NS: metadata.Namespace(1 << 20), Count: 1,
			Offset: offset, Deadline: clk.Now().Add(time.Second)}, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	req := poll(0)
	deliver(8, req)
	deliver(8, req) // the network's copy, while the first is held
	if got := serve(); got != 1 {
		t.Fatalf("a request delivered twice while held: %d replies, want 1", got)
	}
	deliver(8, req) // a late copy, after the answer
	if got := serve(); got != 0 {
		t.Fatalf("a copy delivered after the answer: %d replies, want 0", got)
	}
	deliver(8, poll(5)) // other bytes under the same id
	if got := serve(); got != 1 {
		t.Fatalf("another request under a used id: %d replies, want 1", got)
	}
	if st := e.ForwardStats(); st.Duplicates != 2 || st.HeldBytes != 0 {
		t.Fatalf("forward stats %+v, want 2 duplicates and nothing held", st)
	}
}

package host_test

import (
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
)

// TestGroupMemberCycle pins a group member's decisions on a committed
// group: the fence passes for a partition it holds within its lease and
// not past it; a heartbeat that releases nothing is a lease renewal, one
// after a move away from it a commit of nothing acknowledging the
// generation; a commit names its generation, offsets and time; the poll
// starts at the committed offset; a generation older than the member's
// is not adopted.
func TestGroupMemberCycle(t *testing.T) {
	s, err := metadata.NewStore(metadata.Config{Shards: 1, Assign: func(metadata.Namespace, int) int { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(cmd metadata.Command) metadata.Result {
		t.Helper()
		r, err := s.Apply(cmd)
		if err != nil {
			t.Fatalf("%T: %v", cmd, err)
		}
		return r
	}
	st := apply(metadata.CreateStream{Name: "s"})
	tp := apply(metadata.CreateTopic{Stream: st.Stream, Name: "t", Partitions: 2})
	info, _ := s.Topic(st.Stream, tp.Topic)
	apply(metadata.CreateGroup{Stream: st.Stream, Topic: tp.Topic, Name: "g", Revision: info.CreatedRevision})
	const session = 10 * time.Second
	now := int64(1_000_000_000)
	join := apply(metadata.JoinGroup{Stream: st.Stream, Topic: tp.Topic, Revision: info.CreatedRevision, Group: "g",
		Member: "a", SessionTimeout: session, Now: now})
	gm := host.GroupMember{Stream: st.Stream, Topic: tp.Topic, TopicRevision: info.CreatedRevision, Group: "g",
		ID: join.Member, Session: session, Confirmed: now}
	v, err := s.MemberOf(st.Stream, tp.Topic, "g", gm.ID, 0)
	if err != nil || !gm.Adopt(v) || gm.Gen == 0 || len(v.Held) != 2 {
		t.Fatalf("after the join: view %+v err %v, member generation %d", v, err, gm.Gen)
	}
	if err := gm.Fence(s, 0, now+int64(time.Second)); err != nil {
		t.Fatalf("fence within the lease: %v", err)
	}
	if err := gm.Fence(s, 0, now+int64(session)); !errors.Is(err, metadata.ErrUnknownMember) {
		t.Fatalf("fence past the lease: %v, want ErrUnknownMember", err)
	}
	gm.Renewed(now + int64(session) - 1)
	if err := gm.Fence(s, 0, now+int64(session)); err != nil {
		t.Fatalf("fence after a renewal: %v", err)
	}
	gm.Renewed(now) // older: kept the newer start
	if gm.Confirmed != now+int64(session)-1 {
		t.Fatalf("lease start %d after an older renewal, want the newer kept", gm.Confirmed)
	}
	if renew, _ := gm.Heartbeat(s, gm.Gen, now); !renew {
		t.Fatal("a heartbeat that releases nothing is not a lease renewal")
	}
	if l := gm.Lease(); l.Member != gm.ID || l.Session != session || l.TopicRevision != info.CreatedRevision {
		t.Fatalf("lease %+v", l)
	}
	if _, ok := gm.PollFrom(s, 1); ok {
		t.Fatal("a committed offset before any commit")
	}
	c := gm.Commit(gm.Gen, []metadata.GroupOffset{{Partition: 1, Offset: 7}}, now+1)
	if c.Member != gm.ID || c.Generation != gm.Gen || c.Now != now+1 || len(c.Offsets) != 1 || c.Revision != info.CreatedRevision {
		t.Fatalf("commit %+v", c)
	}
	apply(c)
	if off, ok := gm.PollFrom(s, 1); !ok || off != 7 {
		t.Fatalf("poll from %d (%v), want the committed 7", off, ok)
	}
	// A second member takes a partition from the first: it moves in two
	// steps, and the first one's heartbeat is then the commit of nothing
	// that releases it.
	apply(metadata.JoinGroup{Stream: st.Stream, Topic: tp.Topic, Revision: info.CreatedRevision, Group: "g",
		Member: "b", SessionTimeout: session, Now: now + 2})
	v, err = s.MemberOf(st.Stream, tp.Topic, "g", gm.ID, gm.Gen)
	if err != nil || len(v.Revoking) != 1 {
		t.Fatalf("after a second join: view %+v err %v, want a partition revoking", v, err)
	}
	old := gm.Gen
	if !gm.Adopt(v) || gm.Gen <= old {
		t.Fatalf("the new generation %d not adopted (was %d)", v.Generation, old)
	}
	renew, hb := gm.Heartbeat(s, gm.Gen, now+3)
	if renew || len(hb.Offsets) != 0 || hb.Generation != gm.Gen || hb.Member != gm.ID {
		t.Fatalf("heartbeat after a move away: renew %v, command %+v, want a commit of nothing in generation %d", renew, hb, gm.Gen)
	}
	if gm.Adopt(metadata.MemberView{Generation: old}) || gm.Gen == old {
		t.Fatal("an older generation adopted")
	}
}
